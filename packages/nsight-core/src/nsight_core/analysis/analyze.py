"""One call from a capture's events to its steps, budget, range self times and findings.

``analyze(trace)`` takes anything with the Trace's frames (:class:`EventTables`: what
``nsight_core.load_trace`` returns, or frames a user builds in a test) and returns one typed
:class:`Analysis`, the ``steps`` and ``findings`` of ``nsight stats --json`` and the page's
"What to fix".
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis import findings as find
from nsight_core.analysis.budget import (
    StepBudget,
    bound_by,
    budget_totals,
    is_thread,
    per_step,
    steady_budget,
    step_thread,
    sync_calls,
)
from nsight_core.analysis.completeness import Completeness
from nsight_core.analysis.events import EventTables
from nsight_core.analysis.findings import Context, Finding
from nsight_core.analysis.footprint import UserWindow, capture_window, users_calls
from nsight_core.analysis.gpu_budget import gpu_budget
from nsight_core.analysis.projection import (
    MIN_PROJECTED,
    gpu_work,
    graph_launches,
    innermost_range,
    launched,
    project_steps,
    range_gpu_spans,
    step_of_launch,
)
from nsight_core.analysis.ranges import Nesting, RangeFamily, range_families
from nsight_core.analysis.steps import StepStats, family_codes, find_steps, matching, on_gpu_clock

LAUNCH_API = r"^cu(da)?LaunchKernel|^cuLaunch|^cu(da)?GraphLaunch"


class Analysis(BaseModel):
    """Everything the analyses say about one capture."""

    window: UserWindow = Field(description="The user's part of the capture (the profiler's own time left out)")
    steps: StepStats
    budget: StepBudget = Field(description="Over the steady steps (warm-up left out), or the whole user window "
                               "as one step when there are no steps")
    budget_scope: Literal["steps", "capture"] = Field(description="What the budget's steps are")
    ranges: list[RangeFamily] = Field(description="NVTX range families with self time, shares of the user window")
    findings: list[Finding]
    savings_withheld: list[str] = Field(default_factory=list, description="Completeness codes for which the "
                                        "findings' savings were withheld: a trace that lost data claims no saving")


@dataclass(frozen=True)
class _Steps:
    """A capture's steps (or the user window as one), their CPU thread and its blocking calls: what the budget
    and the findings' inputs both start from. On the GPU's clock (``gpu``), STEPS are the steps' GPU windows
    (with their ranges as cpu_start_ns/cpu_end_ns) and WORK the launched GPU work."""

    window: UserWindow
    stats: StepStats
    steps: pl.DataFrame
    scope: Literal["steps", "capture"]
    thread: int | None
    blocking: pl.DataFrame
    work: pl.DataFrame | None = None

    @property
    def ranges(self) -> pl.DataFrame:
        """The steps as their CPU ranges (step, start_ns, end_ns): where the host's calls of a step lie."""
        if self.work is None:
            return self.steps
        return self.steps.select("step", pl.col("cpu_start_ns").alias("start_ns"), pl.col("cpu_end_ns").alias("end_ns"))


def _steps(trace: EventTables, window: UserWindow, families: tuple[pl.Series, pl.Series]) -> _Steps:
    """Find the steps (or take the user WINDOW as one); FAMILIES: the NVTX ranges' :func:`family_codes`.

    NVTX steps whose ranges launched GPU work are projected onto the GPU (:mod:`projection`): their statistics,
    budget and findings are read on the GPU's clock, the CPU's periods kept beside them.
    """
    stats, steps = find_steps(trace.nvtx, trace.kernels, families)
    thread = step_thread(stats.family.thread if stats.family else None, trace.cuda_api.lazy(),
                         trace.osrt.lazy())
    blocking = sync_calls(trace.cuda_api, trace.memcpy)
    if stats.source == "nvtx" and stats.family is not None:
        work = launched(gpu_work(trace), trace.cuda_api)
        work = work.with_columns(step_of_launch(work, steps))
        windows = project_steps(steps, work)
        if windows.height >= MIN_PROJECTED:
            return _Steps(window, on_gpu_clock(stats, windows), windows, "steps", thread, blocking, work)
    scope: Literal["steps", "capture"] = "steps"
    if not steps.height:
        scope = "capture"
        steps = pl.DataFrame({"step": [0], "start_ns": [window.start_ns], "end_ns": [window.end_ns],
                              "name": [""], "thread": [None]}, schema=steps.schema)
    return _Steps(window, stats, steps, scope, thread, blocking)


IDLE_COLUMNS = {"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "part": pl.String,
                "cpu_kind": pl.String, "cpu_name": pl.String}


