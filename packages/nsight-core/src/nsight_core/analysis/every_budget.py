"""Where every step's time went in a capture too large to analyse whole: the budget of every step, streamed.

A streamed capture's first steps that fit (profile.first_part) pick its steps; a slowdown that starts later is in none
of them, so every step gets its budget here, and its findings from that (analysis/whole_findings.py). Either budget is
local in time, so it is made batch by batch as for a capture read whole, with the same code.

On the GPU's clock (analysis/gpu_budget.py), each batch of steps gets the GPU work that ran in its time (a streamed
query; the Parquet scan skips the files outside it) and the calls that launched it, by correlation id. What the host
was in comes from streamed passes over windows of start time, each window's result carried into the next: the user
ranges outermost on the steps' thread (:func:`gpu_budget.outermost_user_ranges`, from the latest end before the
window), when it dispatched (:func:`gpu_budget.dispatch_runs`, whose runs merge again across windows), and its
synchronising calls (a few per step).

On the CPU's clock (:func:`budget.budget_totals`: the steps are their ranges, or their kernel periods), each batch of
steps gets every event that overlaps its time, the thread's ranges among them: a range that encloses one of them
overlaps it too, so its nesting there is the capture's. A capture without steps is one step, budgeted the same way
in pieces cut where the GPU is busy (:func:`whole_steps.busy_pieces`), whose rows add up to the step's.

Number for number the budget of the capture read whole (tests/core/test_streamed_analysis.py)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

import polars as pl

from nsight_core.analysis.budget import (
    PAGEABLE,
    StepBudget,
    blocks,
    bound_by,
    budget_of,
    budget_totals,
    cpu_activities,
    per_step,
)
from nsight_core.analysis.gpu_budget import (
    IDLE_COLUMNS,
    Host,
    batches,
    budget_in_batches,
    dispatch_runs,
    outermost_user_ranges,
    step_syncs,
)
from nsight_core.analysis.intervals import WINDOW_ROWS, start_cuts, start_windows, step_batches
from nsight_core.analysis.ranges import Nesting
from nsight_core.analysis.steps import Bound, pattern_of
from nsight_core.analysis.whole_steps import EveryStep, gpu_work_of, launched_by_id
from nsight_core.trace.model import with_depth
from nsight_core.trace.streamed import Events

STREAMED_BATCH_WORK = 400_000
"""GPU work per batch of steps of the streamed budget (gpu_budget.BATCH_WORK read whole): each batch is a streamed
query of its own, whose cost a capture of many batches pays again and again. On 2 cores, 20 M kernels of CUDA-graph
replays (1,000 a launch) took 18.5 s at 100,000 a batch, 11.0 s at 400,000 and 12.6 s at 1,000,000, the process's
peak unchanged but at 1,000,000 (+46 MB); 18.7 M kernels and 19.5 M CUDA calls of a replicated fixture 22.7 s and
15.3 s, the peak unchanged."""


@dataclass(frozen=True)
class WholeBudget:
    """The budget of every step of a streamed capture (:func:`whole_capture_budget`)."""

    budget: StepBudget
    """Over the steady steps (the warm-up left out), as :func:`analyze.analyze_steps` states it."""
    steps: pl.DataFrame
    """Every step's budget (:func:`budget.per_step`), warm-up included: what the page's chart of steps draws."""
    bound: Bound
    """What bounds the steady steps: on the GPU's clock :func:`budget.bound_by`, on the CPU's the steps' own."""
    syncs: pl.DataFrame = field(repr=False)
    """The steps' thread's synchronising calls, by start (:func:`gpu_budget.step_syncs`): the findings read them too."""
    stretches: Callable[[Collection[int]], pl.DataFrame] = field(repr=False)
    """The GPU idle stretches of those steps with their causes (gpu_budget.IDLE_COLUMNS), each step budgeted again
    alone: what a drawn step shades (they are not kept for every step; none on the CPU's clock)."""


STEP_EVENTS = 1
"""What each step costs the passes over every step, in events read at once (``held_rows``' unit): their windows, each
step's budget, the host's dispatch runs and the counts of GPU work between step edges are a row or more a step, whatever
its events. Measured on a replicated H200 fixture of 10 ms steps with 2 GiB allowed: 660-800 bytes a step (640,000
steps peaked at 864 MB, 2,560,000 at 2.39 GB) against about 930 a step-event read whole (7x its 132 Arrow bytes), and
2,560,000 steps against 2,010,979 events allowed at once there: such a capture gets What to fix from its first steps."""


class StepTooLarge(ValueError):
    """A step holds more events than may be read at once: the streamed budget reads a batch of whole steps together
    (a step's budget is not a sum over its parts of time: a run of idle GPU is a launch gap or idle by its whole
    length), so a capture of a few huge steps (an epoch as one step) would hold one in memory whole. Raised too where
    the steps are so many that what each holds over every step would not fit (``STEP_EVENTS``)."""


