"""The GPU Profile report as HTML: a fragment for a Flyte report tab, or a standalone page.

Design constraints, each one a user-visible failure when broken:
- Offline: clusters are often air-gapped, so vega, vega-lite and vega-embed come from the files
  vendored in this package (render/vendor/) and are embedded once per fragment, never fetched.
- Names are hostile: kernel names carry `<`/`>` from templates and NVTX names are arbitrary user
  text, so the markup lives in autoescaping Jinja2 templates (render/templates/), and chart specs are
  embedded as JSON with `<`, `>` and `&` escaped so no name can close a script element.
- Several captures (or several fragments) on one page: every element id carries a per-render random
  prefix, the styles are scoped to `.nsight-report`, and the JavaScript bundle installs itself only
  when `window.vegaEmbed` is not there yet.
- Size: tables longer than MAX_TABLE_ROWS are cut with a note, and charts hold only what they draw.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from typing import Any

import jinja2
import polars as pl
from markupsafe import Markup

from nsight_core.analysis.capture_profile import CaptureProfile
from nsight_core.analysis.findings import Where
from nsight_core.analysis.result import Analysis
from nsight_core.render.charts import ChartSpec, capture_charts, warm_up
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
from nsight_core.render.step_view import (
    KIND_COLORS,
    KIND_LABELS,
    PART_COLORS,
    step_panels,
    step_view_data,
    step_view_script,
    where_json,
)
from nsight_core.stats.reports import table_of
from nsight_core.units import duration, nsys_megabytes

MAX_TABLE_ROWS = 200

_STYLE = """
.nsight-report{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2933;max-width:1100px}
.nsight-report h2{font-size:1.35rem;margin:1.6rem 0 .2rem;border-bottom:2px solid #76b900;padding-bottom:.2rem}
.nsight-report h3{font-size:1.05rem;margin:1.2rem 0 .4rem}
.nsight-report .nsr-source{color:#616e7c;font-size:.85rem;margin:0 0 .8rem;word-break:break-all}
.nsight-report .nsr-tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:.6rem}
.nsight-report .nsr-tile{border:1px solid #d9e2ec;border-radius:6px;padding:.55rem .7rem;background:#f8fafc}
.nsight-report .nsr-tile-label{font-size:.78rem;color:#52606d;text-transform:uppercase;letter-spacing:.03em}
.nsight-report .nsr-tile-value{font-size:1.35rem;font-weight:600;margin:.15rem 0}
.nsight-report .nsr-tile-detail{font-size:.78rem;color:#616e7c}
.nsight-report .nsr-tile.nsr-missing .nsr-tile-value{color:#9aa5b1;font-size:1rem}
.nsight-report .nsr-missing-text{font-size:.78rem;color:#7b8794;font-style:italic}
.nsight-report figure{margin:.8rem 0 1.2rem}
.nsight-report figcaption{font-weight:600;margin-bottom:.3rem}
.nsight-report .nsr-nodata{color:#7b8794;font-style:italic;margin:.2rem 0}
.nsight-report .nsr-table-wrap{overflow-x:auto;max-width:100%}
.nsight-report table{border-collapse:collapse;font-size:.82rem;margin:.3rem 0 .6rem}
.nsight-report th,.nsight-report td{border:1px solid #d9e2ec;padding:.2rem .45rem;text-align:left;vertical-align:top}
.nsight-report th{background:#eef2f7;cursor:pointer;user-select:none;white-space:nowrap}
.nsight-report th[aria-sort=ascending]::after{content:" \\25B2"}
.nsight-report th[aria-sort=descending]::after{content:" \\25BC"}
.nsight-report td.nsr-num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.nsight-report td.nsr-text{max-width:560px;word-break:break-all}
.nsight-report .nsr-cut,.nsight-report .nsr-notes{font-size:.85rem;color:#52606d}
.nsight-report .nsr-notes li{word-break:break-all}
.nsight-report .nsr-incomplete{border:1px solid #e12d39;background:#fff5f5;border-radius:6px;padding:.5rem .8rem}
.nsight-report .nsr-incomplete p{margin:.2rem 0;font-size:.88rem}
.nsight-report .nsr-findings{padding-left:1.2rem;margin:.3rem 0}
.nsight-report .nsr-findings li{margin:.35rem 0}
.nsight-report .nsr-sev{font-size:.72rem;text-transform:uppercase;padding:.05rem .35rem;border-radius:3px;color:#fff}
.nsight-report .nsr-sev-critical{background:#e12d39}.nsight-report .nsr-sev-warning{background:#de911d}
.nsight-report .nsr-sev-info{background:#616e7c}
.nsight-report .nsr-saving{font-weight:600;color:#3e7c17}
.nsight-report .nsr-evidence{font-size:.8rem;color:#52606d;margin:.1rem 0 0 0}
.nsight-report .nsr-steps{font-size:.88rem;margin:.3rem 0}
.nsight-report .nsr-where{cursor:pointer;text-decoration:underline dotted}
.nsight-report .nsr-stepview{position:relative}
.nsight-report .nsr-sv-help{font-size:.8rem;color:#52606d;margin:.2rem 0}
.nsight-report .nsr-sv-help button{font-size:.8rem;margin-left:.2rem;padding:0 .45rem}
.nsight-report .nsr-sv-title{font-weight:600;font-size:.9rem;margin:.6rem 0 .2rem}
.nsight-report .nsr-sv-canvas{display:block;width:100%;height:120px;border:1px solid #d9e2ec;cursor:grab}
.nsight-report .nsr-sv-idle{font-size:.8rem;color:#52606d;margin:.2rem 0;padding-left:1.2rem}
.nsight-report .nsr-sv-idle li{cursor:pointer}
.nsight-report .nsr-sv-tip{position:absolute;display:none;z-index:5;max-width:300px;background:#1f2933;color:#fff;
font-size:.75rem;padding:.3rem .45rem;border-radius:4px;pointer-events:none;word-break:break-all}
.nsight-report .nsr-legend{font-size:.78rem;color:#52606d;margin:.2rem 0}
.nsight-report .nsr-legend span{display:inline-block;width:.8em;height:.8em;margin:0 .25em 0 .7em;vertical-align:-.05em}
"""

_SCRIPT = """
(function (root) {
  try { window.nsightStepView.install(root); } catch (error) { console.error(error); }  // the charts still draw
  root.querySelectorAll("[data-nsr-spec]").forEach(function (element) {
    var spec = JSON.parse(document.getElementById(element.getAttribute("data-nsr-spec")).textContent);
    vegaEmbed(element, spec, {renderer: "svg", actions: false}).catch(function (error) {
      element.textContent = "This chart could not be drawn: " + error;
      console.error(error);
    });
  });
  root.querySelectorAll("table.nsr-sortable").forEach(function (table) {
    var headers = table.querySelectorAll("th");
    headers.forEach(function (header, column) {
      header.addEventListener("click", function () {
        var descending = header.getAttribute("aria-sort") !== "descending";
        headers.forEach(function (other) { other.removeAttribute("aria-sort"); });
        header.setAttribute("aria-sort", descending ? "descending" : "ascending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[column], y = b.cells[column];
          var nx = parseFloat(x.getAttribute("data-v")), ny = parseFloat(y.getAttribute("data-v"));
          var order = (isNaN(nx) || isNaN(ny)) ? x.textContent.localeCompare(y.textContent) : nx - ny;
          return descending ? -order : order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
})(document.getElementById(%s));
"""


@functools.cache
def vega_bundle() -> str:
    """vega + vega-lite + vega-embed as one script, read once per process from the vendored files.

    render/vendor/ holds the npm builds of the versions Altair writes specs for (scripts/vendor-vega.sh
    refreshes them), so no render pays for building a bundle and no image needs a converter for it.
    The wrapper's `define`, `module` and `exports` hide a host page's module loader: each UMD build
    then sets its global (vega, vegaLite, vegaEmbed) wherever the fragment is embedded.
    """
    vendor = resources.files("nsight_core.render") / "vendor"
    builds = "\n".join((vendor / f"{name}.min.js").read_text(encoding="utf-8")
                       for name in ("vega", "vega-lite", "vega-embed"))
    return f"(function (define, module, exports) {{\n{builds}\n}}).call(window);"


def script_json(value: Any) -> str:
    """JSON that is safe inside a <script> element: no `<`, `>` or `&` can end or open a tag."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render_fragment(profiles: Sequence[CaptureProfile], notes: Sequence[str] = ()) -> str:
    """The report as a self-contained HTML fragment: one section per capture, then NOTES.

    Safe to put inside any page (a Flyte report tab) and to repeat on one page.
    """
    fragment = GrowingFragment()
    for profile in profiles:
        fragment.add(profile)
    return fragment.render(notes)


class GrowingFragment:
    """A report fragment that grows a capture at a time, rendered anew after each (the Flyte tab of a task
    whose regions run in a loop): each capture's section is rendered once, when it is added, and joined as
    it is into every later render. Rendering them all again each time would cost the task a time that grows
    with the square of its regions (35 ms per section here)."""

    def __init__(self) -> None:
        self._sections: list[Markup] = []

    def __len__(self) -> int:
        return len(self._sections)

    def add(self, profile: CaptureProfile) -> None:
        """Render PROFILE's section, after those added before (its element ids have a prefix of their own)."""
        section = _section(profile, _Ids())
        self._sections.append(Markup(_templates().get_template("section.html.j2").render(s=section)))

    def render(self, notes: Sequence[str] = ()) -> str:
        """The fragment (see :func:`render_fragment`) of the captures added so far, then NOTES."""
        root = _Ids().next("report")
        return _templates().get_template("report.html.j2").render(
            root=root, style=Markup(_STYLE), sections=self._sections, report_notes=list(notes),
            bundle=Markup(vega_bundle()), step_view=Markup(step_view_script()),
            script=Markup(_SCRIPT % script_json(root)))


def render_page(profiles: Sequence[CaptureProfile], title: str = "GPU Profile", notes: Sequence[str] = ()) -> str:
    """The report as a standalone HTML document (what `nsight report` writes)."""
    fragment = Markup(render_fragment(profiles, notes))
    return _templates().get_template("page.html.j2").render(title=title, fragment=fragment) + "\n"


def prepare() -> None:
    """Compile the page's templates, read the script bundle and make a first chart now, not at the first
    render (30 ms): a caller waiting for nsys' export has the time then."""
    for name in ("report.html.j2", "section.html.j2", "page.html.j2"):
        _templates().get_template(name)
    vega_bundle()
    step_view_script()
    warm_up()


@functools.cache
def _templates() -> jinja2.Environment:
    """The report's templates (render/templates/), autoescaped: names from traces are always text."""
    return jinja2.Environment(loader=jinja2.PackageLoader("nsight_core.render", "templates"),
                              autoescape=True, keep_trailing_newline=False, undefined=jinja2.StrictUndefined)


class _Ids:
    """Element ids unique on any page: a random prefix per render, a counter within it."""

    def __init__(self) -> None:
        self._prefix = "nsr-" + uuid.uuid4().hex[:10]
        self._count = 0

    def next(self, kind: str) -> str:
        self._count += 1
        return f"{self._prefix}-{kind}-{self._count}"


def _section(profile: CaptureProfile, ids: _Ids) -> dict[str, Any]:
    """What the template shows of one capture: plain values and words, formatted here, escaped there."""
    return {
        "id": ids.next("section"), "title": profile.title, "source": profile.source,
        "timeline": profile.trace is not None,  # events to export (recorded CSVs have totals only)
        "incomplete": profile.completeness.warnings if profile.completeness and not profile.completeness.complete
        else [],
        "diagnosis": _diagnosis(profile.analysis) if profile.analysis is not None else None,
        "steps": _steps(profile, ids),
        "tiles": profile.tiles,
        "charts": [_chart(chart, ids) for chart in capture_charts(profile)],
        "notes": profile.notes,
        "tables": [_table(report, frame) for report, frame in _report_frames(profile)],
        "skipped": list(profile.stats.skipped.items()),
    }


def _diagnosis(analysis: Analysis) -> dict[str, Any]:
    """What to fix: each finding's words, then the steps line and the budget lines."""
    budget = budget_lines(analysis.budget)
    return {
        "findings": [{"severity": f.severity, "title": finding_title(f), "suggestion": finding_suggestion(f),
                      "saving": saving_text(f.saving) if f.saving else None,
                      "evidence": [{"text": evidence_text(e), "where": _where(e.where)} for e in f.evidence]}
                     for f in analysis.findings],
        "steps": "; ".join(line for line in (steps_text(analysis.steps), overhead_text(analysis),
                                             coverage_text(analysis.coverage)) if line),
        "budget_title": budget[0], "budget": [line.strip() for line in budget[1:]],
    }


def _where(where: Where | None) -> str | None:
    """A piece of evidence's place as the step view's script reads it (a data attribute's JSON, which the template
    escapes), if it has one."""
    found = where_json(where)
    return json.dumps(found, ensure_ascii=False) if found is not None else None


def _steps(profile: CaptureProfile, ids: _Ids) -> dict[str, Any] | None:
    """The step view of PROFILE (its drawn steps, render/step_view.py), None without steps."""
    drawing = profile.steps_drawn
    if drawing is None or not drawing.steps:
        return None
    parts = {part for step in drawing.steps for part in step.idle["part"].unique().to_list()}
    return {"id": ids.next("steps"), "data": Markup(script_json(step_view_data(drawing))),
            "panels": step_panels(drawing),
            "legend": [(label, KIND_COLORS[kind]) for kind, label in KIND_LABELS.items()
                       if kind in {k for step in drawing.steps for k in step.events["kind"].unique().to_list()}]
            + [(f"idle: {PART_LABELS[part]}" if part != "gpu_idle" else PART_LABELS[part], PART_COLORS[part])
               for part in PART_COLORS if part in parts]}


def _chart(chart: ChartSpec, ids: _Ids) -> dict[str, Any]:
    return {"title": chart.title, "missing": chart.missing, "id": ids.next("chart"),
            "spec": Markup(script_json(chart.spec)) if chart.spec is not None else None}


def _report_frames(profile: CaptureProfile) -> Iterator[tuple[str, pl.DataFrame]]:
    """(report, rows) for every requested report that has rows, in the requested order."""
    stats = profile.stats
    for report in stats.reports:
        if report in stats.skipped:
            continue
        if report in stats.other:
            yield report, stats.frame(report)
            continue
        table = table_of(report)
        if table is not None:
            yield report, stats.frame(table)


def _table(report: str, frame: pl.DataFrame) -> dict[str, Any]:
    """A report's first MAX_TABLE_ROWS rows as cells: text, and for numbers the value to sort by.

    Durations (``*_ns`` columns) and sizes (nsys' ``*_mb``) read as words in one set of units (units.py),
    their headers without the suffix; the cell still sorts by the raw number.
    """
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
        if unit is not None:
            text = unit(value)
        else:
            text = f"{value:,}" if isinstance(value, int) else f"{value:,.3f}".rstrip("0").rstrip(".")
        return {"numeric": True, "text": text, "sort": repr(value)}
    return {"numeric": False, "text": str(value)}
