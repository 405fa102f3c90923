"""The report's charts as Vega-Lite specs (built with Altair, drawn in the browser by vega-embed): each a
:class:`ChartSpec`, the spec or why there is nothing to draw, carrying only the rows it draws (top N, buckets)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import altair as alt
import polars as pl
from altair.utils.schemapi import debug_mode
from pydantic import BaseModel

from nsight_core.analysis.budget import PARTS
from nsight_core.analysis.capture_profile import CaptureProfile
from nsight_core.analysis.host_time import OTHER_RANGES
from nsight_core.analysis.kernels import unique_short_names
from nsight_core.analysis.ranges import RangeFamily
from nsight_core.analysis.step_drawing import StepDrawing
from nsight_core.analysis.summary import NEEDS_TRACE
from nsight_core.analysis.trace_summary import TraceSummary
from nsight_core.render.findings import PART_LABELS
from nsight_core.render.step_view import PART_COLORS, cpu_words
from nsight_core.stats.models import ProfileStats
from nsight_core.trace.schema import in_domain, os_tid
from nsight_core.units import BYTES_PER_NSYS_MB, MIB, MICROSECONDS, duration

TOP_N = 20
WIDTH = 640
NS_PER_MS = 1e6
MAX_BUDGET_BARS = 200
"""Steps drawn as bars at most; more are drawn in groups of consecutive steps (each bar a group's mean step)."""
LABELLED_SHARE = 0.08
"""A part of the median step's bar is labelled in place when it holds at least this share of the step."""
_DURATIONS = "Instance durations of repeated NVTX ranges"
TOP_LEGEND = 12
"""Range names in the timeline's legend (and colors); the others share one color as OTHER_RANGES."""
TABLEAU = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac", "#86bcb6", "#d37295"]
"""Tableau 10's colors and two more: one per legend name (TOP_LEGEND)."""


class ChartSpec(BaseModel):
    """A titled chart: a Vega-Lite spec, or why the capture has nothing to draw."""

    title: str
    spec: dict[str, Any] | None = None
    missing: str | None = None


def capture_charts(profile: CaptureProfile) -> list[ChartSpec]:
    """All charts of one capture, in display order, with Altair's debug mode off (it validates every row; :func:`_spec`
    says where the schema is checked) and channel objects, never the shorthand strings Altair resolves by hashing."""
    with debug_mode(False):
        stats = profile.stats
        if (analysis := profile.analysis) is not None:
            nvtx = [nvtx_families_chart(analysis.ranges), nvtx_family_distribution_chart(analysis.ranges)]
        else:
            nvtx = [nvtx_totals_chart(stats), nvtx_distribution_chart(stats)]
        osrt = [osrt_chart(profile.trace)] if profile.trace is not None and profile.trace.osrt else []
        budget = budget_charts(profile.steps_drawn) if profile.steps_drawn is not None else []
        if profile.trace is not None and not profile.trace.gpu_traced:
            return [timeline_chart(profile.trace), *nvtx, *osrt]
        return [*budget, timeline_chart(profile.trace), top_kernels_chart(stats), *nvtx, memory_chart(stats), *osrt]


def warm_up() -> None:
    """Make one small chart now: Altair's first chart in a process pays a set-up, which a caller waiting can pay."""
    with debug_mode(False):
        _total_time_bars(pl.DataFrame({"name": ["a"], "total_ms": [1.0]}), "name", "#76b900",
                         [alt.Tooltip("total_ms:Q", format=",.3f")])


def _spec(chart: alt.TopLevelMixin, **datasets: list[dict[str, Any]]) -> dict[str, Any]:
    """CHART as a Vega-Lite dict with DATASETS (the rows of each ``alt.Data(name=...)``) added after Altair made it,
    which would convert inline values one by one. Unvalidated: tests/report/test_chart_specs.py checks the shapes."""
    spec = chart.configure_view(stroke=None).to_dict(validate=False)
    if datasets:
        spec["datasets"] = datasets
    return spec


def _bar_height(rows: int) -> int:
    return max(60, 22 * rows)


def _tip(field: str, title: str, number: str | None = None) -> alt.Tooltip:
    return alt.Tooltip(field, title=title) if number is None else alt.Tooltip(field, title=title, format=number)


def _total_time_bars(frame: pl.DataFrame, label: str, color: str, tooltip: list[alt.Tooltip],
                     x: alt.X | None = None, data: str = "bars") -> dict[str, Any]:
    """Horizontal bars of X (`total_ms`) per LABEL, longest first: the shape of every "top N" chart."""
    chart = alt.Chart(alt.Data(name=data)).mark_bar(color=color).encode(
        x=x or alt.X("total_ms:Q", title="Total time (ms)"), tooltip=tooltip,
        y=alt.Y(f"{label}:N", sort="-x", title=None, axis=alt.Axis(labelLimit=320)),
    ).properties(width=WIDTH, height=_bar_height(frame.height))
    return _spec(chart, **{data: frame.to_dicts()})


def top_kernels_chart(stats: ProfileStats, top: int = TOP_N) -> ChartSpec:
    """Kernels by total GPU time: short names on the axis, the full demangled name on hover."""
    title = f"Top {top} kernels by total GPU time"
    if not stats.kernels:
        return ChartSpec(title=title, missing="no kernel summary (cuda_gpu_kern_sum) for this capture")
    frame = stats.frame("kernels").sort("total_time_ns", descending=True).head(top)
    frame = frame.select(pl.Series("kernel", unique_short_names(frame["name"].to_list())), "name",
                         (pl.col("total_time_ns") / NS_PER_MS).alias("total_ms"), "instances",
                         (pl.col("avg_ns") / 1e3).alias("avg_us"), "time_pct")
    return ChartSpec(title=title, spec=_total_time_bars(frame, "kernel", "#4c78a8", [
        _tip("name:N", "Kernel"), _tip("total_ms:Q", "Total (ms)", ",.3f"), _tip("instances:Q", "Launches", ","),
        _tip("avg_us:Q", f"Average ({MICROSECONDS})", ",.2f"), _tip("time_pct:Q", "Share of kernel time (%)", ".1f")]))


def nvtx_totals_chart(stats: ProfileStats, top: int = TOP_N) -> ChartSpec:
    """NVTX ranges by total time (the user's own names for the phases of their code)."""
    title = f"NVTX ranges by total time (top {top})"
    if not stats.nvtx_ranges:
        return ChartSpec(title=title, missing="no NVTX push/pop ranges (nvtx_pushpop_sum) in this capture")
    frame = stats.frame("nvtx_ranges").sort("total_time_ns", descending=True).head(top).select(
        "name", (pl.col("total_time_ns") / NS_PER_MS).alias("total_ms"), "instances")
    return ChartSpec(title=title, spec=_total_time_bars(frame, "name", "#76b900", [
        _tip("name:N", "Range"), _tip("total_ms:Q", "Total (ms)", ",.3f"), _tip("instances:Q", "Instances", ",")]))


def nvtx_families_chart(ranges: list[RangeFamily], top: int = TOP_N) -> ChartSpec:
    """NVTX range families (`step_{n}` one bar) by self time, as shares of the user's window: a parent's bar is not its
    children's again, so one thread's add up to at most 100 %; the summed time is in the tooltip."""
    title = f"NVTX ranges by self time (top {top} families)"
    if not ranges:
        return ChartSpec(title=title, missing="no NVTX ranges in this capture")
    frame = pl.DataFrame([r.model_dump() for r in ranges[:top]]).with_columns(
        in_domain("pattern").alias("range"),
        (pl.col("self_ns") / NS_PER_MS).alias("self_ms"), (pl.col("summed_ns") / NS_PER_MS).alias("summed_ms"))
    return ChartSpec(title=title, spec=_total_time_bars(frame, "range", "#76b900", [
        _tip("range:N", "Range family"), _tip("count:Q", "Instances", ","), _tip("self_ms:Q", "Self time (ms)", ",.3f"),
        _tip("self_fraction:Q", "Share of the capture", ".1%"),
        _tip("summed_ms:Q", "Summed time, nested ranges included (ms)", ",.3f")],
        alt.X("self_fraction:Q", title="Self time, share of the capture", axis=alt.Axis(format="%")), "families"))


def nvtx_family_distribution_chart(ranges: list[RangeFamily], top: int = TOP_N) -> ChartSpec:
    """For range families that ran more than once: min..max of instance durations, median and mean marked."""
    repeated = [r for r in ranges if r.count > 1][:top]
    if not repeated:
        return ChartSpec(title=_DURATIONS, missing="no NVTX range (or numbered family) ran more than once")
    frame = pl.DataFrame([r.model_dump() for r in repeated]).select(
        in_domain("pattern").alias("name"), pl.col("count").alias("instances"),
        *((pl.col(f"{stat}_ns") / NS_PER_MS).alias(f"{alias}_ms")
          for stat, alias in (("min", "min"), ("p50", "med"), ("mean", "avg"), ("max", "max"))))
    return ChartSpec(title=_DURATIONS, spec=_distribution(frame))


def osrt_chart(trace: TraceSummary) -> ChartSpec:
    """OS-runtime calls of the user's window by total time (the profiler's settle wait left out)."""
    frame = pl.DataFrame([c.model_dump() for c in trace.osrt]).with_columns(
        (pl.col("total_ns") / NS_PER_MS).alias("total_ms"), (pl.col("max_ns") / NS_PER_MS).alias("max_ms"))
    return ChartSpec(title="OS runtime calls by total time", spec=_total_time_bars(frame, "name", "#9f86c0", [
        _tip("name:N", "Call"), _tip("calls:Q", "Calls", ","), _tip("total_ms:Q", "Total (ms), threads summed", ",.3f"),
        _tip("max_ms:Q", "Longest (ms)", ",.3f")]))


def nvtx_distribution_chart(stats: ProfileStats, top: int = TOP_N) -> ChartSpec:
    """For ranges that ran more than once: min..max of instance durations, median and mean marked."""
    frame = stats.frame("nvtx_ranges").filter(pl.col("instances") > 1)
    if not frame.height:
        return ChartSpec(title=_DURATIONS, missing="no NVTX range ran more than once")
    frame = frame.sort("total_time_ns", descending=True).head(top).select(
        "name", "instances", *((pl.col(f"{stat}_ns") / NS_PER_MS).alias(f"{stat}_ms")
                               for stat in ("min", "med", "avg", "max")))
    return ChartSpec(title=_DURATIONS, spec=_distribution(frame))


def _distribution(frame: pl.DataFrame) -> dict[str, Any]:
    """Per name of FRAME: a min..max rule, median tick and mean dot; axis and tooltip on the layer, not per mark."""
    chart = alt.layer(
        alt.Chart().mark_rule(strokeWidth=3, color="#9aa5b1").encode(
            x=alt.X("min_ms:Q", title="Instance duration (ms): min to max, | median, ● mean"), x2=alt.X2("max_ms")),
        alt.Chart().mark_tick(color="#1f2933", thickness=2, size=16).encode(x=alt.X("med_ms:Q")),
        alt.Chart().mark_point(color="#76b900", filled=True, size=60).encode(x=alt.X("avg_ms:Q")),
        data=alt.Data(name="durations"),
    ).encode(
        y=alt.Y("name:N", title=None, sort=alt.EncodingSortField("max_ms", order="descending"),
                axis=alt.Axis(labelLimit=320)),
        tooltip=[_tip("name:N", "Range"), _tip("instances:Q", "Instances", ","),
                 *(_tip(f"{stat}_ms:Q", f"{label} (ms)", ",.3f")
                   for stat, label in (("min", "Min"), ("med", "Median"), ("avg", "Mean"), ("max", "Max")))],
    ).properties(width=WIDTH, height=_bar_height(frame.height))
    return _spec(chart, durations=frame.to_dicts())


def memory_chart(stats: ProfileStats) -> ChartSpec:
    """Memory operations by kind: bytes moved and GPU time, side by side."""
    title = "Memory operations"
    if not stats.memory_size and not stats.memory_time:
        return ChartSpec(title=title, missing="no memory copies or memsets were traced in this capture")
    sizes = stats.frame("memory_size").select(
        "name", (pl.col("total_mb") * BYTES_PER_NSYS_MB / MIB).alias("value"), "instances")
    times = stats.frame("memory_time").select("name", (pl.col("total_time_ns") / NS_PER_MS).alias("value"), "instances")
    drawn = [chart for chart in (("sizes", sizes, "Bytes moved", "Total (MiB)", "#4c78a8"),
                                 ("times", times, "GPU time", "Total time (ms)", "#f58518")) if chart[1].height]
    charts = [
        alt.Chart(alt.Data(name=name), title=label).mark_bar(color=color).encode(
            x=alt.X("value:Q", title=axis), y=alt.Y("name:N", sort="-x", title=None, axis=alt.Axis(labelLimit=260)),
            tooltip=[_tip("name:N", "Operation"), _tip("value:Q", axis, ",.3f"),
                     _tip("instances:Q", "Operations", ",")],
        ).properties(width=WIDTH // 2 - 80, height=_bar_height(frame.height))
        for name, frame, label, axis, color in drawn]
    return ChartSpec(title=title, spec=_spec(alt.hconcat(*charts), **{name: frame.to_dicts()
                                                                   for name, frame, *_ in drawn}))


def timeline_chart(trace: TraceSummary | None) -> ChartSpec:
    """Kernel and copy busy fraction per time bucket across the capture, NVTX ranges along the same axis."""
    title = "GPU activity over the capture"
    if trace is None:
        return ChartSpec(title=title, missing=NEEDS_TRACE)
    if not trace.timeline or not (trace.kernel_count or trace.graph_count or trace.copy_count or trace.nvtx):
        return ChartSpec(title=title, missing="the trace holds no kernels, memory operations or NVTX ranges")
    buckets = pl.DataFrame([bucket.model_dump() for bucket in trace.timeline]).select(
        (pl.col("start_ns") / NS_PER_MS).alias("start_ms"), (pl.col("end_ns") / NS_PER_MS).alias("end_ms"),
        "kernel_fraction", "copy_fraction")
    x_scale = alt.Scale(domain=[0, trace.span_ns / NS_PER_MS])
    lanes = [
        alt.Chart(alt.Data(name="buckets")).mark_rect(color=color).encode(
            x=alt.X("start_ms:Q", title=None, scale=x_scale), x2=alt.X2("end_ms"),
            y=alt.Y(f"{field}:Q", title=label, axis=alt.Axis(format="%", tickCount=2), scale=alt.Scale(domain=[0, 1])),
            tooltip=[_tip("start_ms:Q", "From (ms)", ",.3f"), _tip("end_ms:Q", "To (ms)", ",.3f"),
                     _tip(f"{field}:Q", f"{label} busy", ".1%")],
        ).properties(width=WIDTH, height=90)
        for field, label, color, count in (("kernel_fraction", "Kernels", "#76b900",
                                            trace.kernel_count + trace.graph_count),
                                           ("copy_fraction", "Copies", "#4c78a8", trace.copy_count))
        if count]
    axis_title = "Time since the first traced event (ms)"
    if not trace.nvtx:
        lanes[-1] = lanes[-1].encode(x=alt.X("start_ms:Q", title=axis_title, scale=x_scale))
        return ChartSpec(title=title, spec=_spec(alt.vconcat(*lanes, spacing=4), buckets=buckets.to_dicts()))
    lane, ranges = _nvtx_lane(trace, x_scale, axis_title)
    return ChartSpec(title=title, spec=_spec(alt.vconcat(*lanes, lane, spacing=4), buckets=buckets.to_dicts(),
                                             ranges=ranges))

def _nvtx_lane(trace: TraceSummary, x_scale: alt.Scale, axis_title: str) -> tuple[alt.Chart, list[dict[str, Any]]]:
    """The timeline's NVTX rows, one per thread and depth, names in a legend: each range, or beyond MAX_TIMELINE_RANGES
    each thread's outermost ranges per slice (not slivers), as opaque as the slice is covered."""
    aggregated = bool(trace.nvtx_buckets)
    frame = pl.DataFrame([drawn.model_dump() for drawn in trace.nvtx_buckets or trace.nvtx]).with_columns(
        pl.lit(0).alias("depth") if aggregated else pl.lit(1.0).alias("fraction"))
    covered = (pl.col("end_ns") - pl.col("start_ns")) * pl.col("fraction")
    top = frame.group_by("name").agg(covered.sum().alias("t")).sort("t", "name", descending=[True, False])
    names = top["name"].head(TOP_LEGEND).to_list()
    thread = pl.col("thread")
    label = pl.format("{} ({})", thread.replace_strict(trace.thread_names, default="thread", return_dtype=pl.String),
                      os_tid(thread))
    rows = frame.with_columns(
        pl.when(pl.col("name").is_in(names)).then("name").otherwise(pl.lit(OTHER_RANGES)).alias("legend"),
        pl.when(pl.col("depth") == 0).then(label).otherwise(pl.format("{} level {}", label, pl.col("depth") + 1))
        .alias("row"),
        (pl.col("start_ns") / NS_PER_MS).alias("start_ms"), (pl.col("end_ns") / NS_PER_MS).alias("end_ms"),
        ((pl.col("end_ns") - pl.col("start_ns")) / NS_PER_MS).alias("duration_ms"),
    ).sort("thread", "depth", "start_ns")
    order = rows["row"].unique(maintain_order=True).to_list()
    legend = names + ([OTHER_RANGES] if top.height > len(names) else [])
    tooltip = [_tip("row:N", "Thread"), _tip("name:N", "Range"), _tip("start_ms:Q", "Start (ms)", ",.3f"),
               _tip("fraction:Q", "Share of the slice in ranges", ".0%") if aggregated
               else _tip("duration_ms:Q", "Duration (ms)", ",.3f")]
    title = "NVTX, per thread" + (f": outermost ranges per slice ({trace.nvtx_total:,} ranges)" if aggregated else "")
    chart = alt.Chart(alt.Data(name="ranges")).mark_rect(stroke="white", strokeWidth=0 if aggregated else 0.5).encode(
        x=alt.X("start_ms:Q", title=axis_title, scale=x_scale),
        x2=alt.X2("end_ms"),
        y=alt.Y("row:N", title=None, sort=order, axis=alt.Axis(labelLimit=200)),
        color=alt.Color("legend:N", title=title, sort=legend,
                        scale=alt.Scale(domain=legend, range=[*TABLEAU[:len(names)], "#9aa5b1"][:len(legend)]),
                        legend=alt.Legend(orient="bottom", columns=4, labelLimit=220, titleLimit=WIDTH)),
        opacity=alt.Opacity("fraction:Q", legend=None, scale=alt.Scale(domain=[0, 1], range=[0.15, 1]))
        if aggregated else alt.value(1),
        tooltip=tooltip,
    ).properties(width=WIDTH, height=22 * len(order))
    return chart, rows.select("row", "name", "legend", "start_ms", "end_ms", "duration_ms", "fraction").to_dicts()

def budget_charts(drawing: StepDrawing) -> list[ChartSpec]:
    """The median step's bar of its parts, then every step's bar; for captures that traced GPU work."""
    budgets = drawing.budgets
    if not budgets.height:
        return []
    parts = [part for part in PARTS if budgets[f"{part}_ns"].sum()]
    colors = alt.Color("part:N", title=None, legend=alt.Legend(orient="bottom", columns=4), scale=alt.Scale(
        domain=[PART_LABELS[part] for part in parts], range=[PART_COLORS[part] for part in parts]))
    return [median_budget_chart(drawing, parts, colors), step_budgets_chart(drawing, parts, colors)]


def _long(budgets: pl.DataFrame, parts: Sequence[str]) -> pl.DataFrame:
    """BUDGETS (step, wall_ns, <part>_ns) as a row per step and part: step, part (its words), order, ms, share."""
    order = {f"{part}_ns": index for index, part in enumerate(parts)}
    return (budgets.unpivot(index=["step", "wall_ns"], on=list(order), variable_name="part", value_name="ns")
            .with_columns(pl.col("part").replace_strict(order, return_dtype=pl.Int64).alias("order"),
                          pl.col("part").str.strip_suffix("_ns").replace_strict(PART_LABELS).alias("part"),
                          (pl.col("ns") / NS_PER_MS).alias("ms"),
                          (pl.col("ns") / pl.col("wall_ns")).fill_nan(0.0).alias("share"))
            .filter(pl.col("ns") > 0))


def median_budget_chart(drawing: StepDrawing, parts: Sequence[str], colors: alt.Color) -> ChartSpec:
    """The median steady step as one bar of its parts, the large ones labelled in place, an idle part with what the host
    mostly did meanwhile ('GPU idle 87% (in range data)')."""
    step = drawing.median_step
    row = drawing.budgets.filter(pl.col("step") == step)
    wall = int(row["wall_ns"].sum())
    title = f"The median step (step {step}, {duration(wall)}): where its time went"
    idle = next((drawn.idle for drawn in drawing.steps if drawn.step == step), drawing.steps[0].idle.clear())
    causes = (idle.filter(pl.col("cpu_kind").is_not_null())
              .group_by("part", cpu_words().alias("cause"))
              .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("ns"))
              .sort("ns", "cause", descending=[True, False]).group_by("part", maintain_order=True).first()
              .select(pl.col("part").replace_strict(PART_LABELS), "cause"))
    rows = (_long(row, parts).sort("order")
            .join(causes, on="part", how="left", maintain_order="left").with_columns(
                (pl.col("ms").cum_sum() - pl.col("ms") / 2).alias("middle"),
                pl.when(pl.col("share") >= LABELLED_SHARE)
                .then(pl.format("{} {}%{}", "part", (pl.col("share") * 100).round(0).cast(pl.Int64),
                                pl.when(pl.col("cause").is_not_null() & (pl.col("share") >= 2 * LABELLED_SHARE))
                                .then(pl.format(" ({})", "cause")).otherwise(pl.lit(""))))
                .otherwise(pl.lit("")).alias("label")))
    base = alt.Chart(alt.Data(name="median")).encode(y=alt.Y("step:O", title=None, axis=None))
    bar = base.mark_bar(height=34).encode(
        x=alt.X("ms:Q", stack="zero", title="Time in the median step (ms)",
                scale=alt.Scale(domain=[0, wall / NS_PER_MS])), color=colors, order=alt.Order("order:Q"),
        tooltip=[_tip("part:N", "Part"), _tip("ms:Q", "Time (ms)", ",.3f"), _tip("share:Q", "Share of the step", ".1%"),
                 _tip("cause:N", "The host meanwhile, mostly")])
    text = base.mark_text(color="white", fontWeight="bold", fontSize=11,  # cut to its part's width
                          limit=alt.ExprRef(expr=f"datum.share * {WIDTH} - 8")).encode(
        x=alt.X("middle:Q"), text=alt.Text("label:N"))
    chart = alt.layer(bar, text).properties(width=WIDTH, height=44)
    return ChartSpec(title=title, spec=_spec(chart, median=rows.to_dicts()))


def step_budgets_chart(drawing: StepDrawing, parts: Sequence[str], colors: alt.Color) -> ChartSpec:
    """Every step's time as a stacked bar of its parts; over MAX_BUDGET_BARS steps, groups of consecutive steps."""
    budgets = drawing.budgets.sort("step")
    title = "Where each step's time went"
    group = -(-budgets.height // MAX_BUDGET_BARS)
    if group > 1:
        budgets = (budgets.with_columns((pl.col("step") // group * group).alias("step")).group_by("step")
                   .agg(pl.col("wall_ns", *(f"{part}_ns" for part in parts)).mean().round(0).cast(pl.Int64)))
        title += f" (each bar the mean of {group} consecutive steps)"
    warmup = f"; step {int(budgets['step'][0])} is the warm-up" if drawing.warmup_steps and group == 1 else ""
    chart = alt.Chart(alt.Data(name="budgets")).mark_bar().encode(
        x=alt.X("step:O", title=f"Step{warmup}", axis=alt.Axis(labelOverlap=True)),
        y=alt.Y("ms:Q", stack="zero", title="Time (ms)"), color=colors, order=alt.Order("order:Q"),
        tooltip=[_tip("step:O", "Step"), _tip("part:N", "Part"), _tip("ms:Q", "Time (ms)", ",.3f"),
                 _tip("share:Q", "Share of the step", ".1%")],
    ).properties(width=WIDTH, height=180)
    return ChartSpec(title=title, spec=_spec(chart, budgets=_long(budgets, parts).to_dicts()))
