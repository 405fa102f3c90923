"""Issue 23's large GPU capture on the H200 machine: record bench/gpu/many_kernels.py (STEPS CUDA-graph replays of 1,000
tiny kernels each: about 24 bytes of .nsys-rep per kernel, so 45,000 steps make over 1 GB), then, in a task allowed 2
GiB (``NSIGHT_SUMMARY_MEMORY=2G``), `nsight stats --json` on it (its own SQLite export included) and `nsight report`
(the export reused), their progress in DIR/stats.err and DIR/report.err, and last one bare `nsys export --type sqlite`
of it for the time ratio. Each command's peak is its whole process tree's (bench/bench.py ``tree_run``: resident sets
summed, sampled every 50 ms, at least the largest process's exact peak). The capture stays on the machine; the numbers
go to DIR/log and DIR/result.json.

    python bench/gpu/large_capture.py [STEPS] [DIR]        (DIR: scratch folder, default /tmp/large)

It takes longer than one device call: start it in the background and poll DIR/done, e.g.
    nohup python bench/gpu/large_capture.py 45000 > /tmp/large.out 2>&1 &
    timeout 580 bash -c 'until [ -e /tmp/large/done ]; do sleep 5; done'; cat /tmp/large/log
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from bench import PY, TreeRun, tree_run  # noqa: E402  (bench/ is no package: the sampler of make bench's tables)

MEMORY = "2G"


def record_many_kernels(nsys: str, capture: Path, steps: int, extra: Sequence[str] = ()) -> TreeRun:
    """Record bench/gpu/many_kernels.py STEPS (and its EXTRA arguments) into CAPTURE (a .nsys-rep path), its graphs'
    kernels as nodes."""
    return tree_run([nsys, "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none",
                     "--cuda-graph-trace=node", "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
                     "--force-overwrite=true", "-o", capture.with_suffix(""), PY, HERE / "many_kernels.py", str(steps),
                     *extra],
                    capture.parent)


def bare_sqlite_export(nsys: str, capture: Path) -> TreeRun:
    """One bare `nsys export --type sqlite` of CAPTURE, the reference of the time ratio, in a folder removed after."""
    bare = capture.parent / "bare"
    bare.mkdir(exist_ok=True)
    try:
        return tree_run([nsys, "export", "--type", "sqlite", "--force-overwrite=true", "-o", bare / "bare.sqlite",
                         capture], bare)
    finally:
        shutil.rmtree(bare)


def progress_log(folder: Path, result: dict[str, object]) -> Callable[[str], None]:
    """A logger for a run polled across device calls: each LINE goes to FOLDER/log with the time, and RESULT as it
    stands to FOLDER/result.json."""

    def log(line: str) -> None:
        with open(folder / "log", "a") as out:
            out.write(f"{time.strftime('%H:%M:%S')} {line}\n")
        (folder / "result.json").write_text(json.dumps(result, indent=1))

    return log


def finish_with_bare_export(nsys: str, capture: Path, result: dict[str, object], log: Callable[[str], None],
                            folder: Path, said: str = "") -> None:
    """The run's last step: one bare SQLite export of CAPTURE into RESULT (the time ratio's reference), logged with
    SAID, then FOLDER/done for the poller."""
    exported = bare_sqlite_export(nsys, capture)
    result["bare_export"] = {"seconds": exported.seconds, "tree_mb": exported.tree_mb}
    log(f"bare sqlite export: {exported.seconds:.1f} s, tree {exported.tree_mb:.0f} MB{said}")
    (folder / "done").touch()


class Run(NamedTuple):
    """A recipe's run: its STEPS and scratch FOLDER (from the command line), the nsys on PATH, the RESULT so far and
    its LOG (:func:`progress_log`)."""

    steps: int
    folder: Path
    nsys: str
    result: dict[str, object]
    log: Callable[[str], None]


def start_run(steps: int, folder: str) -> Run:
    """The run of a recipe called ``[STEPS] [DIR]`` (defaults STEPS, FOLDER): its folder cleared of a former run's
    done/log/result, nsys' version and the machine logged first."""
    count = int(sys.argv[1]) if len(sys.argv) > 1 else steps
    scratch = Path(sys.argv[2] if len(sys.argv) > 2 else folder)
    scratch.mkdir(parents=True, exist_ok=True)
    for stale in ("done", "log", "result.json"):
        (scratch / stale).unlink(missing_ok=True)
    result: dict[str, object] = {"steps": count, "cores": os.cpu_count(), "memory": MEMORY}
    run = Run(count, scratch, shutil.which("nsys") or "nsys", result, progress_log(scratch, result))
    version = subprocess.run([run.nsys, "--version"], capture_output=True, text=True).stdout.strip()
    run.log(f"{version}; {os.cpu_count()} cores; steps {count}")
    return run


def main() -> None:
    steps, folder, nsys, result, log = start_run(45_000, "/tmp/large")
    capture = folder / "many_kernels.nsys-rep"
    recorded = record_many_kernels(nsys, capture, steps)
    result["record"] = {"seconds": recorded.seconds, "trace_bytes": capture.stat().st_size}
    log(f"recorded {capture.stat().st_size:,} bytes in {recorded.seconds:.0f} s")

    env = {**os.environ, "NSIGHT_SUMMARY_MEMORY": MEMORY}
    stats = tree_run([PY, "-m", "nsight_core.cli", "stats", capture, "--json"], folder, env, folder / "stats.err")
    payload = json.loads(stats.stdout)
    family = (payload.get("steps") or {}).get("family") or {}
    result["stats"] = {
        "seconds": stats.seconds, "tree_mb": stats.tree_mb, "largest_mb": stats.largest_mb,
        "kernels": sum(row["instances"] for row in payload["kernels"]) if isinstance(payload["kernels"], list) else 0,
        "export": payload.get("export"), "notes": payload.get("notes"), "steps": family.get("count"),
        "step_p50_ns": family.get("p50_ns"), "mode": (payload.get("steps") or {}).get("mode"),
        "bound": (payload.get("steps") or {}).get("bound"),
        "findings": [(finding["kind"], finding["severity"]) for finding in payload.get("findings", [])],
        "complete": (payload.get("completeness") or {}).get("complete"),
        "coverage": payload.get("coverage")}
    log(f"nsight stats: {stats.seconds:.0f} s, tree {stats.tree_mb:.0f} MB, largest {stats.largest_mb:.0f} MB")

    page = folder / "page.html"
    report = tree_run([PY, "-m", "nsight_core.cli", "report", capture, "-o", page], folder, env, folder / "report.err")
    result["report"] = {"seconds": report.seconds, "tree_mb": report.tree_mb, "largest_mb": report.largest_mb,
                        "page_bytes": page.stat().st_size}
    log(f"nsight report: {report.seconds:.0f} s, tree {report.tree_mb:.0f} MB, largest {report.largest_mb:.0f} MB")

    finish_with_bare_export(nsys, capture, result, log, folder)


if __name__ == "__main__":
    main()
