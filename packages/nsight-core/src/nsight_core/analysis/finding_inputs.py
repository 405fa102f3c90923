""""What to fix" over every step of a capture too large to analyse whole, streamed.

With every step's times (analysis/whole_steps.py) and budget (analysis/whole_budget.py) streamed, the findings need
the rest of their inputs (:class:`findings.GpuInputs`) over every steady step too, and each is local in time or a
sum, so it is made in windows and merged exactly:

- the blocking calls of each batch of steps with the innermost range each came from (:func:`analyze.syncs_in` on the
  NVTX ranges of the steps' thread that overlap the batch: every range a call in it can be in, and every range
  enclosing one of those);
- the launch shape: launches in steps and the kernels they launched, in windows of correlation id (a call and its
  work share it), their durations counted per value, whose medians are those of all of them;
- the copies of a megabyte or more (a few), and the kernels' time per name (a streamed group-by).

A capture without steps is one step, its user window, whose calls are read in its pieces (whole_steps.busy_pieces).
The findings are then made by the code a capture read whole uses (:func:`findings.findings_of`); with the NVTX range
table (analysis/whole_ranges.py) the analysis equals the capture's read whole (tests/core/test_streamed_analysis.py).
"""

from __future__ import annotations

import polars as pl

from nsight_core.analysis import findings as find
from nsight_core.analysis.analyze import LAUNCH_API, Analysis, in_steps, syncs_in
from nsight_core.analysis.findings import Context, GpuInputs
from nsight_core.analysis.footprint import capture_window
from nsight_core.analysis.intervals import WINDOW_ROWS, start_cuts, step_batches, window_filters
from nsight_core.analysis.whole_budget import WholeBudget
from nsight_core.analysis.whole_ranges import whole_capture_ranges
from nsight_core.analysis.whole_steps import EveryStep
from nsight_core.trace.model import Trace, with_depth
from nsight_core.trace.streamed import Events, events


def whole_capture_analysis(trace: Trace, every: EveryStep, whole: WholeBudget, full: bool = True,
                           window_rows: int | None = WINDOW_ROWS) -> Analysis | None:
    """The analysis of every step of streamed TRACE (EVERY, its budget WHOLE): what :func:`analyze.analyze` says of the
    capture read whole. FULL False: its steps, budget and window alone, what a comparison reads (no findings, no NVTX
    range table: it reads the ranges' totals)."""
    stats, thread = every.stats.model_copy(update={"bound": whole.bound}), every.thread
    if thread is None or (stats.family is None and every.pieces is None):
        return None
    frames = events(trace)
    window = capture_window(trace, frames)
    analysis = Analysis(window=window, steps=stats, budget=whole.budget,
                        budget_scope="steps" if every.pieces is None else "capture", ranges=[], findings=[])
    if not full:
        return analysis
    steps = every.drawn
    steady = steps.slice(1) if stats.warmup else steps
    steady_ranges = steady.select("step", pl.col("cpu_start_ns").alias("start_ns"),
                                  pl.col("cpu_end_ns").alias("end_ns"))
    context = Context(steps=stats, budget=whole.budget, window_ns=window.span_ns,
                      step_p50_ns=stats.family.p50_ns if stats.family else None)
    gpu = None
    if any(frame.head(1).collect().height for frame in (frames.kernels, frames.memcpy, frames.memset, frames.graphs)):
        # A capture without steps: its one step's calls, a piece at a time.
        syncs = _syncs(frames, steady_ranges if every.pieces is None else every.pieces, whole.syncs, thread,
                       window_rows)
        gpu = GpuInputs(*syncs, _launch_shape(frames, steady_ranges, window_rows), frames.memcpy,
                        steady if every.pieces is None else steady.clear(), find.nominal_pinned(trace.gpus),
                        find.kernel_totals(frames.kernels, steady))
    return analysis.model_copy(update={"ranges": whole_capture_ranges(frames, window.span_ns, window_rows),
                                       "findings": find.findings_of(context, gpu)})


