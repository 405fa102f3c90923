"""The steps a page draws in full, with their events: the median and slowest steady step (:func:`step_view`), and
the steps a finding's evidence points at. A step's drawn span is its GPU window and its NVTX range together; its events
are all overlapping it (:data:`EVENT_SCHEMA`), the MAX_EVENTS longest where more. Numbers and names only."""

from __future__ import annotations

from typing import Literal

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.analyze import Analyzed
from nsight_core.analysis.result import Analysis, StepView
from nsight_core.analysis.steps import CaptureAsStep, KernelPeriodSteps, NvtxCpuSteps, NvtxGpuSteps
from nsight_core.trace.depth import with_depth
from nsight_core.trace.frames import EventTables
from nsight_core.trace.streamed import Events

MAX_EVENTS = 6000
"""Events drawn of one step at most (a step of a few thousand kernels draws whole)."""
MAX_EXTRA_STEPS = 4
"""Steps drawn beyond the median and slowest because a finding's evidence points at them."""

Role = Literal["median", "slowest", "evidence"]
EVENT_SCHEMA = pl.Schema({
    "lane": pl.String(), "device": pl.Int64(), "stream": pl.Int64(), "thread": pl.Int64(), "kind": pl.String(),
    "name": pl.String(), "bytes": pl.Int64(), "depth": pl.Int64(), "start_ns": pl.Int64(), "end_ns": pl.Int64()})
"""lane: gpu (device, stream) or cpu (thread); kind: kernel, graph, memcpy, memset, cuda_api, nvtx; name: the
kernel's demangled name, the copy's direction, the call's or range's name ('' for a memset or graph); depth: an NVTX
range's nesting level on its thread (0 for the rest); a graph launch's name is its graph id."""


class DrawnStep(BaseModel):
    """One step as the page draws it: its span, every event overlapping it and its GPU idle stretches."""

    model_config = {"arbitrary_types_allowed": True}

    step: int
    roles: list[Role] = Field(description="Why it is drawn: the median, the slowest (one step may be both), evidence")
    start_ns: int = Field(description="The span drawn: the GPU window and the step's range together")
    end_ns: int
    gpu_start_ns: int
    gpu_end_ns: int
    cpu_start_ns: int
    cpu_end_ns: int
    wall_ns: int = Field(description="The step's time: its GPU window on the GPU's clock, else its range")
    events: pl.DataFrame = Field(description="EVENT_SCHEMA, by start")
    idle: pl.DataFrame = Field(description="start_ns, end_ns, part, cpu_kind, cpu_name (empty on the CPU's clock)")
    left_out: int = Field(description="Events overlapping the span not drawn (past MAX_EVENTS, the shortest)")


class StepDrawing(BaseModel):
    """What the page's step view and budget bars draw of one capture."""

    model_config = {"arbitrary_types_allowed": True}

    stats: NvtxGpuSteps | NvtxCpuSteps | KernelPeriodSteps = Field(
        description="The steps drawn (their clock and what they are: NVTX ranges or the kernel sequence's periods)")
    steps: list[DrawnStep] = Field(description="Median first, then the slowest, then evidence steps by index")
    thread_names: dict[int, str] = Field(description="nsys thread id -> the thread's name, for the drawn threads")
    budgets: pl.DataFrame = Field(description="step_budgets: step, wall_ns, <part>_ns (they add up to wall_ns)")
    warmup_steps: int = Field(description="Leading steps left out of the steady state (0 or 1)")
    median_step: int | None
    slowest_step: int | None


def step_roles(view: StepView, evidence: tuple[tuple[int, ...], tuple[int, ...]]) -> dict[int, list[Role]]:
    """The steps to draw and why: VIEW's median and slowest steady step, then the steps EVIDENCE names (steps, and
    events' start times: the steps holding them), up to MAX_EXTRA_STEPS; none where VIEW has no steps."""
    if view.median_step is None or view.slowest_step is None:
        return {}
    evidence_steps, evidence_times = evidence
    roles: dict[int, list[Role]] = {view.median_step: ["median"]}
    roles.setdefault(view.slowest_step, []).append("slowest")
    windows = view.windows
    located = windows.filter(pl.any_horizontal(
        (pl.col("start_ns") <= time) & (pl.col("end_ns") > time) for time in evidence_times))["step"].to_list() \
        if evidence_times else []
    for step in sorted(set(evidence_steps) | set(located)):
        if step not in roles and len(roles) < 2 + MAX_EXTRA_STEPS and step in windows["step"]:
            roles[step] = ["evidence"]
    return roles


