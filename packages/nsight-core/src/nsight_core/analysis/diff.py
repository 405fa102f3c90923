"""Two captures side by side: did B get slower than A, and where; or why the two cannot be judged.

Everything is matched by name (kernels, NVTX range families, budget parts), with absolute and relative deltas. One
number decides the verdict, the gate: the step p50 when both have steps of the same family, else, when neither has
steps, GPU busy time, else (recorded CSVs) summed kernel time. Captures that do not measure the same thing (steps of
different families, different GPUs, an incomplete trace) are :class:`Reason` codes, and the verdict ``not_comparable``:
a CI gate must not pass a 3x slowdown because of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.analyze import analyze
from nsight_core.analysis.codes import family_pattern
from nsight_core.analysis.completeness import Completeness
from nsight_core.analysis.fold import row_counts
from nsight_core.analysis.intervals import busy_over
from nsight_core.analysis.result import Analysis
from nsight_core.analysis.steps import FamilySteps, NvtxGpuSteps, StepFamily, StepStats
from nsight_core.analysis.windows import start_windows
from nsight_core.stats.models import ProfileStats
from nsight_core.trace.model import Trace
from nsight_core.trace.streamed import WINDOW_ROWS, Events, events

NOISE_FRACTION = 0.01
"""Gate changes within ±1 % are 'unchanged': run-to-run jitter, not a regression."""

Group = Literal["steps", "budget", "summary"]
Unit = Literal["ns", "count", "fraction"]
Verdict = Literal["slower", "faster", "unchanged", "not_comparable"]
GateMetric = Literal["step_p50", "gpu_busy", "kernel_time_sum"]
ReasonCode = Literal["step-families-differ", "clocks-differ", "gpu-differs", "incomplete-a", "incomplete-b",
                     "nothing-to-compare"]
GateOutcome = Literal["passed", "slower", "not_comparable"]


@dataclass(frozen=True)
class Side:
    """One capture as diff needs it. ``kernels``: name, instances, total_ns; ``ranges``: the same per NVTX range family
    (nesting included); ``gpus``: :func:`gpus_used`; ``analysis``, ``gpu_busy_ns``, ``completeness``: None for CSVs."""

    source: str
    kernels: pl.DataFrame
    ranges: pl.DataFrame
    analysis: Analysis | None
    gpu_busy_ns: int | None
    gpus: tuple[str, ...] = ()
    completeness: Completeness | None = None

    @property
    def step_stats(self) -> StepStats | None:
        """The side's steps; None where it has no events to find them in."""
        return self.analysis.steps if self.analysis is not None else None

    @property
    def family(self) -> StepFamily | None:
        """The side's step family; None without steps or events."""
        return self.step_stats.family if isinstance(self.step_stats, FamilySteps) else None


class Delta(BaseModel):
    """One compared number: A's, B's, B - A and (B - A) / A."""

    group: Group
    name: str
    unit: Unit
    a: float | None
    b: float | None
    delta: float | None = Field(description="b - a; None when either side lacks it")
    change: float | None = Field(description="(b - a) / a; None when a is 0 or missing")


class NameDelta(BaseModel):
    """A kernel or NVTX range family in A and B: summed time and instances (0 where it did not run)."""

    name: str
    a_ns: int
    b_ns: int
    delta_ns: int
    change: float | None = Field(description="(b - a) / a; None when it did not run in A")
    a_instances: int
    b_instances: int


class Gate(BaseModel):
    """The number the verdict and --fail-if-slower use; positive change = B slower."""

    metric: GateMetric | None = Field(description="None when the two captures share no comparable number")
    a_ns: float | None
    b_ns: float | None
    change: float | None = Field(description="(b - a) / a")


class Reason(BaseModel):
    """Why B cannot be judged against A: a code and the values on each side behind it. ``step-families-differ``: the
    step family patterns (empty: no steps). ``clocks-differ``: the clock each side's step times are read on (gpu or
    cpu). ``gpu-differs``: the GPU names, one per device. ``incomplete-a``/``-b``: the completeness warning codes."""

    code: ReasonCode
    a: list[str] = Field(default_factory=list)
    b: list[str] = Field(default_factory=list)


class TraceDiff(BaseModel):
    """Capture B against capture A."""

    a: str
    b: str
    verdict: Verdict
    gate: Gate
    reasons: list[Reason] = Field(description="Why the captures are not comparable; empty when they are. The gate "
                                  "numbers are still given where they exist, for reference, but judge nothing")
    deltas: list[Delta] = Field(description="Step statistics, budget parts per step and summary numbers")
    kernels: list[NameDelta] = Field(description="Matched by name, largest absolute time change first")
    ranges: list[NameDelta] = Field(description="NVTX range families matched by pattern, largest change first")
    host_speed_changed: dict[Literal["a", "b"], float] = Field(
        default_factory=dict, description="The sides whose host changed speed by itself as the capture started "
        "(overhead.host_slowdown, where it reached HOST_SPEED_CHANGED either way): their host-bound step times may be "
        "the host's spell, not the code's. A note beside the verdict, which it leaves alone")

    def outcome(self, percent: float) -> GateOutcome:
        """A gate of PERCENT %: slower (B over A by more than PERCENT %), passed, or not_comparable (not a pass)."""
        if self.reasons:
            return "not_comparable"
        return "slower" if self.gate.change is not None and self.gate.change * 100 > percent else "passed"


