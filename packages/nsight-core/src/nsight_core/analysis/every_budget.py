"""The budget of every step, in batches of steps: either budget is local in time, so one code serves every size. On
the GPU's clock (analysis/gpu_budget.py) a batch gets the GPU work of its time and the calls that launched it; on the
CPU's (analysis/cpu_budget.py) every event overlapping its time; a capture without steps is one step, budgeted in
pieces cut where the GPU is busy (:func:`every_step.busy_pieces`)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from functools import partial

import polars as pl

from nsight_core.analysis.budget import PAGEABLE, StepBudget, blocks, budget_of, cpu_activities, per_step
from nsight_core.analysis.codes import matching, pattern_of
from nsight_core.analysis.cpu_budget import budget_totals
from nsight_core.analysis.every_step import EveryStep, gpu_work_of, launched_by_id
from nsight_core.analysis.fold import scan
from nsight_core.analysis.gpu_budget import IDLE_COLUMNS, QUERY_CALLS, budget_in_batches, step_syncs
from nsight_core.analysis.host_time import TOP_CALLS, Host, HostCalls, outermost_user_ranges
from nsight_core.analysis.ranges import CodedRanges, Nesting
from nsight_core.analysis.steps import GpuWindowSteps
from nsight_core.analysis.windows import batches, start_cuts, start_windows, step_batches
from nsight_core.trace.depth import depth_read, with_depth
from nsight_core.trace.streamed import WINDOW_ROWS, Events


@dataclass(frozen=True, kw_only=True)
class Budgets:
    """The budget of every step of a capture (:func:`every_budget`)."""

    budget: StepBudget
    """Over the steady steps (the warm-up left out), as :func:`analyze.analyze_steps` states it."""
    steps: pl.DataFrame
    """Every step's budget (:func:`budget.per_step`), warm-up included: what the page's chart of steps draws."""
    syncs: pl.DataFrame = field(repr=False)
    """The steps' thread's synchronising calls, by start (:func:`gpu_budget.step_syncs`): the findings read them too."""
    gpu: GpuSteps | None = field(default=None, repr=False)
    """On the GPU's clock, what budgets a step again (:meth:`stretches`); None on the CPU's."""
    activities: pl.DataFrame | None = field(default=None, repr=False)
    """Every CPU activity of the steady steps' idle time, summed (part, cpu_kind, cpu_name, total_ns): the budget
    names its largest; the findings of a cause read its own (analysis/causes.py)."""

    def stretches(self, drawn: Collection[int]) -> pl.DataFrame:
        """The GPU idle stretches of the DRAWN steps with their causes (gpu_budget.IDLE_COLUMNS), each step budgeted
        again alone: what a drawn step shades (they are not kept for every step; none on the CPU's clock)."""
        if self.gpu is None:
            return pl.DataFrame(schema=IDLE_COLUMNS)
        windows = self.gpu.windows
        at = windows.with_row_index("_at").filter(pl.col("step").is_in(list(drawn)))["_at"].sort()
        return budget_in_batches(windows, [(int(row), 1) for row in at], self.gpu.between, self.syncs,
                                 self.gpu.host)[1]


@dataclass(frozen=True, kw_only=True)
class GpuSteps:
    """Steps on the GPU's clock as their budget reads them: their WINDOWS, the capture's FRAMES, its GPU WORK
    (:func:`every_step.gpu_work_of`) and what the steps' thread was in (HOST)."""

    windows: pl.DataFrame
    frames: Events
    work: pl.LazyFrame
    host: Host

    def between(self, lo: int, hi: int) -> pl.DataFrame:
        """The launched GPU work that ran between LO and HI (:data:`gpu_budget.WorkBetween`)."""
        ran = self.work.filter((pl.col("end_ns") > lo) & (pl.col("start_ns") <= hi))
        return launched_by_id(ran, self.frames.cuda_api)


def every_budget(frames: Events, every: EveryStep, window_rows: int | None = WINDOW_ROWS,
                 coded: CodedRanges | None = None) -> Budgets:
    """The budget of EVERY step of the capture FRAMES holds, on the steps' clock. WINDOW_ROWS: events per window of
    the passes (None: one window). CODED: every NVTX range of the capture with its family, where the caller has them
    (:func:`analyze.choose_steps`): the CPU budget reads its ranges from them."""
    stats, windows, thread = every.stats, every.windows, every.thread
    if not isinstance(stats, GpuWindowSteps) or windows is None or thread is None:
        return _cpu_budget(frames, every, thread, window_rows, coded)
    work = gpu_work_of(frames)
    counts = _edge_counts(work.select("start_ns"), windows)
    host = Host.of(_user_ranges(frames, windows, stats.family.pattern, thread, window_rows), host_calls(frames, thread))
    gpu = GpuSteps(windows=windows, frames=frames, work=work, host=host)
    # Per window, how much work starts before it, for the batches: after k edges, (k + 1) // 2 windows have begun.
    within = counts.group_by(((pl.col("_edge") + 1) // 2).alias("_window")).agg(pl.col("len").sum())
    firsts = (pl.DataFrame({"_window": pl.int_range(windows.height, eager=True).cast(within["_window"].dtype)})
              .join(within, on="_window", how="left").sort("_window")
              .select(pl.col("len").fill_null(0).cum_sum().cast(pl.Int64)).to_series())
    calls = step_syncs(sync_calls(frames), thread)
    warmup = int(windows["step"][0]) if stats.warmup else None
    budget, steps, activities = _summed(
        ((budget_in_batches(windows, [cut], gpu.between, calls, host, stretches=False)[0], windows.slice(*cut))
         for cut in batches(firsts, window_rows)), warmup, thread)
    return Budgets(budget=budget, steps=steps, syncs=calls, gpu=gpu, activities=activities)


def host_calls(frames: Events, thread: int) -> HostCalls:
    """The steps' THREAD's :class:`host_time.HostCalls`: the TOP_CALLS CUDA and OS-runtime calls by time overall."""
    def top(calls: pl.LazyFrame) -> list[str]:
        return (calls.filter((pl.col("thread") == thread) & ~pl.col("name").str.contains(QUERY_CALLS))
                .group_by("name").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("_t")).drop_nulls("name")
                .sort(["_t", "name"], descending=[True, False]).head(TOP_CALLS).collect(engine="streaming")["name"]
                .to_list())

    return HostCalls.of(top(frames.cuda_api), top(frames.osrt), cuda_api=frames.cuda_api, osrt_calls=frames.osrt,
                        thread=thread)


def _edge_counts(starts: pl.LazyFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """How many of the events STARTS holds (a start_ns column) start after each number of STEPS' edges (start_ns,
    end_ns: by start, not overlapping), in one streamed pass: ``_edge`` k, ``len``. After an odd number k of edges an
    event is inside step (k - 1) // 2, else between steps. One search of all edges: two would hold the column."""
    edges = steps.select(pl.concat_list("start_ns", "end_ns").alias("_edges")).explode("_edges")["_edges"]
    return (starts.select(pl.lit(edges).search_sorted(pl.col("start_ns"), side="right").cast(pl.Int64).alias("_edge"))
            .group_by("_edge").len().collect(engine="streaming"))


def _cpu_budget(frames: Events, every: EveryStep, thread: int | None, window_rows: int | None,
                coded: CodedRanges | None) -> Budgets:
    """:func:`cpu_budget.budget_totals` of EVERY step (their ranges or kernel periods, on THREAD) in batches of steps
    whose time holds about WINDOW_ROWS events, each with the events overlapping it (NVTX ranges from CODED if given)."""
    steps = every.ranges if every.pieces is None else every.pieces
    sources = (frames.kernels, frames.memcpy, frames.memset, frames.cuda_api, frames.osrt, frames.nvtx)
    cuts = start_cuts(pl.concat([frame.select("start_ns") for frame in sources]), window_rows)
    calls = step_syncs(sync_calls(frames), thread)
    span, depth = ("start_ns", "end_ns"), depth_read(frames.nvtx)

    def totals(first: int, end: int) -> tuple[pl.DataFrame, pl.DataFrame]:
        batch = steps.slice(first, end - first)
        lo, hi = batch.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
        meets = (pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)
        mine = meets & (pl.col("thread") == thread)

        def read(frame: pl.LazyFrame, keep: pl.Expr, *columns: str) -> pl.DataFrame:
            return frame.filter(keep).select(*columns).collect(engine="streaming")

        copies = pl.concat([read(frame, meets, *span) for frame in (frames.memcpy, frames.memset)])
        ranges = (*span, "name", "thread", *depth)
        nesting = (coded.nesting(mine, *ranges) if coded is not None else
                   Nesting.of(with_depth(read(frames.nvtx, mine, *ranges))))
        return budget_totals(batch, read(frames.kernels, meets, *span, "name"), copies,
                             read(frames.cuda_api, mine, *span, "name", "thread"),
                             read(frames.osrt, mine, *span, "name", "thread"), nesting, calls.filter(meets),
                             thread), batch

    warmup = int(steps["step"][0]) if every.stats.warmup else None
    budget, rows, activities = _summed((totals(*cut) for cut in step_batches(steps["start_ns"], cuts)), warmup, thread,
                           every.pieces is not None)
    return Budgets(budget=budget, steps=rows, syncs=calls, activities=activities)


def _summed(totals: Iterable[tuple[pl.DataFrame, pl.DataFrame]], warmup: int | None,
            thread: int | None, pieces: bool = False) -> tuple[StepBudget, pl.DataFrame, pl.DataFrame]:
    """The budget of the steps but the WARMUP one, every step's budget (:func:`budget.per_step`) and the steady steps'
    CPU activities summed, from each batch's TOTALS (its totals and its steps), each reduced at once: all steps' totals
    are not held. PIECES: the steps are pieces of one step 0 (:func:`every_step.busy_pieces`), which add up to it."""
    rows, activities = [], []
    for batch, steps in totals:
        rows.append(per_step(batch, steps))
        activities.append(cpu_activities(batch.filter(pl.col("step") != warmup) if warmup is not None else batch))
    every = pl.concat(rows)
    if pieces:
        every = every.select(pl.lit(0, every.schema["step"]).alias("step"), pl.exclude("step").sum())
    summed = cpu_activities(pl.concat(activities))
    return budget_of(every.filter(pl.col("step") != warmup) if warmup is not None else every,
                     summed, thread), every, summed


def _user_ranges(frames: Events, windows: pl.DataFrame, pattern: str, thread: int,
                 window_rows: int | None) -> pl.DataFrame:
    """THREAD's user ranges (:func:`host_time.outermost_user_ranges`) but the step family's (PATTERN), by window."""
    on_thread = frames.nvtx.filter((pl.col("thread") == thread) & (pattern_of(pl.col("name")) != pattern)).select(
        "start_ns", "end_ns", "name")
    return pl.concat(scan(start_windows(on_thread, window_rows), -1, partial(outermost_user_ranges, windows)))


def sync_calls(frames: Events) -> pl.DataFrame:
    """The CUDA calls that block until the GPU catches up: a few per step."""
    pageable = frames.memcpy.filter(PAGEABLE).select("correlation_id").collect(engine="streaming")["correlation_id"]
    return (frames.cuda_api.filter(matching(frames.cuda_api, "name", blocks)
                                   | pl.col("correlation_id").is_in(pageable.implode()))
            .collect(engine="streaming").sort("start_ns", maintain_order=True))
