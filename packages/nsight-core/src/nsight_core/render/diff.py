"""`nsight diff` as text: the verdict first (one line), then the matched numbers."""

from __future__ import annotations

from nsight_core.analysis.diff import Delta, NameDelta, TraceDiff
from nsight_core.render.text import _short, _table
from nsight_core.render.units import duration, quantity

TOP_NAMES = 10
_GATE_LABELS = {"step_p50": "step p50", "gpu_busy": "GPU busy time", "kernel_time_sum": "summed kernel time"}


def verdict_line(result: TraceDiff) -> str:
    """One line: is B slower or faster than A, by how much, on which number."""
    gate = result.gate
    if gate.metric is None or gate.change is None:
        return "not comparable: the captures share no step, GPU busy or kernel time to compare"
    label = _GATE_LABELS[gate.metric]
    change = f"{abs(gate.change):.1%}"
    numbers = f"{label} {duration(gate.a_ns)} -> {duration(gate.b_ns)}"
    if result.verdict == "unchanged":
        return f"unchanged: {numbers} ({gate.change:+.1%}, within noise)"
    return f"B is {change} {result.verdict} than A: {numbers}"


def _change(change: float | None) -> str:
    return "-" if change is None else f"{change:+.1%}"


def _signed(delta: Delta) -> str:
    if delta.delta is None:
        return "-"
    if delta.unit == "ns":
        return duration(delta.delta, signed=True)
    return f"{delta.delta:+,.0f}"


def _names(rows: list[NameDelta]) -> list[list[str]]:
    return [[duration(r.a_ns), duration(r.b_ns), duration(r.delta_ns, signed=True), _change(r.change),
             f"{r.a_instances:,} -> {r.b_instances:,}", _short(r.name)] for r in rows[:TOP_NAMES]]


def render_diff(result: TraceDiff) -> str:
    """The verdict, the step/budget/summary deltas, and the kernels and NVTX ranges that changed most."""
    lines = [verdict_line(result), f"A: {result.a}", f"B: {result.b}", ""]
    rows = [[d.group, d.name, quantity(d.a, d.unit), quantity(d.b, d.unit),
             _signed(d), _change(d.change)]
            for d in result.deltas]
    lines += _table(["Group", "Metric", "A", "B", "B - A", "Change"], rows)
    header = ["A", "B", "B - A", "Change", "Count", "Name"]
    for title, named in (("Kernels", result.kernels), ("NVTX ranges (summed time)", result.ranges)):
        if named:
            lines += ["", f"== {title}: top {min(TOP_NAMES, len(named))} of {len(named)} by change"]
            lines += _table(header, _names(named))
    return "\n".join(lines) + "\n"