def _drawn(trace: EventTables | Events, view: StepView, step: int, roles: list[Role]) -> DrawnStep:
    window = view.windows.filter(pl.col("step") == step).row(0, named=True)
    start = min(window["start_ns"], window["cpu_start_ns"])
    end = max(window["end_ns"], window["cpu_end_ns"])
    events = step_events(trace, start, end)
    left_out = max(events.height - MAX_EVENTS, 0)
    if left_out:
        events = events.sort(pl.col("end_ns") - pl.col("start_ns"), descending=True).head(MAX_EVENTS).sort("start_ns")
    return DrawnStep(step=step, roles=roles, start_ns=start, end_ns=end, gpu_start_ns=window["start_ns"],
                     gpu_end_ns=window["end_ns"], cpu_start_ns=window["cpu_start_ns"], cpu_end_ns=window["cpu_end_ns"],
                     wall_ns=window["end_ns"] - window["start_ns"], events=events,
                     idle=view.idle.filter(pl.col("step") == step).drop("step"), left_out=left_out)


def step_events(trace: EventTables | Events, start_ns: int, end_ns: int) -> pl.DataFrame:
    """Every event of TRACE overlapping [START_NS, END_NS), in EVENT_SCHEMA, by start. Lazy frames (a large capture) are
    streamed, NVTX depth counted among the ranges overlapping the span, which hold all that enclose one."""
    def overlapping(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
        return frame.lazy().filter((pl.col("start_ns") < end_ns) & (pl.col("end_ns") > start_ns)).collect()

    def lane(frame: pl.DataFrame, on: str, kind: str, *columns: pl.Expr | str) -> pl.DataFrame:
        return frame.select(pl.lit(on).alias("lane"), pl.lit(kind).alias("kind"), *columns, "start_ns", "end_ns")

    gpu = ("device", "stream")
    parts = [lane(overlapping(trace.kernels), "gpu", "kernel", *gpu, "name"),
             lane(overlapping(trace.memcpy), "gpu", "memcpy", *gpu, pl.col("direction").alias("name"), "bytes"),
             lane(overlapping(trace.memset), "gpu", "memset", *gpu, pl.lit("").alias("name"), "bytes"),
             lane(overlapping(trace.cuda_api), "cpu", "cuda_api", "thread", "name"),
             lane(with_depth(overlapping(trace.nvtx)), "cpu", "nvtx", "thread", "name", "depth")]
    if (graphs := getattr(trace, "graphs", None)) is not None:
        parts.append(lane(overlapping(graphs), "gpu", "graph", *gpu, pl.col("graph_id").cast(pl.String).alias("name")))
    # Each part holds its own of EVENT_SCHEMA's columns: the others are null, but depth is 0 outside NVTX ranges.
    events = pl.concat([part.cast({c: EVENT_SCHEMA[c] for c in part.columns}) for part in parts], how="diagonal")
    return events.select(*EVENT_SCHEMA).with_columns(pl.col("depth").fill_null(0)).sort("start_ns")


def drawing_for(trace: EventTables | Events, analysis: Analysis, parts: Analyzed) -> StepDrawing | None:
    """The steps of TRACE that its ANALYSIS draws (PARTS: its every step and budget; :func:`step_roles`, so a click on
    a finding's evidence finds it drawn), their idle stretches budgeted again alone; None when there are no steps."""
    view, stats = parts.view, analysis.steps
    places = [e.where for finding in analysis.findings for e in finding.evidence if e.where is not None]
    evidence = (tuple(where.step for where in places if where.step is not None),
                tuple(where.start_ns for where in places if where.start_ns is not None))
    roles = step_roles(view, evidence)
    view = view.model_copy(update={"idle": parts.budgets.stretches(list(roles))})
    if view.median_step is None or view.slowest_step is None or isinstance(stats, CaptureAsStep):
        return None
    drawn = [_drawn(trace, view, step, why) for step, why in roles.items()]
    threads = {thread for step in drawn for thread in step.events["thread"].drop_nulls().unique().to_list()}
    names = getattr(trace, "threads", None)
    thread_names = dict(names.filter(pl.col("thread").is_in(list(threads))).select("thread", "name").iter_rows()) \
        if names is not None else {}
    return StepDrawing(stats=stats, steps=drawn, thread_names=thread_names, budgets=parts.budgets.steps,
                       warmup_steps=int(stats.warmup), median_step=view.median_step, slowest_step=view.slowest_step)
