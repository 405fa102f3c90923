"""Every step of a capture, of the family chosen from its start (analysis/analyze.py): on the GPU's clock where they
launched work (:func:`gpu_spans`: the events in windows of correlation id, which hold both sides of every launch), or
periods of the kernel sequence (:func:`steps.period_steps`). The start of every step's budget and findings."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from nsight_core.analysis.budget import step_thread
from nsight_core.analysis.codes import pattern_of
from nsight_core.analysis.projection import (
    GPU_WORK_COLUMNS,
    MIN_PROJECTED,
    NCCL,
    launched,
    project_spans,
    step_of_launch,
)
from nsight_core.analysis.steps import (
    STEP_COLUMNS,
    CaptureAsStep,
    ChosenSteps,
    FoundSteps,
    KernelPeriodSteps,
    NvtxCpuSteps,
    family_stats,
    kernel_period_stats,
    on_gpu_clock,
    period_steps,
)
from nsight_core.analysis.windows import start_cuts, window_filters
from nsight_core.trace.streamed import WINDOW_ROWS, Events

SPAN_COLUMNS = {"step": pl.Int64, "_compute_ns": pl.Int64, "gpu_start_ns": pl.Int64, "gpu_end_ns": pl.Int64}


@dataclass(frozen=True, kw_only=True)
class EveryStep:
    """Every step of a capture (:func:`every_step`)."""

    stats: FoundSteps
    windows: pl.DataFrame | None
    """On the GPU's clock (STATS a :class:`steps.GpuWindowSteps`), the steps' GPU windows (project_spans); else None."""
    ranges: pl.DataFrame
    """Every step's range (step, start_ns, end_ns, name, thread, by start); of kernel-period steps, their periods."""
    thread: int | None
    """The steps' CPU thread (:func:`budget.step_thread`): the NVTX family's, else the one with the most calls."""
    pieces: pl.DataFrame | None = None
    """Of a capture without steps (RANGES: the user's window, one step), that step's :func:`busy_pieces`; else None."""

    @property
    def drawn(self) -> pl.DataFrame:
        """What a step view draws (step, start_ns, end_ns, cpu_start_ns, cpu_end_ns): GPU window, else the range."""
        if self.windows is not None:
            return self.windows
        return self.ranges.select("step", "start_ns", "end_ns", pl.col("start_ns").alias("cpu_start_ns"),
                                  pl.col("end_ns").alias("cpu_end_ns"))


def capture_as_step(frames: Events, chosen: CaptureAsStep, start_ns: int, end_ns: int,
                    window_rows: int | None = WINDOW_ROWS) -> EveryStep:
    """A capture without steps (CHOSEN says why) as one step: its user window (START_NS to END_NS) in busy_pieces."""
    window = pl.DataFrame({"step": [0], "start_ns": [start_ns], "end_ns": [end_ns], "name": [""], "thread": [None]},
                          schema=STEP_COLUMNS)
    return EveryStep(stats=chosen, windows=None, ranges=window, thread=step_thread(None, frames.cuda_api, frames.osrt),
                     pieces=busy_pieces(frames, start_ns, end_ns, window_rows))


