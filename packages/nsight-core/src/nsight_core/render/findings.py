"""Findings, steps and the step budget as words and numbers (terminal text; the page reuses the phrases).

Analysis returns data (ns, bytes, fractions, references); this module is where they become
"≈ 38.2 ms per step, 61 % of the step".
"""

from __future__ import annotations

from nsight_core.analysis.analyze import Analysis
from nsight_core.analysis.budget import StepBudget
from nsight_core.analysis.completeness import Completeness
from nsight_core.analysis.findings import Evidence, Finding, Saving, Where
from nsight_core.analysis.steps import StepStats
from nsight_core.render.text import _ns

PART_LABELS = {
    "compute": "GPU compute",
    "exposed_comm": "exposed communication (NCCL)",
    "exposed_copy": "exposed copies",
    "sync_wait": "sync waits",
    "launch_gap": "launch gaps",
    "gpu_idle": "GPU idle",
    "stream_wait": "waits on other streams",
}
CPU_LABELS = {"cuda_api": "in CUDA call", "osrt": "in OS call", "nvtx": "in range", "untraced": "untraced CPU time",
              "dispatch": "dispatching (CUDA calls, framework)"}


def quantity(value: float, unit: str) -> str:
    """VALUE in UNIT (ns, bytes, bytes_per_s, count, fraction) as a person reads it."""
    if unit == "ns":
        return _ns(value)
    if unit == "bytes":
        return _scaled(value, "B", 1024, ("KiB", "MiB", "GiB"))
    if unit == "bytes_per_s":
        return _scaled(value, "B/s", 1000, ("kB/s", "MB/s", "GB/s"))
    if unit == "fraction":
        return f"{value:.1%}"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _scaled(value: float, base: str, step: int, units: tuple[str, ...]) -> str:
    scaled, unit = float(value), base
    for name in units:
        if abs(scaled) < step:
            break
        scaled, unit = scaled / step, name
    return f"{scaled:,.2f} {unit}" if unit != base else f"{scaled:,.0f} {unit}"


def saving_text(saving: Saving) -> str:
    """'≈ 38.2 ms per step, 61.0 % of the step' or '≈ 40.0 ms, 42.3 % of the capture'."""
    if saving.per_step_ns is not None and saving.step_fraction is not None:
        return f"≈ {_ns(saving.per_step_ns)} per step, {saving.step_fraction:.1%} of the step"
    return f"≈ {_ns(saving.total_ns)}, {saving.capture_fraction:.1%} of the capture"


def where_text(where: Where) -> str:
    """Where a number was measured: 'step 3', 'Device-to-Host copy at 547.331 ms', 'range data'."""
    parts = []
    if where.kind == "step" and where.step is not None:
        parts.append(f"step {where.step}" + (f" ({where.name})" if where.name else ""))
    elif where.name:
        parts.append(f"{where.kind} {where.name}")
    if where.kind != "step" and where.step is not None:
        parts.append(f"in step {where.step}")
    if where.start_ns is not None:
        parts.append(f"at {_ns(where.start_ns)}")
    return " ".join(parts)


def evidence_text(evidence: Evidence) -> str:
    """'achieved bandwidth: 1.57 GB/s (copy Device-to-Host at 547.331 ms)'."""
    place = where_text(evidence.where) if evidence.where else ""
    return f"{evidence.metric.replace('_', ' ')}: {quantity(evidence.value, evidence.unit)}" + \
        (f" ({place})" if place else "")


def finding_lines(finding: Finding) -> list[str]:
    """A finding as a few lines: severity and title, the saving, the suggestion, the evidence."""
    lines = [f"[{finding.severity}] {finding.title}"]
    if finding.saving is not None:
        lines.append(f"  saving: {saving_text(finding.saving)}")
    lines.append(f"  fix: {finding.suggestion}")
    lines += [f"  - {evidence_text(e)}" for e in finding.evidence]
    return lines


def steps_text(steps: StepStats) -> str:
    """One line about the steps: family, count, p50/p95/max, warm-up and trend; or why there are none."""
    family = steps.family
    if family is None:
        return f"steps: none found ({steps.reason})"
    warmup = f", first step {_ns(family.first_ns)} (warm-up)" if steps.warmup else ""
    return (f"steps: {family.count} x {family.pattern} ({steps.source}): p50 {_ns(family.p50_ns)}, "
            f"p95 {_ns(family.p95_ns)}, max {_ns(family.max_ns)}{warmup}, trend {steps.trend}")


def budget_lines(budget: StepBudget) -> list[str]:
    """The budget parts per step with their shares, then what the CPU did while the GPU idled."""
    lines = [f"budget over {budget.steps} step{'s' if budget.steps != 1 else ''} ({_ns(budget.wall_ns)}):"]
    lines += [f"  {PART_LABELS[p.part]:<30} {_ns(p.per_step_mean_ns):>12} per step  {p.fraction:6.1%}"
              for p in budget.parts if p.total_ns]
    if budget.idle_activities:
        lines.append("  while the GPU idled, the CPU was:")
        lines += [f"    {CPU_LABELS[a.kind]} {a.name}".rstrip() + f": {_ns(a.per_step_mean_ns)} per step "
                  f"({PART_LABELS[a.part]})" for a in budget.idle_activities]
    return lines


def render_analysis(analysis: Analysis) -> str:
    """Steps, budget and findings of one capture as text ("What to fix" first)."""
    lines = ["== What to fix"]
    if analysis.savings_withheld:
        lines.append("(no savings: the trace is incomplete (" + ", ".join(analysis.savings_withheld).replace("_", " ")
                     + "), so time it lost would look like time to win; fix the recording first)")
    for finding in analysis.findings:
        lines += finding_lines(finding)
    if not analysis.findings:
        lines.append("nothing found")
    lines += ["", steps_text(analysis.steps), *budget_lines(analysis.budget)]
    return "\n".join(lines) + "\n"


def render_completeness(completeness: Completeness) -> str:
    """Nothing for a complete trace; otherwise a warning block to read before any number."""
    if completeness.complete:
        return ""
    lines = ["== WARNING: this trace is incomplete or suspect; the numbers below may miss part of what ran"]
    for warning in completeness.warnings:
        lines += [f"- {warning.message}", f"  cause: {warning.cause}", f"  fix: {warning.fix}"]
    lines += [f"- nsys said ({said.severity.lower()}{', lost data' if said.lost_data else ''}): {said.text}"
              for said in completeness.diagnostics]
    return "\n".join(lines) + "\n\n"
