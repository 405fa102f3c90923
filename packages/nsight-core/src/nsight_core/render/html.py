"""The GPU Profile report as HTML: a fragment for a Flyte report tab, or a standalone page.

- Offline (clusters are often air-gapped): vega, vega-lite and vega-embed are vendored (render/vendor/), embedded.
- Names are hostile (`<`/`>` in kernel names, any text in NVTX's): the markup is autoescaping Jinja2
  (render/templates/), and chart specs are JSON with `<`, `>` and `&` escaped, so no name closes a script element.
- Several reports on one page: element ids carry a random prefix per render, the styles (render/report.css) are scoped
  to `.nsight-report`, and the bundle installs itself only where `window.vegaEmbed` is missing.
- Size: tables are cut at MAX_TABLE_ROWS with a note; charts hold only what they draw."""

from __future__ import annotations

import functools
import itertools
import json
import uuid
from collections.abc import Callable, Sequence
from importlib import resources
from types import ModuleType
from typing import TYPE_CHECKING, Any

import polars as pl
from markupsafe import Markup

from nsight_core.analysis.capture_profile import CaptureProfile
from nsight_core.analysis.result import Analysis
from nsight_core.render.findings import (
    PART_LABELS,
    budget_lines,
    coverage_text,
    evidence_text,
    finding_suggestion,
    finding_title,
    overhead_text,
    saving_text,
    steps_text,
)
from nsight_core.render.step_view import KIND_COLORS, KIND_LABELS, PART_COLORS, step_panels, step_view_data, where_json
from nsight_core.stats.reports import table_of
from nsight_core.units import duration, nsys_megabytes

if TYPE_CHECKING:
    import jinja2

MAX_TABLE_ROWS = 200


@functools.cache
def _asset(name: str) -> str:
    """render/NAME (report.css, report.js, step_view.js): package data read once per process, no network needed."""
    return (resources.files("nsight_core.render") / name).read_text(encoding="utf-8")


@functools.cache
def vega_bundle() -> str:
    """vega + vega-lite + vega-embed (render/vendor/, scripts/vendor-vega.sh) as one script, read once per process. The
    wrapper's `define`, `module` and `exports` hide a host page's module loader, so each UMD build sets its global."""
    builds = "\n".join((resources.files("nsight_core.render") / "vendor" / f"{name}.min.js").read_text(encoding="utf-8")
                       for name in ("vega", "vega-lite", "vega-embed"))
    return f"(function (define, module, exports) {{\n{builds}\n}}).call(window);"


def script_json(value: Any) -> str:
    """JSON that is safe inside a <script> element: no `<`, `>` or `&` can end or open a tag."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render_fragment(profiles: Sequence[CaptureProfile], notes: Sequence[str] = ()) -> str:
    """The report as an HTML fragment safe inside any page, and repeated on one: a section per capture, then NOTES."""
    fragment = GrowingFragment()
    for profile in profiles:
        fragment.add(profile)
    return fragment.render(notes)


class GrowingFragment:
    """A report fragment that grows a capture at a time, rendered anew after each (the Flyte tab of a task whose regions
    run in a loop): each section is rendered once, when added, so a render costs no square of the regions."""

    def __init__(self) -> None:
        self._sections: list[Markup] = []

    def __len__(self) -> int:
        return len(self._sections)

    def add(self, profile: CaptureProfile) -> None:
        """Render PROFILE's section, after those added before (its element ids have a prefix of their own)."""
        self._sections.append(Markup(_templates().get_template("section.html.j2").render(s=_section(profile, _ids()))))

    def render(self, notes: Sequence[str] = ()) -> str:
        """The fragment (see :func:`render_fragment`) of the captures added so far, then NOTES."""
        root = _ids()("report")
        return _templates().get_template("report.html.j2").render(
            root=root, style=Markup(_asset("report.css")), sections=self._sections, report_notes=list(notes),
            bundle=Markup(vega_bundle()), step_view=Markup(_asset("step_view.js")),
            script=Markup(_asset("report.js").replace("ROOT_ID", script_json(root))))


def render_page(profiles: Sequence[CaptureProfile], title: str = "GPU Profile", notes: Sequence[str] = ()) -> str:
    """The report as a standalone HTML document (what `nsight report` writes)."""
    fragment = Markup(render_fragment(profiles, notes))
    return _templates().get_template("page.html.j2").render(title=title, fragment=fragment) + "\n"


def prepare() -> None:
    """Compile the templates, read the scripts and make a first chart now, while a caller waits for nsys' export."""
    for name in ("report.html.j2", "section.html.j2", "page.html.j2"):
        _templates().get_template(name)
    vega_bundle()
    _asset("step_view.js")
    _charts().warm_up()


def _charts() -> ModuleType:
    """render/charts.py, imported where a page is rendered: Altair is slow to import, and `nsight stats` draws none."""
    from nsight_core.render import charts as module

    return module


