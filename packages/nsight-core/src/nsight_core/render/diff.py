"""`nsight diff` in words: text for a terminal (the verdict first, on one line), Markdown for a pull request. Both say
why two captures are not comparable (:class:`~nsight_core.analysis.diff.Reason` codes) before any number, then give the
gate numbers for reference only, not to be taken for a verdict."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from nsight_core.analysis.diff import Delta, GateOutcome, Reason, TraceDiff
from nsight_core.render.findings import host_spell
from nsight_core.render.text import _short, _table, printable
from nsight_core.units import duration, quantity

TOP_NAMES = 10
_GATE_LABELS = {"step_p50": "step p50 (without the profiler where estimated)", "gpu_busy": "GPU busy time",
                "kernel_time_sum": "summed kernel time"}


def _family(patterns: list[str]) -> str:
    return printable(patterns[0]) if patterns else "no steps"


def _gpus(names: list[str]) -> str:
    return ", ".join(printable(name) if n == 1 else f"{n} x {printable(name)}" for name, n in Counter(names).items())


def reason_text(reason: Reason) -> str:
    """One reason, as a clause that says what differs and what to do."""
    match reason.code:
        case "step-families-differ":
            return (f"the step families differ (A: {_family(reason.a)}, B: {_family(reason.b)}): name the steps "
                    "alike in both to compare step times")
        case "clocks-differ":
            return (f"A's steps are timed on the {reason.a[0].upper()}'s clock, B's on the {reason.b[0].upper()}'s "
                    "(one of them launched no GPU work inside its step ranges, or lost its CUDA events): a step time "
                    "of one is not the other's")
        case "gpu-differs":
            return f"they ran on different GPUs (A: {_gpus(reason.a)}, B: {_gpus(reason.b)})"
        case "incomplete-a" | "incomplete-b":
            side, codes = ("A", reason.a) if reason.code == "incomplete-a" else ("B", reason.b)
            signs = ", ".join(code.replace("_", " ") for code in codes)
            return f"{side}'s trace is incomplete ({signs}): `nsight stats` on {side} says what it misses"
        case "nothing-to-compare":
            return "the captures share no step, GPU busy or kernel time to compare"


def _gate_numbers(result: TraceDiff, change: bool = True) -> str | None:
    gate = result.gate
    if gate.metric is None:
        return None
    shown = f" ({gate.change:+.1%})" if change and gate.change is not None else ""
    return f"{_GATE_LABELS[gate.metric]} {duration(gate.a_ns)} -> {duration(gate.b_ns)}{shown}"


def verdict_line(result: TraceDiff) -> str:
    """One line: is B slower or faster than A, by how much, on which number; or why it cannot say."""
    gate = result.gate
    if result.reasons:
        reference = f" [for reference only: {numbers}]" if (numbers := _gate_numbers(result)) else ""
        return "not comparable: " + "; ".join(reason_text(r) for r in result.reasons) + reference
    assert gate.change is not None  # comparable: the analysis gave a gate number
    plain = _gate_numbers(result, change=False)
    if result.verdict == "unchanged":
        return f"unchanged: {plain} ({gate.change:+.1%}, within noise)"
    return f"B is {abs(gate.change):.1%} {result.verdict} than A: {plain}"


def host_notes(result: TraceDiff) -> list[str]:
    """A sentence per side whose host changed speed by itself as its capture started: the verdict may be the host's."""
    return [f"{side.upper()}'s host changed speed by itself as its capture started ({host_spell(slowdown)}): its "
            "host-bound step times may not be its usual ones"
            for side, slowdown in sorted(result.host_speed_changed.items())]


def gate_line(result: TraceDiff, percent: float) -> str:
    """Why a gate of PERCENT % failed (the CLI's message on stderr), or that it passed."""
    outcome = result.outcome(percent)
    if outcome == "passed":
        return f"gate passed (allowed: {percent:g} % slower)"
    if outcome == "slower":
        return f"{verdict_line(result)} (allowed: {percent:g} %)"
    return f"the gate cannot judge B against A: {verdict_line(result)}"


