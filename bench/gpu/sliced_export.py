"""Whether nsight's SQLite export in slices of time (trace/export.py: one `nsys export --times` a slice, side by side)
holds exactly the one-file export's rows with the nsys on PATH, and how much faster it is: what must hold before an nsys
version gets slices (nsys.py SLICED_EXPORT_VERSIONS). For every REPORT that nsys can
read, the one-file export and nsight's export in 2, 4 and 8 slices, each on a fresh copy and timed; then every table:
a table of events (a ``start`` or ``timestamp`` column) must hold, over its slices, the one file's rows as a multiset,
any other table the one file's rows in each slice. Rows are compared by a sum of their hashes and their count, streamed
through sqlite3, so a large capture needs no memory for it.

    python bench/gpu/sliced_export.py DIR REPORT [REPORT...]    (nsys 2025.3: . .gpu/nsys2025/env.sh first)

Writes DIR/log and DIR/result.json (per report: each export's seconds, and the tables that differ: none is the pass),
and DIR/done at the end.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from large_capture import progress_log  # noqa: E402  (this folder, as a script runs)

from nsight_core.nsys import find_nsys  # noqa: E402
from nsight_core.trace.export import SLICE_PATTERN, export  # noqa: E402

SLICES = (2, 4, 8)
TIMED = {"start", "timestamp"}
EXPORT_OWN = {"META_DATA_EXPORT"}
"""Says how each file was exported (its name, its time range, when): not the capture's."""


def tables_of(path: Path) -> dict[str, list[str]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        names = [name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {name: [row[1] for row in connection.execute(f'PRAGMA table_info("{name}")')] for name in names}


def rows_of(path: Path, table: str, columns: list[str]) -> Iterator[tuple[object, ...]]:
    listed = ", ".join(f'"{column}"' for column in columns)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        yield from connection.execute(f'SELECT {listed} FROM "{table}"')


def fingerprint(rows: Iterator[tuple[object, ...]]) -> tuple[int, int]:
    """The rows' count and the sum of their hashes (mod 2**64): equal for the same rows in any order."""
    count, total = 0, 0
    for row in rows:
        count, total = count + 1, (total + hash(row)) % (1 << 64)
    return count, total


def differences(whole: Path, parts: list[Path]) -> list[str]:
    """The tables of the one-file export WHOLE that the slices PARTS do not hold exactly (see the module)."""
    found = []
    in_parts = [tables_of(part) for part in parts]
    for table, columns in tables_of(whole).items():
        if table in EXPORT_OWN:
            continue
        expected = fingerprint(rows_of(whole, table, columns))
        holding = [part for part, tables in zip(parts, in_parts, strict=True) if table in tables]
        if TIMED & set(columns):
            each = [fingerprint(rows_of(part, table, columns)) for part in holding]
            got = (sum(count for count, _ in each), sum(total for _, total in each) % (1 << 64))
            if got != expected:
                found.append(f"{table}: {got[0]:,} rows in the slices, {expected[0]:,} in one file")
        elif len(holding) != len(parts) or any(fingerprint(rows_of(part, table, columns)) != expected
                                               for part in holding):
            found.append(f"{table}: not whole in every slice")
    return found


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    for stale in ("done", "log", "result.json"):
        (folder / stale).unlink(missing_ok=True)
    nsys = find_nsys()
    result: dict[str, object] = {"nsys": nsys.version, "reports": {}}
    log = progress_log(folder, result)
    log(f"nsys {nsys.version} ({nsys.path}); slices {SLICES}")
    for report in map(Path, sys.argv[2:]):
        entry: dict[str, object] = {}
        result["reports"][report.name] = entry  # type: ignore[index]
        exports = {}
        for slices in (1, *SLICES):
            copy = folder / f"{report.stem}-{slices}" / report.name
            shutil.rmtree(copy.parent, ignore_errors=True)
            copy.parent.mkdir()
            shutil.copyfile(report, copy)
            began = time.monotonic()
            try:
                exports[slices] = export(copy, "sqlitedir" if slices > 1 else "sqlite", nsys, slices)
            except Exception as error:  # a capture this nsys cannot read: said, and the next one
                entry["error"] = f"{type(error).__name__}: {error}"[:500]
                log(f"{report.name}: {entry['error']}")
                break
            entry[f"seconds_{slices}"] = round(time.monotonic() - began, 2)
        else:
            for slices in SLICES:
                entry[f"differ_{slices}"] = differences(exports[1], sorted(exports[slices].glob(SLICE_PATTERN)))
            log(f"{report.name}: " + ", ".join(f"{key} {value}" for key, value in entry.items()))
        for made in exports.values():
            shutil.rmtree(made.parent, ignore_errors=True)
    (folder / "done").touch()


if __name__ == "__main__":
    main()
