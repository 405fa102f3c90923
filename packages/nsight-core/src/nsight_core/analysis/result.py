"""The typed result of a capture's analysis (analyze.py): numbers and codes, no words (render/ writes those)."""

from __future__ import annotations

from typing import Literal

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.budget import StepBudget
from nsight_core.analysis.completeness import Completeness
from nsight_core.analysis.finding_model import Finding
from nsight_core.analysis.overhead import ProfilerOverhead
from nsight_core.analysis.ranges import RangeFamily
from nsight_core.analysis.steps import StepStats
from nsight_core.analysis.user_window import UserWindow


class Coverage(BaseModel):
    """What "What to fix" covers of the capture, and why."""

    scope: Literal["every_step", "capture_as_one_step"] = Field(
        description="every_step: every step of the family found; capture_as_one_step: no steps were found (steps' "
                    "reason says why), the user window is budgeted as one step")
    steps: int = Field(description="Steps analysed (warm-up included); 1 for the capture as one step")
    process: int | None = Field(default=None, description="The steps' process, where the capture holds other "
                                "processes' GPU work too (ranks): the analysis is of its calls and GPUs alone")
    gpus: list[int] = Field(default_factory=list, description="With process: the GPUs it launched kernels on")


class Analysis(BaseModel):
    """Everything the analyses say about one capture."""

    window: UserWindow = Field(description="The user's part of the capture (the profiler's own time left out)")
    steps: StepStats
    budget: StepBudget = Field(description="Over the steady steps (warm-up left out), or the whole user window "
                               "as one step when there are no steps")
    budget_scope: Literal["steps", "capture"] = Field(description="What the budget's steps are")
    coverage: Coverage
    overhead: ProfilerOverhead | None = Field(default=None, description="On the GPU's clock: what nsys' tracing added "
                                              "to each step, a part of the budget of its own")
    ranges: list[RangeFamily] = Field(description="NVTX range families with self time, shares of the user window")
    findings: list[Finding]
    savings_withheld: list[str] = Field(default_factory=list, description="Completeness codes for which the "
                                        "findings' savings were withheld: a trace that lost data claims no saving")


def withhold_savings(analysis: Analysis, completeness: Completeness) -> Analysis:
    """ANALYSIS without savings when COMPLETENESS says the trace lost data: unrecorded time looks idle, and a saving
    read from it is one the fix would not deliver."""
    if completeness.complete:
        return analysis
    findings = [finding.model_copy(update={"saving": None, "severity": "info"}) for finding in analysis.findings]
    return analysis.model_copy(update={"findings": findings,
                                       "savings_withheld": [warning.code for warning in completeness.warnings]})


class StepView(BaseModel):
    """What a step view draws: the steps' windows, and the idle stretches with their causes."""

    model_config = {"arbitrary_types_allowed": True}

    clock: Literal["gpu", "cpu"]
    windows: pl.DataFrame = Field(description="step, start_ns, end_ns (the window drawn), cpu_start_ns, cpu_end_ns")
    idle: pl.DataFrame = Field(description="step, start_ns, end_ns, part, cpu_kind, cpu_name: each GPU idle stretch "
                               "of the drawn steps and the cause that holds most of it (empty on the CPU's clock)")
    median_step: int | None = Field(description="The steady step whose window is the median's (None: no steps)")
    slowest_step: int | None


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
