"""One call from a capture's events to its steps, budget, NVTX range table and findings: the one pipeline.

Every stage reads the events as lazy frames in windows (:mod:`nsight_core.analysis.windows`), so a capture of any size
is analysed in bounded memory, and the answer does not depend on the machine's memory.

1. The step family is chosen from the capture's first CHOOSE_ROWS NVTX ranges and kernels (:func:`first_ranges`).
   Of a capture of several processes that ran kernels (the ranks `torchrun` starts, under one nsys), the rest reads
   the events of one process alone (:func:`steps_process`), the NVTX family's or else the busiest: another rank's
   GPU would fill this one's idle time, and its calls reuse this one's correlation ids.
2. Every step of that family over the whole capture (:func:`every_step.every_step`), on the GPU's clock where the
   steps launched GPU work; a capture without steps is one step, its user window, cut into pieces.
3. Every step's budget (:func:`every_budget.every_budget`), then the NVTX range table and the findings' inputs
   (:func:`finding_inputs.analysis_of`). The range table reads only the events: it is started first, in a thread
   beside steps 1 to 3 (:func:`range_table.start_range_table`)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import polars as pl

from nsight_core.analysis.every_budget import Budgets, every_budget
from nsight_core.analysis.every_step import EveryStep, capture_as_step, every_step
from nsight_core.analysis.finding_inputs import analysis_of
from nsight_core.analysis.range_table import start_range_table
from nsight_core.analysis.ranges import CodedRanges
from nsight_core.analysis.result import Analysis, StepView, steps_view
from nsight_core.analysis.steps import CaptureAsStep, ChosenSteps, FamilySteps, find_steps
from nsight_core.analysis.user_window import capture_window
from nsight_core.trace.depth import depth_read, with_depth
from nsight_core.trace.frames import EventTables
from nsight_core.trace.schema import pid_of
from nsight_core.trace.streamed import WINDOW_ROWS, Events, Process, events

CHOOSE_ROWS = 1_000_000
"""NVTX ranges and kernels from the start that choose the step family: a fixed number, the same on any machine."""


def first_ranges(frames: Events) -> CodedRanges:
    """FRAMES' first CHOOSE_ROWS NVTX ranges by start, which choose the step family with as many kernels
    (:func:`steps.find_steps`); whole where they are all the ranges and the loader counted their depth."""
    # The first ranges by start hold every range enclosing one of them: their depth among themselves is the capture's.
    depth = depth_read(frames.nvtx)
    nvtx = with_depth(_first(frames.nvtx.select("start_ns", "end_ns", "name", "domain", "thread", *depth)))
    whole = bool(depth) and (nvtx.height < CHOOSE_ROWS or frames.nvtx.select(pl.len()).collect().item() == nvtx.height)
    return CodedRanges(ranges=nvtx, frames=frames, whole=whole)


def steps_process(frames: Events, first: CodedRanges, kernels: pl.DataFrame) -> tuple[Events, ChosenSteps]:
    """The step family chosen from FIRST's ranges and the capture's first KERNELS (start_ns, end_ns, name; pid and
    device where known), and FRAMES as the family's process made them where those kernels are of several processes
    (ranks); else FRAMES. The process of an NVTX family's thread; without one, the process that launched most of
    them, whose kernels alone then give the steps. Its GPUs are those it launched them on: ranks start together, each
    on its own GPU, so the first kernels tell without a pass over the rest."""
    chosen = find_steps(first.ranges, kernels.select("start_ns", "end_ns", "name"), first.codes)[0]
    if "pid" not in kernels.columns or kernels["pid"].n_unique() < 2:
        return frames, chosen
    thread = chosen.family.thread if isinstance(chosen, FamilySteps) else None
    pid = int(pl.select(pid_of(pl.lit(thread))).item()) if thread is not None else \
        int(kernels["pid"].value_counts(sort=True).sort("count", "pid", descending=[True, False])["pid"][0])
    own = kernels.filter(pl.col("pid") == pid)
    if not own.height:
        return frames, chosen
    if thread is None:
        chosen = find_steps(first.ranges, own.select("start_ns", "end_ns", "name"), first.codes)[0]
    return frames.of_process(Process(pid=pid, devices=tuple(own["device"].unique().sort().to_list()))), chosen


def _first(frame: pl.LazyFrame) -> pl.DataFrame:
    """FRAME's first CHOOSE_ROWS rows by start: its head where already in order (as nsys writes; one pass checks)."""
    in_order = frame.select((pl.col("start_ns").diff().fill_null(0) >= 0).all()).collect(engine="streaming").item()
    ordered = frame if in_order else frame.sort("start_ns", maintain_order=True)
    return ordered.head(CHOOSE_ROWS).collect(engine="streaming")