def whole_capture_budget(frames: Events, every: EveryStep, window_rows: int | None = WINDOW_ROWS,
                         step_rows: int | None = None, held_rows: int | None = None) -> WholeBudget | None:
    """The budget of EVERY step of the capture FRAMES holds, on the steps' clock (None where no thread ran them).
    WINDOW_ROWS: events per window of the streamed passes (None: one window). STEP_ROWS: the most events (GPU work on
    the GPU's clock, any on the CPU's) one step may hold, the memory allowed (None: no limit); a step holding more
    raises :class:`StepTooLarge` before any batch is read. HELD_ROWS: the events the memory allowed reads at once, for
    what every step holds over all of them (``STEP_EVENTS`` each; None: no limit): more steps raise it too."""
    family, thread = every.stats.family, every.thread
    if thread is None or (family is None and every.pieces is None):
        return None
    count = every.ranges.height if every.pieces is None else 1
    if held_rows is not None and count * STEP_EVENTS > held_rows:
        raise StepTooLarge(f"its {count:,} steps take about {count * STEP_EVENTS:,} events' memory over every step, "
                           f"and the memory allowed reads {held_rows:,} at once")
    if every.windows is None or family is None:
        return _cpu_budget(frames, every, thread, window_rows, step_rows)
    windows = every.windows  # an NVTX family's, whose thread is its ranges'
    work = gpu_work_of(frames)
    counts = _edge_counts(work.select("start_ns"), windows)
    if step_rows is not None:
        _check_steps(counts, windows, step_rows)
    host = Host.of(windows, _user_ranges(frames, windows, family.pattern, thread, window_rows),
                   dispatch_runs(pl.concat([dispatch_runs(calls) for calls in
                                            start_windows(frames.cuda_api.select("start_ns", "end_ns"), window_rows)])))

    def between(lo: int, hi: int) -> pl.DataFrame:
        return launched_by_id(work.filter((pl.col("end_ns") > lo) & (pl.col("start_ns") <= hi)), frames.cuda_api)

    # Per window, how much work starts before it, for the batches: after k edges, (k + 1) // 2 windows have begun.
    within = counts.group_by(((pl.col("_edge") + 1) // 2).alias("_window")).agg(pl.col("len").sum())
    firsts = (pl.DataFrame({"_window": pl.int_range(windows.height, eager=True).cast(within["_window"].dtype)})
              .join(within, on="_window", how="left").sort("_window")
              .select(pl.col("len").fill_null(0).cum_sum().cast(pl.Int64)).to_series())
    calls = step_syncs(_sync_calls(frames), thread)
    warmup = int(windows["step"][0]) if every.stats.warmup else None
    budget, steps = _summed(((budget_in_batches(windows, [cut], between, calls, host, stretches=False)[0],
                              windows.slice(*cut)) for cut in batches(firsts, STREAMED_BATCH_WORK)), warmup, thread)

    def stretches(drawn: Collection[int]) -> pl.DataFrame:
        at = windows.with_row_index("_at").filter(pl.col("step").is_in(list(drawn)))["_at"].sort()
        return budget_in_batches(windows, [(int(row), 1) for row in at], between, calls, host)[1]

    return WholeBudget(budget, steps, bound_by(budget), calls, stretches)


def _edge_counts(starts: pl.LazyFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """How many of the events STARTS holds (a start_ns column) start after each number of STEPS' edges (start_ns,
    end_ns: by start, not overlapping), in one streamed pass: ``_edge`` k, ``len``. After an odd number k of edges an
    event is inside step (k - 1) // 2 (by row), else between steps. One search of the edges a row: a second one (the
    ends apart from the starts) held the column in memory, +160 MB for 20 M kernels."""
    edges = steps.select(pl.concat_list("start_ns", "end_ns").alias("_edges")).explode("_edges")["_edges"]
    return (starts.select(pl.lit(edges).search_sorted(pl.col("start_ns"), side="right").cast(pl.Int64).alias("_edge"))
            .group_by("_edge").len().collect(engine="streaming"))


def _check_steps(counts: pl.DataFrame, steps: pl.DataFrame, most: int, what: str = "step {}") -> None:
    """Raise :class:`StepTooLarge` where more than MOST events start inside one of STEPS (COUNTS:
    :func:`_edge_counts` of them), named by WHAT with its number."""
    inside = counts.filter(pl.col("_edge") % 2 == 1).sort("len", descending=True).head(1)
    if inside.height and int(inside["len"][0]) > most:
        step = steps["step"][(int(inside["_edge"][0]) - 1) // 2]
        raise StepTooLarge(f"{what.format(step)} holds {int(inside['len'][0]):,} events, and the memory allowed reads "
                           f"{most:,} at once")


def _cpu_budget(frames: Events, every: EveryStep, thread: int, window_rows: int | None,
                step_rows: int | None) -> WholeBudget:
    """:func:`budget.budget_totals` of EVERY step (their ranges or kernel periods, on THREAD) in batches of steps
    whose time holds about WINDOW_ROWS events: each batch's events are those overlapping its time, read from disk.
    STEP_ROWS: as for :func:`whole_capture_budget`, every event counted."""
    steps = every.ranges if every.pieces is None else every.pieces
    sources = (frames.kernels, frames.memcpy, frames.memset, frames.cuda_api, frames.osrt, frames.nvtx)
    starts = pl.concat([frame.select("start_ns") for frame in sources])
    if step_rows is not None:
        _check_steps(_edge_counts(starts, steps), steps, step_rows,
                     "step {}" if every.pieces is None else "piece {} of the capture (cut where the GPU is busy)")
    cuts = start_cuts(starts, window_rows)
    calls = step_syncs(_sync_calls(frames), thread)
    span = ("start_ns", "end_ns")

    def totals(first: int, end: int) -> tuple[pl.DataFrame, pl.DataFrame]:
        batch = steps.slice(first, end - first)
        lo, hi = batch.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
        meets = (pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)
        mine = meets & (pl.col("thread") == thread)

        def read(frame: pl.LazyFrame, keep: pl.Expr, *columns: str) -> pl.DataFrame:
            return frame.filter(keep).select(*columns).collect(engine="streaming")

        copies = pl.concat([read(frame, meets, *span) for frame in (frames.memcpy, frames.memset)])
        return budget_totals(batch, read(frames.kernels, meets, *span, "name"), copies,
                             read(frames.cuda_api, mine, *span, "name", "thread"),
                             read(frames.osrt, mine, *span, "name", "thread"),
                             Nesting.of(with_depth(read(frames.nvtx, mine, *span, "name", "thread"))),
                             calls.filter(meets), thread), batch

    warmup = int(steps["step"][0]) if every.stats.warmup else None
    budget, rows = _summed((totals(*cut) for cut in step_batches(steps["start_ns"], cuts)), warmup, thread,
                           every.pieces is not None)
    return WholeBudget(budget, rows, every.stats.bound, calls, lambda _: pl.DataFrame(schema=IDLE_COLUMNS))


def _summed(totals: Iterable[tuple[pl.DataFrame, pl.DataFrame]], warmup: int | None,
            thread: int, pieces: bool = False) -> tuple[StepBudget, pl.DataFrame]:
    """The budget of the steps but the WARMUP one (its step, if any), and every step's budget (:func:`budget.per_step`),
    from each batch's TOTALS (a budget's totals and its steps), each reduced at once to a row a step and the CPU's
    activities summed: all steps' totals held 0.85 GB for 400,000 steps of a replicated fixture. PIECES: the steps are
    pieces of one step 0 (:func:`whole_steps.busy_pieces`), whose budgets add up to its budget."""
    rows, activities = [], []
    for batch, steps in totals:
        rows.append(per_step(batch, steps))
        activities.append(cpu_activities(batch.filter(pl.col("step") != warmup) if warmup is not None else batch))
    every = pl.concat(rows)
    if pieces:
        every = every.select(pl.lit(0, every.schema["step"]).alias("step"), pl.exclude("step").sum())
    return budget_of(every.filter(pl.col("step") != warmup) if warmup is not None else every,
                     pl.concat(activities), thread), every


def _user_ranges(frames: Events, windows: pl.DataFrame, pattern: str, thread: int,
                 window_rows: int | None) -> pl.DataFrame:
    """The user ranges of the steps' THREAD (:func:`gpu_budget.outermost_user_ranges`), the ranges of the step family
    (PATTERN) left out, from windows of start time."""
    on_thread = frames.nvtx.filter((pl.col("thread") == thread) & (pattern_of(pl.col("name")) != pattern)).select(
        "start_ns", "end_ns", "name")
    found, reach = [], -1
    for ranges in start_windows(on_thread, window_rows):
        user, reach = outermost_user_ranges(ranges.sort("start_ns"), windows, reach)
        found.append(user)
    return pl.concat(found)


def _sync_calls(frames: Events) -> pl.DataFrame:
    """The CUDA calls that block until the GPU catches up (:func:`budget.sync_calls`), streamed: a few per step."""
    pageable = frames.memcpy.filter(PAGEABLE).select("correlation_id").collect(engine="streaming")["correlation_id"]
    # The test runs on the few distinct names, found among the calls' name ids, not on every call's text.
    names = frames.cuda_api.select("name_id", "name").unique().collect(engine="streaming")
    blocking = names.filter(blocks(pl.col("name")))["name_id"]
    return (frames.cuda_api.filter(pl.col("name_id").is_in(blocking.implode())
                                   | pl.col("correlation_id").is_in(pageable.implode()))
            .collect(engine="streaming").sort("start_ns", maintain_order=True))