def _syncs(frames: Events, steps: pl.DataFrame, calls: pl.DataFrame, thread: int,
           window_rows: int | None) -> tuple[pl.DataFrame, int]:
    """:func:`analyze.syncs_in` of STEPS (by start) in batches of steps holding about WINDOW_ROWS of THREAD's NVTX
    ranges, their counts added up (CALLS: THREAD's synchronising calls, the budget's): each batch's calls are named by
    the ranges that overlap its time, which hold every range a call in it can be in and every range enclosing one of
    those (their depth is the capture's). Kernel-period steps begin on the GPU, after the host's ranges that launched
    them."""
    small = frames.memcpy.filter((pl.col("direction") == "Device-to-Host")
                                 & (pl.col("bytes") <= find.SMALL_COPY_BYTES)).select(
        "start_ns", "end_ns", "direction", "bytes").collect(engine="streaming")
    ranges = frames.nvtx.filter(pl.col("thread") == thread).select("start_ns", "end_ns", "name", "thread")
    found, small_reads = [], 0
    for first, end in step_batches(steps["start_ns"], start_cuts(ranges, window_rows)):
        batch = steps.slice(first, end - first)
        lo, hi = batch.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
        meets = (pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)
        named, count = syncs_in(batch, calls.filter(meets), small.filter(meets), thread, with_depth(
            ranges.filter(meets).collect(engine="streaming").sort("start_ns", maintain_order=True)))
        found.append(named)
        small_reads += count
    return pl.concat(found).group_by("name", "range").agg(pl.col("len").sum()), small_reads


def _launch_shape(frames: Events, steps: pl.DataFrame, window_rows: int | None) -> tuple[float, float, float]:
    """Kernels per step, median kernel duration and median launch-call duration in STEPS (as
    :func:`analyze.analyze_steps` reads them), from windows of correlation id: per window, the launches in the steps
    and the kernels they launched, their durations counted per value."""
    names = frames.cuda_api.select("name_id", "name").unique().collect(engine="streaming")
    launch_ids = names.filter(pl.col("name").str.contains(LAUNCH_API))["name_id"]
    duration = (pl.col("end_ns") - pl.col("start_ns")).alias("ns")
    calls = frames.cuda_api.filter(pl.col("name_id").is_in(launch_ids.implode())).select(
        "correlation_id", "start_ns", "end_ns")
    kernels = frames.kernels.select("correlation_id", duration)
    ids = pl.concat([calls.select(pl.col("correlation_id").alias("start_ns")),
                     kernels.select(pl.col("correlation_id").alias("start_ns"))])
    ran_counts, launch_counts = [], []
    for inside in window_filters(start_cuts(ids.drop_nulls(), window_rows), pl.col("correlation_id")):
        launches = in_steps(calls.filter(inside).collect(engine="streaming"), steps)
        ran_counts.append(kernels.filter(inside).join(launches.lazy().select("correlation_id"), on="correlation_id",
                                                      how="semi").group_by("ns").len().collect(engine="streaming"))
        launch_counts.append(launches.group_by(duration).len())
    ran, launched = _merged(ran_counts), _merged(launch_counts)
    count = int(ran["len"].sum())
    return count / steps.height if steps.height else 0.0, _median(ran), _median(launched)


def _merged(counts: list[pl.DataFrame]) -> pl.DataFrame:
    """Windows' counts per value (ns, len) as one, by value."""
    return (pl.concat([frame.cast({"ns": pl.Int64, "len": pl.Int64}) for frame in counts]).group_by("ns")
            .agg(pl.col("len").sum()).sort("ns"))


def _median(counts: pl.DataFrame) -> float:
    """The median of the values COUNTS counts (ns, len, by value), as Polars takes it of the values themselves (the
    mean of the two middle ones of an even number); 0.0 of none."""
    total = int(counts["len"].sum())
    if not total:
        return 0.0
    through = counts["len"].cum_sum()
    lower = counts["ns"][int(through.search_sorted((total + 1) // 2, side="left"))]
    upper = counts["ns"][int(through.search_sorted(total // 2 + 1, side="left"))]
    return (float(lower) + float(upper)) / 2
