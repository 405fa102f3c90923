"""The analysis reads its events in windows and budgets a batch of steps at a time (bounded memory): its numbers do
not depend on where the windows and batches are cut, even when a step's work, an idle stretch's next launch or a
sync crosses a cut."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nsight_core.analysis import gpu_budget, host_time
from nsight_core.analysis.analyze import analyze_steps
from nsight_core.analysis.windows import batches

CAPTURES = [
    "h200-two-streams/two_streams.nsys-rep",
    # known causes (analysis/causes.py): a bulk copy's idle time, allocator calls
    "h200-fix-pairs-v2/checkpoint-problem.nsys-rep", "h200-fix-pairs-v2/small_step-problem.nsys-rep",
    # the same paths again (syncs, host ranges, copies), and a sync after a selection: make test-all
    *(pytest.param(capture, marks=pytest.mark.exhaustive) for capture in (
        "h200-fix-pairs-v2/mask_sync-problem.nsys-rep", "h200-diagnosis/diagnosis.nsys-rep",
        "h200-fix-pairs/sync_log-problem.nsys-rep", "h200-fix-pairs/two-problem.nsys-rep",
        "h200-torch-mlp/training.nsys-rep"))]


@pytest.mark.parametrize("capture", CAPTURES)
def test_windows_of_a_few_events_give_the_analysis_of_one_window(capture: str, load: Callable[[str], Any]) -> None:
    trace = load(capture)
    whole = analyze_steps(trace, window_rows=None)
    assert whole.analysis.steps.clock == "gpu" and whole.budgets.steps.height > 2
    batched = analyze_steps(trace, window_rows=40)  # a cut every few dozen events: inside every step
    assert batched.analysis == whole.analysis
    assert batched.budgets.steps.equals(whole.budgets.steps)
    steps = whole.budgets.steps["step"].to_list()
    assert batched.budgets.stretches(steps).equals(whole.budgets.stretches(steps))
    assert whole.budgets.stretches(steps).height > 0


def _frame(rows: list[tuple[Any, ...]], columns: dict[str, Any]) -> Any:
    import polars as pl

    return pl.DataFrame(rows, schema=columns, orient="row")


def test_work_and_a_sync_that_cross_a_cut_count_in_the_next_batch() -> None:
    """Three steps of 100 ns: a long kernel runs from step 0's window into step 1's (busy there, not idle); in
    step 1 the GPU drains while the host sits in a sync begun during step 0's window (the sync caused the idle).
    Cut at every window, each lookup must still find them."""
    import polars as pl

    thread = 7
    windows = _frame([(0, 0, 100, 0, 95), (1, 100, 200, 95, 198), (2, 200, 300, 198, 290)],
                     {"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "cpu_start_ns": pl.Int64,
                      "cpu_end_ns": pl.Int64})
    i64, text = pl.Int64, pl.String
    work = _frame([(0, 150, 1, "kernel", False, -10, -5, "cudaLaunchKernel", thread, 0),
                   (100, 110, 2, "kernel", False, 96, 97, "cudaLaunchKernel", thread, 1),
                   (200, 210, 3, "kernel", False, 197, 199, "cudaLaunchKernel", thread, 2),
                   (210, 300, 4, "kernel", False, 199, 199, "cudaLaunchKernel", thread, 2)],
                  {"start_ns": i64, "end_ns": i64, "correlation_id": i64, "kind": text, "comm": pl.Boolean,
                   "launch_ns": i64, "launch_end_ns": i64, "launch_name": text, "thread": i64, "step": i64})
    calls = work.select(pl.col("launch_ns").alias("start_ns"), pl.col("launch_end_ns").alias("end_ns"),
                        pl.col("launch_name").alias("name"), "thread", "correlation_id")
    blocking = _frame([(90, 196, "cudaDeviceSynchronize", thread, 9)],
                      {"start_ns": i64, "end_ns": i64, "name": text, "thread": i64, "correlation_id": i64})
    nvtx = windows.select(pl.col("cpu_start_ns").alias("start_ns"), pl.col("cpu_end_ns").alias("end_ns"),
                          pl.format("step_{}", "step").alias("name"), pl.lit(thread).alias("thread"))
    cuda_api = pl.concat([calls.select(blocking.columns), blocking]).lazy()
    host_calls = host_time.HostCalls.of(["cudaDeviceSynchronize", "cudaLaunchKernel"], [], cuda_api=cuda_api,
                                        osrt_calls=blocking.clear().lazy(), thread=thread)
    host = host_time.Host.of(nvtx.clear().select("start_ns", "end_ns", "name"), host_calls)
    firsts = work["start_ns"].search_sorted(windows["start_ns"], side="left")

    def budget(work_per_batch: int | None) -> tuple[pl.DataFrame, pl.DataFrame]:
        return gpu_budget.budget_in_batches(
            windows, batches(firsts, work_per_batch),
            lambda lo, hi: work.filter((pl.col("end_ns") > lo) & (pl.col("start_ns") <= hi)),
            gpu_budget.step_syncs(blocking, thread), host)

    whole = budget(None)
    step_1 = dict(whole[0].filter(pl.col("step") == 1).select(
        pl.format("{}/{}/{}", "part", pl.col("cpu_kind").fill_null(""), pl.col("cpu_name").fill_null("")),
        "total_ns").iter_rows())
    # Busy until the long kernel ends (150); idle until the work at 200; the sync (90 to 196) drained the queue, and
    # the host waited in it longer (60) than the idle lasted (50): the whole stretch is the sync's, the host's
    # catching up (the time before the launch call, the call from 197 to 199) and the launch's latency too.
    assert step_1 == {"compute//": 50, "sync_wait/cuda_api/cudaDeviceSynchronize": 46,
                      "sync_wait/dispatch/cudaLaunchKernel": 1, "sync_wait/cuda_api/cudaLaunchKernel": 2,
                      "sync_wait/untraced/": 1}
    batched = budget(1)  # one window per batch
    assert batched[0].equals(whole[0]) and batched[1].equals(whole[1])