def _totals(trace: EventTables, found: _Steps, nesting: Nesting,
            families: tuple[pl.Series, pl.Series]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """FOUND's steps' budget, summed per step, part and CPU activity (:func:`budget_totals`, or on the GPU's clock
    :func:`gpu_budget`), and its GPU idle stretches with their causes (empty on the CPU's clock)."""
    if found.work is not None and found.stats.family is not None:
        codes, patterns = families
        family_mask = pl.Series(codes == (patterns == found.stats.family.pattern).arg_true()[0])
        return gpu_budget(found.steps, found.work, found.blocking, trace.nvtx, family_mask, found.thread,
                          trace.cuda_api)
    columns = ["start_ns", "end_ns"]
    copies = pl.concat([trace.memcpy.select(columns), trace.memset.select(columns)])
    return (budget_totals(found.steps, trace.kernels, copies, trace.cuda_api, users_calls(trace.osrt, found.window),
                          nesting, found.blocking, found.thread), pl.DataFrame(schema=IDLE_COLUMNS))


def analyze(trace: EventTables) -> Analysis:
    """Steps, per-step budget, NVTX self times and findings of TRACE (pure: no I/O).

    A capture without GPU activity (CPU-only) gets no GPU findings: its GPU is idle by design, and
    its budget's idle time shows what the CPU did.
    """
    return analyze_steps(trace).analysis


@dataclass(frozen=True)
class Analyzed:
    """An analysis with what a page draws of its steps, from one computation (:func:`analyze_steps`)."""

    analysis: Analysis
    view: StepView
    budgets: pl.DataFrame = field(repr=False)
    """:func:`step_budgets`: one row per step (warm-up included), wall_ns and <part>_ns."""


def analyze_steps(trace: EventTables) -> Analyzed:
    """:func:`analyze`, with the step view (:func:`step_view`) and every step's budget (:func:`step_budgets`) made
    from the same projection and budget: a page needs all three, and each alone repeats the others' work (on a
    200,000-kernel capture, three times the memory when they ran side by side)."""
    window = capture_window(trace)
    families = family_codes(trace.nvtx, "name")  # for the steps and the nesting both
    gpu_traced = bool(trace.kernels.height or trace.memcpy.height or trace.memset.height
                      or graph_launches(trace) is not None)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsight-beside") as pool:
        # What needs no budget runs beside it, on the core its batches leave idle (Polars computes without the GIL):
        # the NVTX ranges' nesting and self times (the budget takes the nesting when it is made), and the findings'
        # inputs once the steps are known.
        nesting = pool.submit(Nesting.of, trace.nvtx, families)
        found = _steps(trace, window, families)
        work = found.work if found.work is not None else launched(gpu_work(trace), trace.cuda_api)
        ranges = pool.submit(lambda: range_families(nesting.result(), window.span_ns,
                                                    range_gpu_spans(nesting.result().ranges, work)
                                                    if gpu_traced else None))
        stats, steps = found.stats, found.steps
        steady = steps.slice(1) if stats.warmup else steps
        steady_ranges = found.ranges.slice(1) if stats.warmup else found.ranges
        syncs = pool.submit(syncs_in, steady_ranges, found.blocking, trace.memcpy, found.thread, trace.nvtx)
        shape = pool.submit(_launch_shape, steady_ranges, trace.kernels, trace.cuda_api)
        totals, idle = _totals(trace, found, nesting.result(), families)
    budget = steady_budget(totals, steps, stats.warmup, found.thread)
    if found.work is not None:
        stats = stats.model_copy(update={"bound": bound_by(budget)})
    context = Context(steps=stats, budget=budget, window_ns=window.span_ns,
                      step_p50_ns=stats.family.p50_ns if stats.family else None)
    gpu = find.GpuInputs(*syncs.result(), shape.result(), trace.memcpy,
                         steady if found.scope == "steps" else steps.clear(),
                         find.nominal_pinned(getattr(trace, "gpus", None)),
                         find.kernel_totals(trace.kernels, steady)) if gpu_traced else None
    analysis = Analysis(
        window=window, steps=stats, budget=budget, budget_scope=found.scope,
        ranges=ranges.result(),
        findings=find.findings_of(context, gpu),
    )
    return Analyzed(analysis, _view(found, idle), per_step(totals, found.steps))


def withhold_savings(analysis: Analysis, completeness: Completeness) -> Analysis:
    """ANALYSIS without savings when COMPLETENESS says the trace lost data: time that was not recorded looks
    idle, and a saving read from it is a number the fix would not deliver (a whole-process capture whose CUDA
    events stop early claimed 102 % of its step)."""
    if completeness.complete:
        return analysis
    findings = [finding.model_copy(update={"saving": None, "severity": "info"}) for finding in analysis.findings]
    return analysis.model_copy(update={"findings": findings,
                                       "savings_withheld": [warning.code for warning in completeness.warnings]})


class StepView(BaseModel):
    """What a step view draws (:func:`step_view`): the steps' windows, and the idle stretches with their causes."""

    model_config = {"arbitrary_types_allowed": True}

    clock: Literal["gpu", "cpu"]
    windows: pl.DataFrame = Field(description="step, start_ns, end_ns (the window drawn), cpu_start_ns, cpu_end_ns")
    idle: pl.DataFrame = Field(description="step, start_ns, end_ns, part, cpu_kind, cpu_name: each GPU idle stretch "
                               "and the cause that holds most of it (empty on the CPU's clock)")
    median_step: int | None = Field(description="The steady step whose window is the median's (None: no steps)")
    slowest_step: int | None


def step_view(trace: EventTables) -> StepView:
    """The steps' windows and idle causes of TRACE, with its median and slowest steady step: what the page draws
    in full (a step of a few thousand events, whatever the capture's size)."""
    return analyze_steps(trace).view


def _view(found: _Steps, idle: pl.DataFrame) -> StepView:
    windows = found.steps
    if "cpu_start_ns" not in windows.columns:
        windows = windows.with_columns(pl.col("start_ns").alias("cpu_start_ns"), pl.col("end_ns").alias("cpu_end_ns"))
    return steps_view(windows, found.stats.warmup, "gpu" if found.work is not None else "cpu", idle,
                      found.scope == "steps")


def steps_view(windows: pl.DataFrame, warmup: bool, clock: Literal["gpu", "cpu"], idle: pl.DataFrame,
               steps: bool = True) -> StepView:
    """The :class:`StepView` of WINDOWS (step, start_ns, end_ns, cpu_start_ns, cpu_end_ns), the first a WARMUP or not,
    with the IDLE stretches of the steps it draws; STEPS False: the windows are the user window, no steps."""
    steady = windows.slice(1) if warmup else windows
    median = slowest = None
    if steps and steady.height:
        ordered = steady.select("step", (pl.col("end_ns") - pl.col("start_ns")).alias("d")).sort("d", "step")
        median, slowest = int(ordered["step"][(ordered.height - 1) // 2]), int(ordered["step"][-1])
    shown = windows.select("step", "start_ns", "end_ns", "cpu_start_ns", "cpu_end_ns")
    return StepView(clock=clock, windows=shown, idle=idle, median_step=median, slowest_step=slowest)


def step_budgets(trace: EventTables) -> pl.DataFrame:
    """One row per step: step, wall_ns and the budget parts (<part>_ns), which add up to wall_ns.

    Without steps, one row (step 0) for the user's window.
    """
    families = family_codes(trace.nvtx, "name")
    found = _steps(trace, capture_window(trace), families)
    return per_step(_totals(trace, found, Nesting.of(trace.nvtx, families), families)[0], found.steps)


def in_steps(frame: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """FRAME's events that start inside a step, with the step index."""
    located = frame.sort("start_ns").join_asof(
        steps.select("step", pl.col("start_ns").alias("_step_start"), pl.col("end_ns").alias("_step_end")),
        left_on="start_ns", right_on="_step_start", strategy="backward")
    return located.filter(pl.col("start_ns") < pl.col("_step_end")).drop("_step_start", "_step_end")


def syncs_in(steps: pl.DataFrame, blocking: pl.DataFrame, memcpy: pl.DataFrame, thread: int | None,
             nvtx: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """The steps' blocking calls on their thread counted by name and the innermost range each came from (name,
    ``range``: the steps' own family by name, ``len``), and their small device-to-host copies (scalar reads). Counts,
    not a row a call: a streamed capture adds its batches' up (a call or more a step, millions of steps)."""
    calls = in_steps(blocking.filter(is_thread(thread)), steps)
    named = calls.select("name", innermost_range(calls, nvtx).str.replace_all(r"\d+", "{n}").alias("range"))
    small = in_steps(memcpy.filter((pl.col("direction") == "Device-to-Host")
                                   & (pl.col("bytes") <= find.SMALL_COPY_BYTES)), steps)
    return named.group_by("name", "range").len(), small.height


def _launch_shape(steps: pl.DataFrame, kernels: pl.DataFrame, cuda_api: pl.DataFrame) -> tuple[float, float, float]:
    """Kernels per step, median kernel duration and median launch-call duration in the steps."""
    launches = in_steps(cuda_api.filter(matching(cuda_api, "name", lambda name: name.str.contains(LAUNCH_API))), steps)
    ran = kernels.filter(pl.col("correlation_id").is_in(launches["correlation_id"].implode()))
    per_step_count = ran.height / steps.height if steps.height else 0.0
    kernel_p50 = float(ran.select((pl.col("end_ns") - pl.col("start_ns")).median()).item() or 0.0)
    launch_p50 = float(launches.select((pl.col("end_ns") - pl.col("start_ns")).median()).item() or 0.0)
    return per_step_count, kernel_p50, launch_p50