@dataclass(frozen=True, kw_only=True)
class Analyzed:
    """An analysis with what a page draws of its steps, from one computation (:func:`analyze_steps`)."""

    analysis: Analysis
    every: EveryStep
    budgets: Budgets

    @property
    def view(self) -> StepView:
        """The steps' windows with their median and slowest steady step (idle stretches: :meth:`stretches`)."""
        return steps_view(self.every.drawn, self.analysis.steps.warmup, self.analysis.steps.clock,
                          self.budgets.stretches([]), self.every.pieces is None)


def analyze(trace: EventTables) -> Analysis:
    """Steps, per-step budget, NVTX self times and findings of TRACE (pure: no I/O but reading its events). A CPU-only
    capture gets no GPU findings: its budget's idle time shows what the CPU did."""
    return analyze_steps(trace).analysis


def analyze_steps(trace: EventTables, window_rows: int | None = WINDOW_ROWS) -> Analyzed:
    """:func:`analyze`, with every step's window and budget: what the page's step view and chart of steps draw.
    WINDOW_ROWS: events per window (None: one window); the answer is the same whatever it is."""
    frames = events(trace)
    window = capture_window(trace, frames)
    coded = first if (first := first_ranges(frames)).whole else None  # all the ranges: their codes serve every stage
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsight-range-table") as pool:
        start_range_table(pool, frames, window.span_ns, window_rows, coded)  # what the findings' inputs take at the end
        processes = ["pid", "device"] if "pid" in frames.kernels.collect_schema() else []  # none in hand-made frames
        # The user's kernels: not the region's calibration launches before its window, which recur at every kernel.
        users = frames.kernels.filter(pl.col("start_ns") >= window.start_ns)
        frames, chosen = steps_process(frames, first, _first(users.select("start_ns", "end_ns", "name", *processes)))
        every = every_step(frames, chosen, window_rows)
        if every is None:
            if not isinstance(chosen, CaptureAsStep):
                reason = "the step ranges chosen from the capture's start overlap each other later on"
                chosen = CaptureAsStep(candidates=chosen.candidates, reason=reason)
            every = capture_as_step(frames, chosen, window.start_ns, window.end_ns, window_rows)
        budgets = every_budget(frames, every, window_rows, coded)
        meta = getattr(trace, "meta", None) or {}
        analysis = analysis_of(frames, getattr(trace, "gpus", None), window, every, budgets,
                               meta.get("EXPORT_PRODUCT_VERSION"), window_rows)
    return Analyzed(analysis=analysis, every=every, budgets=budgets)


def step_view(trace: EventTables) -> StepView:
    """The steps' windows and idle causes of TRACE, with its median and slowest steady step: what the page draws
    in full (a step of a few thousand events, whatever the capture's size)."""
    parts = analyze_steps(trace)
    view = parts.view
    drawn = [step for step in (view.median_step, view.slowest_step) if step is not None]
    return view.model_copy(update={"idle": parts.budgets.stretches(drawn)})


def step_budgets(trace: EventTables) -> pl.DataFrame:
    """One row per step: step, wall_ns and the <part>_ns that add up to it; without steps, step 0: the user's window."""
    return analyze_steps(trace).budgets.steps
