"""Whether nsys' `--tables` or 2025.3's `--times` make a capture's SQLite export faster than one bare export, split
over processes that run at once (issue 23's 1.0x ratio: nsight's path contains the export, so only a faster export
can reach it). Records bench/gpu/many_kernels.py STEPS, then times one bare `nsys export --type sqlite`, one export of
each large table alone (`--tables=NAME`), the same tables split into GROUPS exported by one process each, all at once
(wall time until the last ends), and the capture cut into 1, 2, 4 and 8 time slices exported at once (`--times`);
last, whether two slices that overlap hold every event of the bare export between them (`--times` keeps the events
wholly inside its range) and the same string table.

    python bench/gpu/export_tables.py DIR STEPS [RECORDER]   (nsys 2025.3 exports: . .gpu/nsys2025/env.sh first)

RECORDER: the nsys that records (default: the one that exports); 2025.3.1's `nsys profile` crashed (exit 139) on the
H200 machine, so its 2023.4.4 records there and 2025.3 exports.

Writes DIR/log and DIR/result.json, and DIR/done at the end.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from large_capture import progress_log, record_many_kernels  # noqa: E402  (this folder, as a script runs)

GROUPS = {"kernels": "CUPTI_ACTIVITY_KIND_KERNEL,GRAPH_TRACE", "runtime": "CUPTI_ACTIVITY_KIND_RUNTIME",
          "rest": "NVTX_EVENTS,StringIds,OSRT_API,COMPOSITE_EVENTS,SYNCHRONIZATION,MEMCPY,MEMSET,TARGET_INFO,META_DATA,"
                  "ENUM_,ANALYSIS_DETAILS,PROCESSES,ThreadNames"}
"""The tables nsight reads, in three groups: the two large ones alone, the rest together."""


def export(nsys: str, capture: Path, target: Path, tables: str | None, times: str | None = None) -> \
        subprocess.Popen[bytes]:
    """One `nsys export --type sqlite` of CAPTURE into TARGET, of TABLES only and events in TIMES only (None: all),
    started."""
    return subprocess.Popen([nsys, "export", "--type", "sqlite", "--force-overwrite=true", "-o", str(target),
                             *([f"--tables={tables}"] if tables else []), *([f"--times={times}"] if times else []),
                             str(capture)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def slices(low: int, high: int, count: int, overlap: int = 0) -> list[str]:
    """COUNT `--times` ranges that cut LOW..HIGH evenly, each reaching OVERLAP ns into the next."""
    cuts = [low + (high - low) * k // count for k in range(1, count)]
    return [f"{a}/{b + overlap if b is not None else ''}" for a, b in zip(["", *cuts], [*cuts, None], strict=True)]


def rows(database: Path, table: str, key: str) -> set[tuple[object, ...]]:
    """TABLE's rows of DATABASE as (start, end, KEY)."""
    with sqlite3.connect(database) as connection:
        return set(connection.execute(f'SELECT start, "end", {key} FROM {table}').fetchall())


def timed(*started: subprocess.Popen[bytes]) -> tuple[float, list[str]]:
    """Wall time until every one of STARTED ended (from now), and the stderr of those that failed."""
    begin = time.perf_counter()
    errors = [p.stderr.read().decode()[-500:] if p.wait() and p.stderr else "" for p in started]
    return time.perf_counter() - begin, [e for e in errors if e]


def main() -> None:
    folder, steps = Path(sys.argv[1]), int(sys.argv[2])
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    nsys = shutil.which("nsys") or "nsys"
    result: dict[str, object] = {"cores": os.cpu_count(), "steps": steps}
    log = progress_log(folder, result)
    result["version"] = subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout.strip()
    capture = folder / "many_kernels.nsys-rep"
    recorded = record_many_kernels(sys.argv[3] if len(sys.argv) > 3 else nsys, capture, steps)
    result["trace_bytes"] = capture.stat().st_size
    log(f"{result['version']}: recorded {capture.stat().st_size:,} bytes in {recorded.seconds:.0f} s")
    for attempt in (1, 2):  # twice: the first also warms the page cache
        seconds, errors = timed(export(nsys, capture, folder / "bare.sqlite", None))
        result[f"bare_{attempt}"] = {"seconds": seconds, "bytes": (folder / "bare.sqlite").stat().st_size,
                                     "errors": errors}
        log(f"bare export {attempt}: {seconds:.1f} s {errors}")
    for name, tables in GROUPS.items():
        seconds, errors = timed(export(nsys, capture, folder / f"{name}.sqlite", tables))
        result[f"alone_{name}"] = {"seconds": seconds, "errors": errors}
        log(f"--tables {name} alone: {seconds:.1f} s {errors}")
    seconds, errors = timed(export(nsys, capture, folder / "all.sqlite", ",".join(GROUPS.values())))
    result["all_read_tables_one_process"] = {"seconds": seconds, "errors": errors}
    log(f"--tables (all nsight reads) in one process: {seconds:.1f} s {errors}")
    seconds, errors = timed(*(export(nsys, capture, folder / f"par_{name}.sqlite", tables)
                              for name, tables in GROUPS.items()))
    result["groups_at_once"] = {"seconds": seconds, "errors": errors}
    log(f"the {len(GROUPS)} groups at once: {seconds:.1f} s {errors}")
    bare = folder / "bare.sqlite"
    with sqlite3.connect(bare) as connection:
        low, high = connection.execute('SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    for count in (1, 2, 4, 8):
        seconds, errors = timed(*(export(nsys, capture, folder / f"slice{count}_{k}.sqlite", None, times)
                                  for k, times in enumerate(slices(low, high, count))))
        result[f"time_slices_{count}"] = {"seconds": seconds, "errors": errors}
        log(f"{count} time slices at once: {seconds:.1f} s {errors}")
    halves = [folder / f"overlap_{k}.sqlite" for k in (0, 1)]
    timed(*(export(nsys, capture, half, None, times) for half, times in zip(halves, slices(low, high, 2, 1_000_000),
                                                                             strict=True)))
    keyed = {"CUPTI_ACTIVITY_KIND_KERNEL": "correlationId", "CUPTI_ACTIVITY_KIND_RUNTIME": "correlationId",
             "NVTX_EVENTS": "text"}
    for table, key in keyed.items():
        whole, first, second = rows(bare, table, key), *(rows(half, table, key) for half in halves)
        result[f"overlap_{table}"] = {"whole": len(whole), "slices": [len(first), len(second)],
                                      "union_is_whole": first | second == whole}
        log(f"{table}: bare {len(whole)}, slices {len(first)} + {len(second)}, union is the bare export's: "
            f"{first | second == whole}")
    strings = [sqlite3.connect(path).execute("SELECT * FROM StringIds").fetchall() for path in (bare, *halves)]
    result["same_strings"] = strings[1] == strings[0] == strings[2]
    log(f"StringIds of each slice equal the bare export's: {result['same_strings']}")
    (folder / "done").touch()


if __name__ == "__main__":
    main()