def busy_pieces(frames: Events, start_ns: int, end_ns: int, window_rows: int | None) -> pl.DataFrame:
    """START_NS to END_NS cut into pieces (step, start_ns, end_ns: the step a piece's number) of about WINDOW_ROWS of
    FRAMES' events, each cut inside a kernel (the first of 2 ns or more to start after an even cut): no run of idle
    GPU is cut, so the pieces' budgets add up to the whole one's. Without such kernels, one piece."""
    sources = (frames.kernels, frames.memcpy, frames.memset, frames.cuda_api, frames.osrt, frames.nvtx)
    targets = [cut for cut in start_cuts(pl.concat([frame.select("start_ns") for frame in sources]), window_rows)
               if start_ns < cut < end_ns]
    cuts: list[int] = []
    if targets:
        long = frames.kernels.filter(pl.col("end_ns") - pl.col("start_ns") >= 2).select("start_ns", "end_ns")
        firsts = (long.select(pl.lit(pl.Series(targets)).search_sorted(pl.col("start_ns"), side="right")
                              .alias("_after"), "start_ns")
                  .filter(pl.col("_after") > 0).group_by("_after").agg(pl.col("start_ns").min())
                  .collect(engine="streaming"))
        inside = (long.join(firsts.lazy().select("start_ns"), on="start_ns", how="semi").group_by("start_ns")
                  .agg(pl.col("end_ns").max()).select(pl.col("start_ns") + (pl.col("end_ns") - pl.col("start_ns")) // 2)
                  .collect(engine="streaming").to_series())
        cuts = sorted({int(cut) for cut in inside if start_ns < cut < end_ns})
    edges = [start_ns, *cuts, end_ns]
    return pl.DataFrame({"step": range(len(edges) - 1), "start_ns": edges[:-1], "end_ns": edges[1:]},
                        schema={"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})


def every_step(frames: Events, chosen: ChosenSteps, window_rows: int | None = WINDOW_ROWS) -> EveryStep | None:
    """Every step of the capture FRAMES holds, of the family CHOSEN: NVTX steps on the GPU's clock where at least
    MIN_PROJECTED launched GPU work; None where CHOSEN found none, fewer than two are found, or its ranges overlap.
    WINDOW_ROWS: CUDA calls and GPU work per window (None: one window)."""
    match chosen:
        case KernelPeriodSteps():
            return _kernel_periods(frames, chosen)
        case NvtxCpuSteps():
            return _nvtx_steps(frames, chosen, window_rows)
        case CaptureAsStep():
            return None


def _kernel_periods(frames: Events, chosen: KernelPeriodSteps) -> EveryStep | None:
    """Every period of CHOSEN's kernel sequence in FRAMES; None where fewer than two."""
    periods = period_steps(frames.kernels, chosen.kernels_per_period, chosen.anchor_kernel)
    if periods.height < 2:
        return None
    stats = kernel_period_stats(periods, chosen.kernels_per_period, chosen.anchor_kernel)
    return EveryStep(stats=stats.model_copy(update={"candidates": chosen.candidates}), windows=None, ranges=periods,
                     thread=step_thread(None, frames.cuda_api, frames.osrt))


def _nvtx_steps(frames: Events, chosen: NvtxCpuSteps, window_rows: int | None) -> EveryStep | None:
    """CHOSEN's family's ranges in FRAMES as :func:`every_step` finds them."""
    family = chosen.family
    thread = family.thread
    # The family's names found among the distinct ones: its pattern's regex on every range took most of the pass.
    names = frames.nvtx_names.filter(pattern_of(pl.col("name")) == family.pattern)["name"]
    steps = (frames.nvtx.filter((pl.col("domain") == family.domain) & (pl.col("thread") == family.thread)
                                & pl.col("name").is_in(names.implode()))
             .select("start_ns", "end_ns", "name", "thread").collect(engine="streaming")
             .sort("start_ns", maintain_order=True).with_row_index("step")
             .with_columns(pl.col("step").cast(pl.Int64)))
    if (found := family_stats(steps, family)) is None:
        return None
    stats = found.model_copy(update={"candidates": chosen.candidates})
    windows = project_spans(steps, gpu_spans(frames, steps, window_rows))
    if windows.height < MIN_PROJECTED:
        return EveryStep(stats=stats, windows=None, ranges=steps, thread=thread)
    return EveryStep(stats=on_gpu_clock(stats, windows), windows=windows, ranges=steps, thread=thread)


def gpu_spans(frames: Events, steps: pl.DataFrame, window_rows: int | None) -> pl.DataFrame:
    """Per step that launched GPU work (:func:`step_of_launch`): where its compute starts and its last work ends (step,
    gpu_start_ns, gpu_end_ns), from FRAMES' events in windows of about WINDOW_ROWS by correlation id. The start is the
    step's first work on a stream that runs kernels, else its first work: a prefetch on a side stream must not pull
    the window early. An id two processes used is the earlier call's."""
    calls = frames.cuda_api.select("correlation_id", pl.col("start_ns").alias("launch_ns"))
    work = gpu_work_of(frames)
    compute = (work.filter(pl.col("kind").is_in(["kernel", "graph"])).select(pl.col("stream").unique())
               .collect(engine="streaming")["stream"])
    work = work.select("start_ns", "end_ns", "correlation_id", pl.col("stream").is_in(compute.implode())
                       .alias("_compute"))
    # Cut where both sides together hold about WINDOW_ROWS rows: a CUDA graph's nodes all carry its launch's id.
    ids = pl.concat([side.select(pl.col("correlation_id").alias("start_ns")) for side in (calls, work)])
    cuts = start_cuts(ids.drop_nulls(), window_rows)
    found = []
    for inside in window_filters(cuts, pl.col("correlation_id")):
        launches = (calls.filter(inside).collect(engine="streaming").sort("launch_ns", maintain_order=True)
                    .unique("correlation_id", keep="first", maintain_order=True))
        launches = launches.with_columns(step_of_launch(launches, steps)).filter(pl.col("step").is_not_null())
        ran = work.filter(inside).collect(engine="streaming").join(launches, on="correlation_id")
        found.append(ran.group_by("step").agg(pl.col("start_ns").filter("_compute").min().alias("_compute_ns"),
                                              pl.col("start_ns").min().alias("gpu_start_ns"),
                                              pl.col("end_ns").max().alias("gpu_end_ns")))
    spans = pl.concat([pl.DataFrame(schema=SPAN_COLUMNS), *(part.cast(SPAN_COLUMNS) for part in found)])  # type: ignore[arg-type]
    return (spans.group_by("step").agg(pl.col("_compute_ns", "gpu_start_ns").min(), pl.col("gpu_end_ns").max())
            .select("step", pl.coalesce("_compute_ns", "gpu_start_ns").alias("gpu_start_ns"), "gpu_end_ns")
            .sort("step"))


def gpu_work_of(frames: Events) -> pl.LazyFrame:
    """FRAMES' GPU work (start_ns, end_ns, correlation_id, kind, comm, stream): kernels, copies, memsets and the graph
    launches whose nodes are not kernels, read once (their query scans every kernel, which each window would repeat)."""
    graphs = frames.graphs.select("start_ns", "end_ns", "correlation_id", "stream").collect(engine="streaming").lazy()
    no = pl.lit(False).alias("comm")
    parts = [frames.kernels.select("start_ns", "end_ns", "correlation_id", pl.lit("kernel").alias("kind"),
                                   pl.col("name").str.contains(NCCL).fill_null(False).alias("comm"), "stream"),
             *(frame.select("start_ns", "end_ns", "correlation_id", pl.lit(kind).alias("kind"), no, "stream")
               for frame, kind in ((frames.memcpy, "copy"), (frames.memset, "memset"), (graphs, "graph")))]
    return pl.concat([part.cast(GPU_WORK_COLUMNS) for part in parts])  # type: ignore[arg-type]


def launched_by_id(work: pl.LazyFrame, calls: pl.LazyFrame) -> pl.DataFrame:
    """WORK (a window's, of :func:`gpu_work_of`) by start with each piece's launching call (:func:`projection.launched`)
    from CALLS, by correlation id: only the window's are read; of an id two processes used, the first."""
    ran = work.collect(engine="streaming").sort("start_ns", maintain_order=True)
    ids = ran["correlation_id"].drop_nulls()
    among = (pl.col("correlation_id").is_between(ids.min(), ids.max()) & pl.col("correlation_id").is_in(ids.implode())
             if ids.len() else pl.lit(False))
    return launched(ran, calls.filter(among).collect(engine="streaming").sort("start_ns", maintain_order=True))