def side_from_trace(source: str, trace: Trace, completeness: Completeness | None = None) -> Side:
    """A side with events: per-name totals, GPU busy time (:func:`busy_over`), GPUs, analysis and COMPLETENESS."""
    frames = events(trace)
    ranges = (_totals(frames.nvtx).group_by(family_pattern(pl.col("name")).alias("name"))
              .agg(pl.col("instances", "total_ns").sum()))
    bounds = frames.kernels.select("device", "start_ns", "end_ns")
    busy = busy_over(start_windows(bounds, WINDOW_ROWS), []).busy_ns if any(row_counts(bounds)) else None
    return Side(source=source, kernels=_totals(frames.kernels), ranges=ranges, analysis=analyze(trace),
                gpu_busy_ns=busy, gpus=gpus_used(frames, trace.gpus), completeness=completeness)


def _totals(frame: pl.LazyFrame) -> pl.DataFrame:
    """Per name of FRAME's events: instances and summed time (name, instances, total_ns)."""
    return (frame.group_by("name").agg(pl.len().cast(pl.Int64).alias("instances"),
                                       (pl.col("end_ns") - pl.col("start_ns")).sum().cast(pl.Int64).alias("total_ns"))
            .collect(engine="streaming"))


def gpus_used(frames: Events, gpus: pl.DataFrame) -> tuple[str, ...]:
    """The names of the GPUS (the target's: device, name) that ran FRAMES' kernels, copies or memsets, one per device,
    sorted; empty where unknown (no GPU work, or an export without TARGET_INFO_GPU): never a reason to refuse."""
    devices = pl.concat([frame.select("device") for frame in (frames.kernels, frames.memcpy, frames.memset)])
    worked = devices.unique().collect(engine="streaming")
    names = worked.join(gpus.select("device", "name"), on="device", how="left")["name"]
    return () if names.null_count() else tuple(sorted(names.to_list()))


def side_from_stats(source: str, stats: ProfileStats) -> Side:
    """A side from recorded statistics: per-name totals only."""
    kernels = stats.frame("kernels").select("name", pl.col("instances").cast(pl.Int64),
                                            pl.col("total_time_ns").cast(pl.Int64).alias("total_ns"))
    ranges = (stats.frame("nvtx_ranges").group_by(family_pattern(pl.col("name").str.strip_prefix(":")).alias("name"))
              .agg(pl.col("instances", "total_time_ns").sum().cast(pl.Int64)).rename({"total_time_ns": "total_ns"}))
    return Side(source=source, kernels=kernels, ranges=ranges, analysis=None, gpu_busy_ns=None)


def _delta(group: Group, name: str, unit: Unit, a: float | None, b: float | None) -> Delta:
    delta = b - a if a is not None and b is not None else None
    return Delta(group=group, name=name, unit=unit, a=a, b=b, delta=delta,
                 change=delta / a if delta is not None and a else None)


def _step_patterns(a: Side, b: Side) -> tuple[str | None, str | None] | None:
    """Each side's step family pattern (None: no steps); None when a side has no events to find steps in."""
    if a.step_stats is None or b.step_stats is None:
        return None
    return a.family.pattern if a.family else None, b.family.pattern if b.family else None


def _estimated_p50(side: Side) -> float | None:
    """SIDE's p50 step without the profiler where estimated (GPU's clock), else its p50: steps as the job runs them."""
    steps = side.step_stats
    if isinstance(steps, NvtxGpuSteps):
        return steps.estimated_p50_ns
    return steps.family.p50_ns if isinstance(steps, FamilySteps) else None


def _gate(a: Side, b: Side) -> Gate:
    patterns = _step_patterns(a, b)
    metric: GateMetric | None
    values: tuple[float | None, float | None]
    if a.family and b.family and a.family.pattern == b.family.pattern:
        metric, values = "step_p50", (_estimated_p50(a), _estimated_p50(b))
    elif patterns is not None and any(patterns):
        # Steps on one side only, or of two families: no other number stands in for a step time.
        metric, values = None, (None, None)
    elif a.gpu_busy_ns and b.gpu_busy_ns:
        metric, values = "gpu_busy", (a.gpu_busy_ns, b.gpu_busy_ns)
    else:
        sums = (int(a.kernels["total_ns"].sum()), int(b.kernels["total_ns"].sum()))
        metric, values = ("kernel_time_sum", sums) if all(sums) else (None, (None, None))
    first, second = values
    change = (second - first) / first if first and second is not None else None
    return Gate(metric=metric, a_ns=first, b_ns=second, change=change)


def _incomplete(side: Side) -> list[str]:
    """The completeness warning codes of a side found incomplete; empty when complete or not checked."""
    found = side.completeness
    return [str(w.code) for w in found.warnings] if found is not None and not found.complete else []


