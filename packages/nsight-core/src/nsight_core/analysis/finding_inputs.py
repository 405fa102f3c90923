"""The findings' inputs over every steady step (:class:`findings.GpuInputs`), made in windows and merged exactly (each
is local in time or a sum), and the analysis they complete (:func:`analysis_of`)."""

from __future__ import annotations

import polars as pl

from nsight_core.analysis import findings as find
from nsight_core.analysis import precision, what_if
from nsight_core.analysis.budget import bound_by, is_thread
from nsight_core.analysis.cause_inputs import cause_inputs
from nsight_core.analysis.causes import LAUNCH_API
from nsight_core.analysis.codes import matching, pattern_of
from nsight_core.analysis.every_budget import Budgets
from nsight_core.analysis.every_step import EveryStep, gpu_work_of, launched_by_id
from nsight_core.analysis.finding_model import Context
from nsight_core.analysis.findings import GpuInputs
from nsight_core.analysis.overhead import with_overhead
from nsight_core.analysis.projection import innermost_range
from nsight_core.analysis.range_table import range_table
from nsight_core.analysis.result import Analysis, Coverage
from nsight_core.analysis.steps import CaptureAsStep, FamilySteps, GpuWindowSteps, StepStats
from nsight_core.analysis.user_window import UserWindow
from nsight_core.analysis.windows import in_steps, start_cuts, step_batches, window_filters
from nsight_core.marks import calibrated_ns, host_slowdown
from nsight_core.trace.depth import depth_read, with_depth
from nsight_core.trace.schema import pid_of
from nsight_core.trace.streamed import WINDOW_ROWS, Events


def analysis_of(frames: Events, gpus: pl.DataFrame | None, window: UserWindow, every: EveryStep,
                budgets: Budgets, nsys_version: str | None = None, window_rows: int | None = WINDOW_ROWS) -> Analysis:
    """The analysis of EVERY step of the capture FRAMES holds: the steps, their BUDGETS with the profiler's overhead
    taken out, the NVTX range table and the findings, whose savings are read against the step without the profiler."""
    found, thread, steps = every.stats, every.thread, every.drawn
    steady = steps.slice(1) if found.warmup else steps
    steady_ranges = steady.select("step", start_ns=pl.col("cpu_start_ns"), end_ns=pl.col("cpu_end_ns"))
    budget, overhead = budgets.budget, None
    stats: StepStats
    match found:
        case GpuWindowSteps():
            # An NVTX family's steps, on its thread; at least MIN_PROJECTED of them (analysis/every_step.py).
            assert thread is not None and steady.height
            budget, overhead = with_overhead(budget, _calls(frames, steady_ranges, thread) / steady.height,
                                             nsys_version, calibrated_ns(frames.nvtx_marks),
                                             host_slowdown(frames.nvtx_marks))
            stats = found.bounded(bound_by(budgets.budget), max(found.family.p50_ns - overhead.per_step_ns, 0.0))
            p50: float | None = stats.estimated_p50_ns
        case FamilySteps():
            stats, p50 = found, found.family.p50_ns
        case CaptureAsStep():
            stats, p50 = found, None
    context = Context(steps=stats, budget=budget, window_ns=window.span_ns, step_p50_ns=p50)
    gpu, capability = None, find.compute_capability(gpus)
    if any(frame.head(1).collect().height for frame in (frames.kernels, frames.memcpy, frames.memset, frames.graphs)):
        # A capture without steps: its one step's calls, a piece at a time; no steps to count copies and causes in.
        syncs, small_reads = _syncs(frames, steady_ranges if every.pieces is None else every.pieces, budgets.syncs,
                                    thread, window_rows)
        counted = steady if every.pieces is None else steady.clear()
        causes = cause_inputs(frames, counted, thread, budgets.activities, overhead.per_call_ns if overhead else 0.0,
                              window_rows)
        kernels = find.kernel_totals(frames.kernels, steady)
        fp32 = find.fp32_matmuls(kernels)["name"]
        faster = (_faster_matmuls(frames, budgets, steady, fp32, capability, window_rows)
                  if fp32.len() else precision.NOT_REPLAYED)
        gpu = GpuInputs(syncs=syncs, small_reads=small_reads, shape=_launch_shape(frames, steady_ranges, window_rows),
                        copies=frames.memcpy, copy_steps=counted, pinned=find.nominal_pinned(capability),
                        kernels=kernels, causes=causes, faster_matmuls=faster)
    coverage = Coverage(scope="every_step" if every.pieces is None else "capture_as_one_step",
                        steps=steps.height if every.pieces is None else 1,
                        process=frames.process.pid if frames.process else None,
                        gpus=list(frames.process.devices) if frames.process else [])
    return Analysis(window=window, steps=stats, budget=budget, overhead=overhead,
                    budget_scope="steps" if every.pieces is None else "capture", coverage=coverage,
                    ranges=range_table(frames, window.span_ns, window_rows), findings=find.findings_of(context, gpu))