def _change(change: float | None) -> str:
    return "-" if change is None else f"{change:+.1%}"


def _delta_cells(delta: Delta) -> list[str]:
    signed = ("-" if delta.delta is None else duration(delta.delta, signed=True) if delta.unit == "ns"
              else f"{delta.delta:+,.0f}")
    return [quantity(delta.a, delta.unit), quantity(delta.b, delta.unit), signed, _change(delta.change)]


def _named(result: TraceDiff, name: Callable[[str], str]) -> list[tuple[str, list[list[str]]]]:
    """The kernels and NVTX range families that changed most: their table's title and rows (NAME: a name's cell)."""
    return [(f"{title}: top {min(TOP_NAMES, len(rows))} of {len(rows)} by change",
             [[duration(r.a_ns), duration(r.b_ns), duration(r.delta_ns, signed=True), _change(r.change),
               f"{r.a_instances:,} -> {r.b_instances:,}", name(r.name)] for r in rows[:TOP_NAMES]])
            for title, rows in (("Kernels", result.kernels), ("NVTX ranges (summed time)", result.ranges)) if rows]


def render_diff(result: TraceDiff) -> str:
    """The verdict, the step/budget/summary deltas, and the kernels and NVTX ranges that changed most."""
    lines = [verdict_line(result), *(f"note: {note}" for note in host_notes(result)),
             f"A: {printable(result.a)}", f"B: {printable(result.b)}", ""]
    lines += _table(["Group", "Metric", "A", "B", "B - A", "Change"],
                    [[d.group, d.name, *_delta_cells(d)] for d in result.deltas])
    for title, rows in _named(result, _short):
        lines += ["", f"== {title}", *_table(["A", "B", "B - A", "Change", "Count", "Name"], rows)]
    return "\n".join(lines) + "\n"


_OUTCOME_WORDS: dict[GateOutcome, str] = {"passed": "passed", "slower": "failed: B is slower than allowed",
                                          "not_comparable": "failed: the captures are not comparable"}


def _cell(text: str) -> str:
    """TEXT as a Markdown table cell: code-formatted, its pipes escaped (GitHub splits cells on them)."""
    return "`" + printable(text).replace("`", "'").replace("|", "\\|") + "`"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A GitHub table: the last column (names) left-aligned, numbers right-aligned."""
    align = ["---:"] * (len(header) - 1) + [":---"]
    return ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |",
            *("| " + " | ".join(row) + " |" for row in rows)]


def render_markdown(result: TraceDiff, percent: float | None = None) -> str:
    """The comparison as a pull-request comment: verdict, PERCENT % gate, why not comparable, the tables (folded)."""
    title = "not comparable" if result.reasons else verdict_line(result)
    lines = [f"### nsight diff: {title}", "", f"**A** {_cell(result.a)} vs **B** {_cell(result.b)}", ""]
    lines += [*(f"**Note:** {note}" for note in host_notes(result)), ""] if result.host_speed_changed else []
    if percent is not None:
        lines += [f"**Gate** (fail when B is more than {percent:g} % slower): "
                  f"**{_OUTCOME_WORDS[result.outcome(percent)]}**", ""]
    if result.reasons:
        lines += ["Not comparable:", *(f"- {reason_text(r)}" for r in result.reasons), ""]
        if numbers := _gate_numbers(result):
            lines += [f"For reference only: {numbers}", ""]
    lines += _md_table(["A", "B", "B - A", "Change", "Metric"],
                       [[*_delta_cells(d), f"{d.group}: {d.name}"] for d in result.deltas])
    for title, rows in _named(result, lambda name: _cell(_short(name))):
        lines += ["", f"<details><summary>{title}</summary>", "",
                  *_md_table(["A", "B", "B - A", "Change", "Count", "Name"], rows), "", "</details>"]
    return "\n".join(lines) + "\n"
