"""What the page's step view draws: GPU windows, and each idle stretch labelled by its cause."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import nsight_core
from nsight_core.analysis.analyze import step_view

PAIRS = Path(__file__).resolve().parents[1] / "fixtures" / "h200-fix-pairs"


def test_the_median_step_shows_the_sync_and_the_log_after_it() -> None:
    trace = nsight_core.load_trace(PAIRS / "sync_log-problem.nsys-rep")
    view = step_view(trace)
    assert view.clock == "gpu" and view.median_step is not None and view.slowest_step is not None
    windows = view.windows.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("d"))
    steady = windows.filter(pl.col("step") != 0) if nsight_core.analyze(trace).steps.warmup else windows
    assert windows.filter(pl.col("step") == view.slowest_step)["d"][0] == steady["d"].max()
    idle = view.idle.filter(pl.col("step") == view.median_step)
    longest = idle.sort("end_ns").with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("d")).sort("d").row(-1,
                                                                                                      named=True)
    # .item() drained the queue, then the host logged for 2 ms: the stretch is the sync's, and says what came next.
    assert (longest["part"], longest["cpu_kind"], longest["cpu_name"]) == ("sync_wait", "nvtx", "log")
    assert 1_900_000 < longest["d"] < 3_000_000
    window = windows.filter(pl.col("step") == view.median_step).row(0, named=True)
    assert idle["start_ns"].min() >= window["start_ns"] and idle["end_ns"].max() <= window["end_ns"]


def test_a_cpu_clock_capture_has_windows_and_no_causes() -> None:
    trace = nsight_core.load_trace(PAIRS / "graph-fixed.nsys-rep")  # nsys 2023.4.4 kept no GPU work of the graphs
    view = step_view(trace)
    assert view.clock == "cpu" and view.idle.height == 0 and view.windows.height > 0