def _faster_matmuls(frames: Events, budgets: Budgets, steps: pl.DataFrame, fp32: pl.Series,
                    capability: float | None, window_rows: int | None) -> precision.Replayed:
    """What STEPS (start_ns, end_ns; by start) would win with their FP32 matrix kernels (by name: FP32) running as much
    faster as the GPU's tensor cores (of compute CAPABILITY) promise with TF32 and under bf16: the GPU's timeline
    replayed (what_if.Replay) with the steps' thread's syncs, in windows of about WINDOW_ROWS pieces of work by start.
    The GPU work the BUDGETS read where they have it: of a capture of several ranks, the steps' process's alone
    (analyze.steps_process), so another rank's kernels close no chain of queued GEMMs."""
    lo, hi = steps.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
    inside = (pl.col("start_ns") >= lo) & (pl.col("start_ns") < hi)
    work = (budgets.gpu.work if budgets.gpu is not None else gpu_work_of(frames)).filter(inside)
    calls = budgets.syncs.filter(inside).select("start_ns", "end_ns")
    speeds = precision.speedups(capability)
    replays = [what_if.Replay(calls) if speed is not None else None for speed in speeds]
    named = pl.col("name").is_in(fp32.implode())
    for window in window_filters(start_cuts(work, window_rows), pl.col("start_ns")):
        ids = frames.kernels.filter(inside & window & named).select("correlation_id").collect(engine="streaming")
        ran = launched_by_id(work.filter(window), frames.cuda_api)
        is_fp32 = (pl.col("kind") == "kernel") & pl.col("correlation_id").is_in(ids["correlation_id"].implode())
        for replay, speed in zip(replays, speeds, strict=True):
            if replay is not None:
                replay.add(ran.select(*(column for column in what_if.WORK_COLUMNS if column != "speedup"),
                                      pl.when(is_fp32).then(speed).otherwise(1.0).alias("speedup"))
                           .cast(what_if.WORK_COLUMNS))
    return precision.Replayed(*(replay.saved_ns() if replay is not None else None for replay in replays))


def _calls(frames: Events, steps: pl.DataFrame, thread: int) -> int:
    """The CUDA calls of every thread of THREAD's process from the first of STEPS (by start) to the end of the last:
    what tracing slowed. Not THREAD's alone: autograd launches a backward pass from a thread of its own while the step's
    thread waits. Not other processes' (the other ranks of a capture of several): they have steps of their own."""
    lo, hi = steps.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
    process = pid_of(pl.col("thread")) == pid_of(pl.lit(thread))
    inside = process & (pl.col("start_ns") >= lo) & (pl.col("start_ns") < hi)
    return int(frames.cuda_api.filter(inside).select(pl.len()).collect(engine="streaming").item())


def _syncs(frames: Events, steps: pl.DataFrame, calls: pl.DataFrame, thread: int | None,
           window_rows: int | None) -> tuple[pl.DataFrame, int]:
    """STEPS' (by start) blocking calls on THREAD (of CALLS) counted by name and innermost range family (name, range,
    len), and their small device-to-host copies, over batches of steps of about WINDOW_ROWS of THREAD's NVTX ranges.
    A batch's overlapping ranges hold every range its calls are in, so their depth is the capture's."""
    reads = frames.memcpy.filter((pl.col("direction") == "Device-to-Host") & (pl.col("bytes") <= find.SMALL_COPY_BYTES))
    small = reads.select("start_ns", "end_ns", "direction", "bytes").collect(engine="streaming")
    ranges = frames.nvtx.filter(pl.col("thread") == thread).select("start_ns", "end_ns", "name", "thread",
                                                                   *depth_read(frames.nvtx))
    found, small_reads = [], 0
    for first, end in step_batches(steps["start_ns"], start_cuts(ranges, window_rows)):
        batch = steps.slice(first, end - first)
        lo, hi = batch.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
        meets = (pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)
        nvtx = with_depth(ranges.filter(meets).collect(engine="streaming").sort("start_ns", maintain_order=True))
        blocking = in_steps(calls.filter(meets & is_thread(thread)), batch)
        found.append(blocking.select("name", pattern_of(pl.lit(innermost_range(blocking, nvtx))).alias("range"))
                     .group_by("name", "range").len())
        small_reads += in_steps(small.filter(meets), batch).height
    return pl.concat(found).group_by("name", "range").agg(pl.col("len").sum()), small_reads


def _launch_shape(frames: Events, steps: pl.DataFrame, window_rows: int | None) -> tuple[float, float, float]:
    """Kernels per step, median kernel and launch-call durations in STEPS, counted in windows of correlation id."""
    duration = (pl.col("end_ns") - pl.col("start_ns")).alias("ns")
    is_launch = matching(frames.cuda_api, "name", lambda name: name.str.contains(LAUNCH_API))
    calls = frames.cuda_api.filter(is_launch).select("correlation_id", "start_ns", "end_ns")
    kernels = frames.kernels.select("correlation_id", duration)
    ids = pl.concat([frame.select(start_ns=pl.col("correlation_id")) for frame in (calls, kernels)])
    ran_counts, launch_counts = [], []
    for inside in window_filters(start_cuts(ids.drop_nulls(), window_rows), pl.col("correlation_id")):
        launches = in_steps(calls.filter(inside).collect(engine="streaming"), steps)
        ran_counts.append(kernels.filter(inside).join(launches.lazy().select("correlation_id"), on="correlation_id",
                                                      how="semi").group_by("ns").len().collect(engine="streaming"))
        launch_counts.append(launches.group_by(duration).len())
    ran = _merged(ran_counts)
    return int(ran["len"].sum()) / steps.height if steps.height else 0.0, _median(ran), _median(_merged(launch_counts))


def _merged(counts: list[pl.DataFrame]) -> pl.DataFrame:
    """Windows' counts per value (ns, len) as one, by value."""
    return (pl.concat([frame.cast({"ns": pl.Int64, "len": pl.Int64}) for frame in counts]).group_by("ns")
            .agg(pl.col("len").sum()).sort("ns"))


def _median(counts: pl.DataFrame) -> float:
    """The median of COUNTS' values (ns, len, by value), as Polars takes it (middle two: their mean); 0.0 of none."""
    total = int(counts["len"].sum())
    if not total:
        return 0.0
    through = counts["len"].cum_sum()
    lower = counts["ns"][int(through.search_sorted((total + 1) // 2, side="left"))]
    upper = counts["ns"][int(through.search_sorted(total // 2 + 1, side="left"))]
    return (float(lower) + float(upper)) / 2