@functools.cache
def _templates() -> jinja2.Environment:
    """Templates (render/templates/), autoescaped as trace names are text; Jinja2 loads only where a page renders."""
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader("nsight_core.render", "templates"),
                              autoescape=True, keep_trailing_newline=False, undefined=jinja2.StrictUndefined)


def _ids() -> Callable[[str], str]:
    """Element ids unique on any page, each named by its kind: a random prefix per render, a counter within it."""
    prefix, count = "nsr-" + uuid.uuid4().hex[:10], itertools.count(1)
    return lambda kind: f"{prefix}-{kind}-{next(count)}"


def _section(profile: CaptureProfile, ids: Callable[[str], str]) -> dict[str, Any]:
    """What the template shows of one capture: plain values and words, formatted here, escaped there."""
    stats = profile.stats
    return {
        "id": ids("section"), "title": profile.title, "source": profile.source,
        "timeline": profile.trace is not None,  # events to export (recorded CSVs have totals only)
        "incomplete": profile.completeness.warnings if profile.completeness and not profile.completeness.complete
        else [],
        "diagnosis": _diagnosis(profile.analysis) if profile.analysis is not None else None,
        "steps": _steps(profile, ids),
        "tiles": profile.tiles,
        "charts": [{"title": chart.title, "missing": chart.missing, "id": ids("chart"),
                    "spec": Markup(script_json(chart.spec)) if chart.spec is not None else None}
                   for chart in _charts().capture_charts(profile)],
        "notes": profile.notes,
        "tables": [_table(report, stats.frame(report)) for report in stats.reports
                   if report not in stats.skipped and (report in stats.other or table_of(report) is not None)],
        "skipped": list(stats.skipped.items()),
    }


def _diagnosis(analysis: Analysis) -> dict[str, Any]:
    """What to fix: each finding's words, then the steps line and the budget lines."""
    budget = budget_lines(analysis.budget)
    return {
        "findings": [{"severity": f.severity, "title": finding_title(f), "suggestion": finding_suggestion(f),
                      "saving": saving_text(f.saving) if f.saving else None,
                      "evidence": [{"text": evidence_text(e), "where": where_json(e.where)} for e in f.evidence]}
                     for f in analysis.findings],
        "steps": "; ".join(line for line in (steps_text(analysis.steps), overhead_text(analysis),
                                             coverage_text(analysis.coverage)) if line),
        "budget_title": budget[0], "budget": [line.strip() for line in budget[1:]],
    }


def _steps(profile: CaptureProfile, ids: Callable[[str], str]) -> dict[str, Any] | None:
    """The step view of PROFILE (its drawn steps, render/step_view.py), None without steps."""
    if (drawing := profile.steps_drawn) is None or not drawing.steps:
        return None
    parts = {part for step in drawing.steps for part in step.idle["part"].unique().to_list()}
    return {"id": ids("steps"), "data": Markup(script_json(step_view_data(drawing))),
            "panels": step_panels(drawing),
            "legend": [(label, KIND_COLORS[kind]) for kind, label in KIND_LABELS.items()
                       if kind in {k for step in drawing.steps for k in step.events["kind"].unique().to_list()}]
            + [(f"idle: {PART_LABELS[part]}" if part != "gpu_idle" else PART_LABELS[part], PART_COLORS[part])
               for part in PART_COLORS if part in parts]}


def _table(report: str, frame: pl.DataFrame) -> dict[str, Any]:
    """A report's first MAX_TABLE_ROWS rows as cells: text, and for numbers the value to sort by. Durations (``*_ns``)
    and sizes (nsys' ``*_mb``) read in units (units.py), their headers without the suffix."""
    shown = frame.head(MAX_TABLE_ROWS)
    numeric = {name for name, dtype in shown.schema.items() if dtype.is_numeric()}
    formats = {name: _UNIT_COLUMNS[suffix] for name in numeric
               for _, _, suffix in [name.rpartition("_")] if suffix in _UNIT_COLUMNS}
    rows = [[_cell(value, name in numeric, formats.get(name)) for name, value in row.items()]
            for row in shown.iter_rows(named=True)]
    header = [name.rpartition("_")[0] if name in formats else name for name in shown.columns]
    return {"report": report, "header": header, "rows": rows, "total": frame.height}


_UNIT_COLUMNS: dict[str, Callable[[float], str]] = {"ns": duration, "mb": nsys_megabytes}
"""Column suffix -> how its numbers read."""


def _cell(value: object, numeric: bool, unit: Callable[[float], str] | None = None) -> dict[str, Any] | None:
    if value is None:
        return None
    if numeric and isinstance(value, int | float):
        text = (unit(value) if unit is not None else f"{value:,}" if isinstance(value, int)
                else f"{value:,.3f}".rstrip("0").rstrip("."))
        return {"numeric": True, "text": text, "sort": repr(value)}
    return {"numeric": False, "text": str(value)}
