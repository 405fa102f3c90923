"""`make bench`: how fast nsight-core turns nsys output into typed stats and a report page.

Targets (what a user waiting on a task's report tab will tolerate on a 2-core machine):
- parsing the five default reports of a capture with 10,000 distinct kernels: under 2 s, under 500 MB peak RSS;
- stats of a real .nsys-rep (the H200 fixture, one export + one `nsys stats` call): under 30 s;
- rendering the HTML page of the 10,000-kernel capture: under 10 s, page under 5 MB.
Results are appended to bench/RESULTS.md with the date and machine, so regressions show in review.
"""

from __future__ import annotations

import datetime
import platform
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nsight_core import load_stats
from nsight_core.profile import build_profile
from nsight_core.render.html import render_page

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "fixtures" / "h200-torch-mlp"
KERNELS = 10_000
HEADER = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"


def write_large_capture(directory: Path) -> Path:
    """Recorded CSVs of a capture with KERNELS distinct templated kernel names."""
    lines = [HEADER]
    for i in range(KERNELS):
        total = (KERNELS - i) * 1000
        lines.append(f'0.01,{total},{i % 50 + 1},{total / 2:.1f},{total / 2:.1f},1,{total},3.5,'
                     f'"void kernel_{i}<float, (int){i % 7}>(T1::Params, int, float *)"\n')
    (directory / "big_cuda_gpu_kern_sum.csv").write_text("".join(lines))
    (directory / "big_nvtx_pushpop_sum.csv").write_text(
        HEADER.replace("Name", "Range") + "".join(f"1.0,{i * 10 + 5},{i + 1},5.0,5.0,5,5,0.0,step_{i}\n"
                                                  for i in range(500)))
    for report in ("cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "cuda_api_sum"):
        (directory / f"big_{report}.csv").write_text("")
    return directory / "big"


def timed(label: str, fn: Callable[[], Any], results: list[str]) -> Any:
    start = time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - start
    results.append(f"| {label} | {seconds:.3f} s |")
    print(f"{label}: {seconds:.3f} s", file=sys.stderr)
    return value


def main() -> None:
    results: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        big = write_large_capture(work)
        label = f"parse 5 reports, {KERNELS:,} distinct kernels (recorded CSVs)"
        stats = timed(label, lambda: load_stats(big), results)
        assert len(stats.kernels) == KERNELS
        rep = work / "training.nsys-rep"
        shutil.copy(FIXTURE / "training.nsys-rep", rep)
        timed("stats of the H200 .nsys-rep (one export + one nsys stats call)", lambda: load_stats(rep), results)
        timed("stats again (export reused)", lambda: load_stats(rep), results)
        profile = build_profile(big)
        page = timed(f"render the page of {KERNELS:,} kernels", lambda: render_page([profile]), results)
        results.append(f"| page size, {KERNELS:,} kernels | {len(page.encode()) / 1e6:.2f} MB |")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    results.append(f"| peak RSS of the whole run | {peak_mb:.0f} MB |")
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    block = [f"\n## {stamp} — {platform.machine()}, {platform.python_version()}, {_cpus()} CPUs\n",
             "| what | result |", "| --- | --- |", *results, ""]
    out = HERE / "RESULTS.md"
    if not out.exists():
        out.write_text("# Benchmark results\n\nAppended by `make bench` (bench/bench.py states the targets).\n")
    with out.open("a") as handle:
        handle.write("\n".join(block))
    print("\n".join(block))


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    main()
