"""Where a capture's time and memory go, stage by stage, in one process: `python bench/stages.py TRACE`.

Runs what `nsight stats --json` runs (the Trace's frames, the five reports, the trace summary, the
completeness checks, the analysis) one stage after the other on TRACE (a .nsys-rep, exported once
beside it, or an export) and prints each stage's wall and CPU time and the process's peak RSS after
it (``ru_maxrss``: it only grows, so a stage's "+MB" is how far it raised the peak). A development
aid for bench/bench.py's whole-process numbers; nothing is written.

Polars' allocator keeps freed memory for reuse, so the peak is more than what is alive at any one
time; ``_RJEM_MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0`` in the environment hands it back at
once and shows the live peak (slower).
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable

from nsight_core.analysis.analyze import analyze
from nsight_core.analysis.completeness import CaptureFacts, check_completeness
from nsight_core.analysis.trace_summary import summarize_trace
from nsight_core.stats.load import stats_of_trace
from nsight_core.trace.load import load_trace


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help=".nsys-rep, .sqlite or arrow-directory export")
    args = parser.parse_args()
    trace = load_trace(args.trace)
    stages: list[tuple[str, Callable[[], object]]] = [
        *((f"trace.{frame}", lambda frame=frame: getattr(trace, frame))
          for frame in ("kernels", "memcpy", "memset", "cuda_api", "osrt", "nvtx", "nvtx_marks", "samples")),
        ("stats (five reports)", lambda: stats_of_trace(trace)),
        ("trace summary", lambda: summarize_trace(trace)),
        ("completeness", lambda: check_completeness(trace, CaptureFacts())),
        ("analyze", lambda: analyze(trace)),
    ]
    print(f"{'stage':22} {'wall':>7} {'cpu':>7} {'peak RSS':>10}")
    print(f"{'(imports, export)':22} {'':>7} {_cpu_s():6.2f}s {_peak_mb():7.0f} MB")
    for label, run in stages:
        peak, cpu, wall = _peak_mb(), _cpu_s(), time.perf_counter()
        run()
        print(f"{label:22} {time.perf_counter() - wall:6.2f}s {_cpu_s() - cpu:6.2f}s {_peak_mb():7.0f} MB"
              f" (+{_peak_mb() - peak:.0f})")


if __name__ == "__main__":
    main()
