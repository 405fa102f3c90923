"""NVTX projected onto the GPU: each range's GPU work is what its launch calls issued (correlation ids)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import nsight_core

PAIRS = Path(__file__).resolve().parents[1] / "fixtures" / "h200-fix-pairs"


def test_each_range_family_gets_the_gpu_work_its_calls_launched() -> None:
    trace = nsight_core.load_trace(PAIRS / "sync_log-problem.nsys-rep")
    ranges = {family.pattern: family for family in nsight_core.analyze(trace).ranges}
    assert ranges["log"].gpu_ops == 0 and ranges["log"].gpu_span_ns is None, "logging launches nothing"
    steps = trace.nvtx.filter(pl.col("name").str.starts_with("step_"))
    loop = steps["thread"][0]
    calls = trace.cuda_api.filter(pl.col("thread") == loop).join_asof(
        steps.select(pl.col("start_ns").alias("s"), pl.col("end_ns").alias("e")).sort("s"),
        left_on="start_ns", right_on="s").filter(pl.col("start_ns") < pl.col("e"))
    ids = calls["correlation_id"].implode()
    work = pl.concat([frame.select("start_ns", "end_ns", "correlation_id")
                      for frame in (trace.kernels, trace.memcpy, trace.memset)])
    work = work.filter(pl.col("correlation_id").is_in(ids))
    assert ranges["step_{n}"].gpu_ops == work.height > 0
    assert ranges["step_{n}"].gpu_span_ns is not None
    assert ranges["step_{n}"].gpu_span_ns <= work["end_ns"].max() - work["start_ns"].min()


def test_a_launch_is_in_the_step_whose_range_holds_its_call_in_any_order() -> None:
    """Launches in call order take a merge with the steps, others a binary search: both give every launch the step
    range its call lies in, and none to a call between steps."""
    from nsight_core.analysis.every_step import gpu_work_of
    from nsight_core.analysis.projection import launched, step_of_launch
    from nsight_core.trace.streamed import events

    trace = nsight_core.load_trace(PAIRS / "sync_log-problem.nsys-rep")
    steps = (trace.nvtx.filter(pl.col("name").str.starts_with("step_"))
             .select(pl.int_range(pl.len()).alias("step"), "start_ns", "end_ns").sort("start_ns")
             .filter(pl.col("step") % 2 == 0))  # every other step: the others' launches lie between steps
    work = gpu_work_of(events(trace)).collect().sort("start_ns")
    launches = launched(work, trace.cuda_api).filter(pl.col("launch_ns").is_not_null())
    in_order = launches.sort("launch_ns")
    shuffled = in_order.sample(fraction=1.0, shuffle=True, seed=7)
    assert in_order["launch_ns"].is_sorted() and not shuffled["launch_ns"].is_sorted()
    expected = in_order.join_asof(steps, left_on="launch_ns", right_on="start_ns", suffix="_step").select(
        pl.when(pl.col("launch_ns") < pl.col("end_ns_step")).then(pl.col("step")))
    found = step_of_launch(in_order, steps)
    assert found.to_list() == expected.to_series().to_list()
    assert 0 < found.null_count() < found.len(), "some launches lie between steps, most inside one"
    again = shuffled.with_columns(step_of_launch(shuffled, steps)).sort("launch_ns")["step"]
    assert again.to_list() == found.to_list()
