"""A finding as data: its kind, severity, evidence and saving, and how a saving's share of the step sets its
severity. The finding functions (analysis/findings.py, analysis/causes.py) build these; render/ words them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from nsight_core.analysis.budget import StepBudget
from nsight_core.analysis.steps import StepStats
from nsight_core.units import Unit

FindingKind = Literal["host_work", "untraced_host", "allocator_churn", "per_tensor_launches", "small_copies",
                      "bulk_device_to_host", "stream_wait", "sync_wait", "launch_bound", "pageable_copy",
                      "exposed_copy", "exposed_comm", "device_bound", "fp32_matmul", "warmup", "too_few_steps",
                      "no_steps"]
Severity = Literal["info", "warning", "critical"]

WARNING_SHARE = 0.05
"""A saving of at least this share of the step (or capture) is worth a warning."""
CRITICAL_SHARE = 0.5
"""A saving of at least this share is critical: the fix would halve the step or more."""
CEILING: dict[str, Severity] = {"untraced_host": "warning", "launch_bound": "warning", "fp32_matmul": "warning"}
"""Kinds never critical, whatever their share. Untraced host time names no cause: its evidence is shown, not a fix.
A CUDA graph (launch_bound) and a lower precision (fp32_matmul) come with conditions the capture cannot check (static
shapes and no syncs in the step; the model's accuracy), so their savings are upper bounds, not alarms."""
REPORT_SHARE = 0.01
"""Savings below this share are not reported at all (noise, not a fix)."""


class Where(BaseModel):
    """What a piece of evidence refers to."""

    kind: Literal["step", "range", "kernel", "copy", "api", "osrt", "line", "capture"]
    name: str = Field(description="Range family, kernel or call name, copy direction, 'file:line in function' of the "
                      "user's Python code; '' for the capture")
    step: int | None = Field(default=None, description="Step index, where it is one step")
    start_ns: int | None = Field(default=None, description="Start on the capture's clock, where it is one event")


class Evidence(BaseModel):
    """One measured number behind a finding."""

    metric: str = Field(description="What was measured, snake_case (e.g. achieved_bandwidth)")
    value: float
    unit: Unit
    where: Where | None = None


class Saving(BaseModel):
    """What the fix would save: per step and as a share of the step, or over the capture."""

    per_step_ns: float | None = Field(description="None when the time is not spent in steps")
    step_fraction: float | None = Field(description="per_step_ns / the median step (0..1)")
    total_ns: float = Field(description="Over the whole capture")
    capture_fraction: float = Field(description="total_ns / the user's window (0..1)")


class Finding(BaseModel):
    """One thing to fix: its kind (the cause), severity, evidence and the estimated saving. Numbers and codes only:
    :mod:`nsight_core.render.findings` gives each kind its title and suggestion."""

    kind: FindingKind
    severity: Severity
    subject: str = Field(default="", description="What the kind is about, where one kind has several: the copy "
                         "direction of a pageable_copy; 'scalar_reads' for a sync_wait of .item()-style reads, "
                         "'mask_indexing' for one of a selection's size, 'pageable_transfer' for one of a copy of "
                         "pageable memory; 'unexplained' for a launch_bound whose gaps the host spends in calls other "
                         "than launches; 'other_threads' for an untraced_host whose time other threads of the steps' "
                         "process spent issuing CUDA calls (autograd's backward pass); 'host_bound' for an "
                         "fp32_matmul that tensor cores would win nothing, the host bounding the step")
    evidence: list[Evidence]
    saving: Saving | None = Field(description="None for findings that are about the measurement itself")


class Context(BaseModel):
    """What the findings are computed from (built by :func:`nsight_core.analysis.analyze.analyze`)."""

    steps: StepStats
    budget: StepBudget | None = Field(description="Over the steady steps; None when there are no steps")
    window_ns: int = Field(description="Span of the user's window")
    step_p50_ns: float | None


def severity_of(share: float) -> Severity:
    return "critical" if share >= CRITICAL_SHARE else "warning" if share >= WARNING_SHARE else "info"


def saving_of(context: Context, per_step_ns: float | None, total_ns: float) -> Saving:
    """A saving of PER_STEP_NS a step (TOTAL_NS over the capture), never more than the step without the profiler."""
    p50 = context.step_p50_ns
    if per_step_ns is not None and p50:
        per_step_ns = min(per_step_ns, p50)
    return Saving(per_step_ns=per_step_ns, step_fraction=per_step_ns / p50 if per_step_ns is not None and p50 else None,
                  total_ns=total_ns, capture_fraction=total_ns / context.window_ns if context.window_ns else 0.0)


def per_step_of(context: Context, value: float) -> float | None:
    """VALUE as a per-step saving, or None when the budget covers the whole capture (no steps)."""
    return value if context.step_p50_ns else None


def share_of(saving: Saving) -> float:
    return saving.step_fraction if saving.step_fraction is not None else saving.capture_fraction


def reported(kind: FindingKind, saving: Saving, evidence: list[Evidence], subject: str = "",
             seen: bool = False) -> Finding | None:
    """A finding of KIND saving SAVING, when that is worth reporting (REPORT_SHARE) or the cause is SEEN anyway."""
    if share_of(saving) < REPORT_SHARE and not seen:
        return None
    return Finding(kind=kind, severity=severity_of(share_of(saving)), subject=subject, evidence=evidence, saving=saving)


def ordered(findings: list[Finding | None]) -> list[Finding]:
    """Findings that apply, each at most its kind's CEILING: most severe and largest saving first, measurements last."""
    rank = {"critical": 0, "warning": 1, "info": 2}
    found = [finding.model_copy(update={"severity": CEILING[finding.kind]})
             if finding.kind in CEILING and rank[finding.severity] < rank[CEILING[finding.kind]] else finding
             for finding in findings if finding is not None]
    return sorted(found, key=lambda f: (f.saving is None, rank[f.severity], -(f.saving.total_ns if f.saving else 0)))