def _reasons(a: Side, b: Side, gate: Gate) -> list[Reason]:
    """Every reason B's gate number cannot be judged against A's, in the order a reader checks them."""
    reasons: list[Reason] = []
    patterns = _step_patterns(a, b)
    if patterns is not None and patterns[0] != patterns[1]:
        first, second = patterns
        reasons.append(Reason(code="step-families-differ", a=[first] if first else [], b=[second] if second else []))
    if a.gpus and b.gpus and a.gpus != b.gpus:
        reasons.append(Reason(code="gpu-differs", a=list(a.gpus), b=list(b.gpus)))
    if missing := _incomplete(a):
        reasons.append(Reason(code="incomplete-a", a=missing))
    if missing := _incomplete(b):
        reasons.append(Reason(code="incomplete-b", b=missing))
    clocks = [steps.clock for steps in (a.step_stats, b.step_stats) if isinstance(steps, FamilySteps)]
    if len(clocks) == 2 and clocks[0] != clocks[1] and not any(r.code.startswith("incomplete") for r in reasons):
        # An incomplete side explains its lost clock already: the reason is its cause, not this.
        reasons.append(Reason(code="clocks-differ", a=[clocks[0]], b=[clocks[1]]))
    if not reasons and gate.change is None:
        reasons.append(Reason(code="nothing-to-compare"))
    return reasons


def _verdict(gate: Gate, reasons: list[Reason]) -> Verdict:
    if reasons or gate.change is None:  # no change without a reason: nothing-to-compare
        return "not_comparable"
    return "unchanged" if abs(gate.change) <= NOISE_FRACTION else "slower" if gate.change > 0 else "faster"


def _analysis_deltas(a: Side, b: Side) -> list[Delta]:
    """The step statistics of both sides, and where both were analysed whole, the budget per step and the window."""
    deltas: list[Delta] = []
    fa, fb = a.family, b.family
    if fa or fb:
        deltas += [_delta("steps", f"step_{stat}".removesuffix("_ns"), "count" if stat == "count" else "ns",
                          float(getattr(fa, stat)) if fa else None, float(getattr(fb, stat)) if fb else None)
                   for stat in ("count", "p50_ns", "p95_ns", "max_ns")]
        deltas.append(_delta("steps", "step_p50_without_profiler", "ns", _estimated_p50(a), _estimated_p50(b)))
    if a.analysis and b.analysis:
        deltas += [_delta("budget", f"{part_a.part}_per_step", "ns", part_a.per_step_mean_ns, part_b.per_step_mean_ns)
                   for part_a, part_b in zip(a.analysis.budget.parts, b.analysis.budget.parts, strict=True)]
        deltas.append(_delta("summary", "user_window", "ns", a.analysis.window.span_ns, b.analysis.window.span_ns))
    return deltas


def _by_name(a: pl.DataFrame, b: pl.DataFrame) -> list[NameDelta]:
    """Per-name total time and instances, matched by name, largest absolute time change first."""
    joined = (a.join(b, on="name", how="full", coalesce=True, suffix="_b").fill_null(0)
              .rename({"total_ns": "a_ns", "total_ns_b": "b_ns", "instances": "a_instances",
                       "instances_b": "b_instances"})
              .with_columns((pl.col("b_ns") - pl.col("a_ns")).alias("delta_ns"))
              .with_columns(pl.when(pl.col("a_ns") > 0).then(pl.col("delta_ns") / pl.col("a_ns")).alias("change"))
              .sort([pl.col("delta_ns").abs(), pl.col("name")], descending=[True, False]))
    return [NameDelta(**row) for row in joined.to_dicts()]


def diff_sides(a: Side, b: Side) -> TraceDiff:
    """B against A: the gate, the verdict and every matched delta."""
    gate = _gate(a, b)
    reasons = _reasons(a, b, gate)
    summary = [_delta("summary", "gpu_busy", "ns", a.gpu_busy_ns, b.gpu_busy_ns)] \
        if a.gpu_busy_ns is not None or b.gpu_busy_ns is not None else []
    summary.append(_delta("summary", "kernel_time_sum", "ns", int(a.kernels["total_ns"].sum()),
                          int(b.kernels["total_ns"].sum())))
    summary.append(_delta("summary", "kernel_launches", "count", int(a.kernels["instances"].sum()),
                          int(b.kernels["instances"].sum())))
    sides: tuple[tuple[Literal["a", "b"], Side], ...] = (("a", a), ("b", b))
    changed = {name: slowdown for name, side in sides if side.analysis is not None
               and side.analysis.overhead is not None and (slowdown := side.analysis.overhead.host_speed_change())}
    return TraceDiff(a=a.source, b=b.source, verdict=_verdict(gate, reasons), gate=gate, reasons=reasons,
                     deltas=[*_analysis_deltas(a, b), *summary], kernels=_by_name(a.kernels, b.kernels),
                     ranges=_by_name(a.ranges, b.ranges), host_speed_changed=changed)
