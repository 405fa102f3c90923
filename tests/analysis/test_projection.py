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
