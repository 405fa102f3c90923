"""The five default `nsys stats` reports, computed from a Trace's events with Polars.

Each report is the query nsys runs (its reports/*.py, 2023.4) restated as one group-by: the same grouping key, the same
statistics, the same order (ties in the key's order, as nsys' SQLite returns them) and the same rounding to one decimal
as the nsys that wrote the export (2023.4.4 like SQLite's round(), the value times ten, halves away from zero; 2025.3
the double's exact value). Equality with `nsys stats` is tested for both (tests/core/test_stats_from_events.py,
tests/core/test_nsys_2025.py). One difference: a region's calibration burst (nsight_core.calibration: its NVTX range,
the CUDA calls in it and their kernels) is nsight's own work, not the program's, and is left out of every report. A
report whose events the capture lacks is skipped with nsys' reason; one whose table the export holds in a schema
nsight-core cannot read, with the Trace's note."""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, TypeVar, cast

import polars as pl

from nsight_core.marks import is_calibration_range, marked_window
from nsight_core.stats import exact
from nsight_core.stats.models import (
    ApiCallRow,
    GraphRow,
    KernelRow,
    MemorySizeRow,
    MemoryTimeRow,
    NvtxRangeRow,
    ProfileStats,
)
from nsight_core.stats.reports import canonical
from nsight_core.trace import streamed
from nsight_core.trace.model import Trace
from nsight_core.trace.schema import in_domain
from nsight_core.trace.streamed import is_streamed

BYTES_PER_MB = 1_000_000
MB_DECIMALS = 3
"""nsys prints sizes in MB with three decimals."""


EXACT_ROUNDING_SINCE = 2025
"""The first nsys year whose reports round a double's exact value (2023.4.4 does not, 2025.3 does; 2024 unchecked)."""
_YEAR = re.compile(r"(\d{4})\.")

Rounding = Callable[[pl.Expr], pl.Expr]
_NAME = pl.col("name")


def _sqlite_round(value: pl.Expr) -> pl.Expr:
    """One decimal as SQLite's round(): the value times ten, halves away from zero."""
    return value.round(1, mode="half_away_from_zero")


def _exact_round(value: pl.Expr) -> pl.Expr:
    """One decimal of the double's exact value, halves away from zero (per report row: a report is small)."""
    return value.map_elements(lambda number: float(Decimal(number).quantize(Decimal("0.1"), ROUND_HALF_UP)),
                              return_dtype=pl.Float64)


def rounding(trace: Trace) -> Rounding:
    """How the nsys that wrote TRACE's export rounds its reports' decimals (SQLite's way where unknown)."""
    year = _YEAR.match(trace.meta.get("EXPORT_PRODUCT_VERSION", ""))
    return _exact_round if year and int(year.group(1)) >= EXACT_ROUNDING_SINCE else _sqlite_round


def _summary(frame: pl.LazyFrame, key: str, value: str, streamed: bool, prefix: str,
             selected: tuple[pl.LazyFrame, pl.Expr] | None = None) -> pl.DataFrame:
    """Per KEY of FRAME: total, instances, avg, med, min, max, stddev of VALUE (an integer column), PREFIX the unit in
    their names ('time': ns), plus ``name`` where KEY is not the name; exact either way. Where STREAMED: one pass of the
    streaming engine, the medians by selection (:mod:`nsight_core.stats.exact`) over SELECTED where given (the frame and
    expression to read VALUE from, where FRAME's column is made of others); else the in-memory engine, the median in an
    aggregation of its own over KEY and VALUE alone (beside the sums it would leave the engine's fast path)."""
    named = [] if key == "name" else [pl.col("name").first()]
    values = pl.col(value)
    aggregated = frame.group_by(key).agg(
        *named, *exact.sums(values), values.min().alias("_min"), values.max().alias("_max"),
    ).collect(engine="streaming" if streamed else "auto")
    source, of = selected or (frame, pl.col(value))
    medians = (exact.medians(source, key, of, aggregated) if streamed
               else frame.select(key, value).group_by(key).agg(values.median().alias("_median")).collect())
    unit = "ns" if prefix == "time" else prefix
    return exact.finish(aggregated.join(medians, on=key, how="left"), f"avg_{unit}", f"stddev_{unit}").select(
        key, *([] if key == "name" else ["name"]),
        pl.col("_sum").alias("total_time_ns" if prefix == "time" else f"total_{prefix}"),
        pl.col("_n").alias("instances"), f"avg_{unit}", pl.col("_median").alias(f"med_{unit}"),
        pl.col("_min").alias(f"min_{unit}"), pl.col("_max").alias(f"max_{unit}"), f"stddev_{unit}")


def _time_summary(trace: Trace, frame: pl.LazyFrame, name: pl.Expr = _NAME, key: str = "name",
                  by_instances: bool = False) -> pl.DataFrame:
    """Per KEY (a column, or "name") of FRAME, one of TRACE's events: NAME, time %, total, instances, avg, med, min,
    max, stddev of end - start, rounded as the nsys that wrote TRACE's export rounds. In nsys' order: total time
    descending; among equal totals, fewer instances first where BY_INSTANCES (cuda_gpu_kern_sum), then the key."""
    # Only the columns the report needs, the duration once (each statistic of an expression computes it anew).
    timed = frame.select(*([] if key == "name" else [key]), name.alias("name"), "start_ns", "end_ns")
    duration = pl.col("end_ns") - pl.col("start_ns")
    summary = _summary(timed.select(pl.exclude("start_ns", "end_ns"), duration.alias("_duration")), key, "_duration",
                       is_streamed(trace), "time", (timed.select(key, "start_ns", "end_ns"), duration))
    round_ = rounding(trace)
    order = ["total_time_ns", *(["instances"] if by_instances else []), key]
    share = (pl.col("total_time_ns") * 100.0 / pl.col("total_time_ns").sum()).fill_nan(0.0)
    return summary.with_columns(round_(share).alias("time_pct"), round_(pl.col("avg_ns", "med_ns", "stddev_ns"))).sort(
        order, descending=[True] + [False] * (len(order) - 1))


def _bursts(events: streamed.Events) -> pl.DataFrame:
    """The calibration bursts' ranges (thread, start_ns, end_ns): one a region, none in a whole-process capture."""
    return events.nvtx.filter(is_calibration_range()).select("thread", "start_ns", "end_ns").collect(engine="streaming")


def _in_burst(bursts: pl.DataFrame) -> pl.Expr:
    """A CUDA call of a burst: on its thread, inside its range."""
    return pl.any_horizontal([(pl.col("thread") == thread) & pl.col("start_ns").is_between(start, end)
                              for thread, start, end in bursts.iter_rows()])


def _programs_kernels(events: streamed.Events) -> pl.LazyFrame:
    """The kernels less a calibration burst's: launched by its calls (by correlation id) and run inside its range."""
    if not (bursts := _bursts(events)).height:
        return events.kernels
    launched = events.cuda_api.filter(_in_burst(bursts)).select(pl.col("correlation_id").drop_nulls()).collect(
        engine="streaming")["correlation_id"]
    run_inside = pl.any_horizontal([pl.col("start_ns").is_between(start, end) for _, start, end in bursts.iter_rows()])
    return events.kernels.filter(~(pl.col("correlation_id").is_in(launched.implode()).fill_null(False) & run_inside))


def _programs_calls(events: streamed.Events) -> pl.LazyFrame:
    """The CUDA calls less a calibration burst's."""
    bursts = _bursts(events)
    return events.cuda_api.filter(~_in_burst(bursts)) if bursts.height else events.cuda_api


def kernel_summary(trace: Trace) -> list[KernelRow] | str:
    """cuda_gpu_kern_sum: kernels by demangled name."""
    summary = _time_summary(trace, _programs_kernels(streamed.events(trace)), by_instances=True)
    return _rows(KernelRow, summary) if summary.height else "does not contain CUDA kernel data."


def graph_summary(trace: Trace) -> list[GraphRow]:
    """CUDA-graph launches on the GPU by graph (none where the trace has no graph-level rows): GPU work as much as
    a kernel is, which nsys' kernel report leaves out; the same statistics and order as its time reports."""
    return _rows(GraphRow, _time_summary(trace, streamed.events(trace).graphs, pl.format("CUDA graph {}", "graph_id"),
                                         key="graph_id"))


def api_summary(trace: Trace) -> list[ApiCallRow] | str:
    """cuda_api_sum: CUDA runtime and driver calls by nsys' string id of the function (its full name)."""
    summary = _time_summary(trace, _programs_calls(streamed.events(trace)), key="name_id")
    return _rows(ApiCallRow, summary) if summary.height else "does not contain CUDA trace data."


def _memory_operations(trace: Trace) -> pl.LazyFrame:
    events, columns = streamed.events(trace), ("start_ns", "end_ns", "bytes")
    return pl.concat([events.memcpy.select(pl.format("[CUDA memcpy {}]", "direction").alias("name"), *columns),
                      events.memset.select(pl.lit("[CUDA memset]").alias("name"), *columns)])


def memory_time_summary(trace: Trace) -> list[MemoryTimeRow] | str:
    """cuda_gpu_mem_time_sum: copies by direction and memsets, by time."""
    summary = _time_summary(trace, _memory_operations(trace))
    return _rows(MemoryTimeRow, summary) if summary.height else "does not contain GPU memory data."


def memory_size_summary(trace: Trace) -> list[MemorySizeRow] | str:
    """cuda_gpu_mem_size_sum: copies by direction and memsets, by size (MB, three decimals)."""
    summary = _summary(_memory_operations(trace).select("name", "bytes"), "name", "bytes", is_streamed(trace), "mb")
    if not summary.height:
        return "does not contain GPU memory data."
    summary = summary.sort(["total_mb", "name"], descending=[True, False])
    return [MemorySizeRow.model_validate({field: _megabytes(value) if field.endswith("_mb") else value
                                          for field, value in row.items()}) for row in summary.to_dicts()]


def _megabytes(size: float) -> float:
    """SIZE bytes in MB as nsys prints it: SIZE / 1e6 to three decimals, the double's nearest (as printf's %.3f;
    not halves away from zero: 4500 bytes, 0.0045 as a double, is slightly below the half and prints 0.004)."""
    return float(f"{size / BYTES_PER_MB:.{MB_DECIMALS}f}")


def nvtx_summary(trace: Trace) -> list[NvtxRangeRow] | str:
    """nvtx_pushpop_sum: push/pop ranges by `domain:name` (the name alone in the default domain)."""
    push_pop = streamed.events(trace).nvtx.filter((pl.col("kind") == "push_pop") & ~is_calibration_range())
    summary = _time_summary(trace, push_pop, in_domain())
    return _rows(NvtxRangeRow, summary) if summary.height else \
        "does not contain NV Tools Extension (NVTX) push/pop ranges."


OSRT_SUM_COLUMNS = ("Time (%)", "Total Time (ns)", "Num Calls", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
                "StdDev (ns)", "Name")
"""osrt_sum's columns, as `nsys stats` writes them (and its CSVs load into ``ProfileStats.other``)."""


def osrt_summary(trace: Trace) -> list[dict[str, Any]] | str:
    """osrt_sum: OS-runtime calls by function, those of the user's block where a region marked it (nsight_core.marks),
    clipped to it as the OS-runtime tile counts them. `nsys stats` counts the whole collection, nsight's own calls
    included: the settle wait after `nsys start`, and the start's own subprocess (its sigaction, pipe2, waitpid...).
    Without marks (a whole-process capture) every call, as nsys counts them."""
    events = streamed.events(trace)
    calls = events.osrt
    live, stop = marked_window(events.nvtx_marks)
    if live is not None:
        end = stop if stop is not None else 2**63 - 1
        calls = calls.filter((pl.col("end_ns") > live) & (pl.col("start_ns") < end)).with_columns(
            pl.col("start_ns").clip(live, end), pl.col("end_ns").clip(live, end))
    summary = _time_summary(trace, calls, key="name_id")
    if not summary.height:
        return "does not contain OS runtime trace data."
    fields = ("time_pct", "total_time_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns", "name")
    return summary.with_columns(pl.col("med_ns").cast(pl.Float64)).select(
        pl.col(field).alias(column) for field, column in zip(fields, OSRT_SUM_COLUMNS, strict=True)).to_dicts()


Rows = list[KernelRow] | list[ApiCallRow] | list[MemoryTimeRow] | list[MemorySizeRow] | list[NvtxRangeRow]
MEMORY_TABLES = ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
DERIVED: dict[str, tuple[str, Callable[[Trace], Rows | list[dict[str, Any]] | str], tuple[str, ...]]] = {
    "cuda_gpu_kern_sum": ("kernels", kernel_summary, ("CUPTI_ACTIVITY_KIND_KERNEL",)),
    "cuda_gpu_mem_time_sum": ("memory_time", memory_time_summary, MEMORY_TABLES),
    "cuda_gpu_mem_size_sum": ("memory_size", memory_size_summary, MEMORY_TABLES),
    "cuda_api_sum": ("api_calls", api_summary, ("CUPTI_ACTIVITY_KIND_RUNTIME",)),
    "nvtx_pushpop_sum": ("nvtx_ranges", nvtx_summary, ("NVTX_EVENTS",)),
    "osrt_sum": ("other", osrt_summary, ("OSRT_API",)),
}
"""Each report computed from events (the defaults, and osrt_sum for the user's block alone): the ProfileStats list it
fills (``other``: by the report's name), how it is computed, and the export tables it reads."""


def is_derived(report: str) -> bool:
    """REPORT (any nsys name, no options) is computed from events rather than by `nsys stats`."""
    return ":" not in report and canonical(report) in DERIVED


def add_derived(stats: ProfileStats, report: str, trace: Trace) -> None:
    """Compute REPORT (see :func:`is_derived`) from TRACE into STATS, or record why it has no data: nothing of
    the kind was traced, or the export holds its table in a schema nsight-core cannot read (the Trace's note)."""
    table, compute, sources = DERIVED[canonical(report)]
    rows = compute(trace)
    if table == "kernels":  # a graph launch is GPU work too: shown beside the kernels
        stats.graphs.extend(graph_summary(trace))
    unreadable = [trace.notes[source] for source in sources if source in trace.notes]
    if isinstance(rows, str):
        graphs = (" Its GPU work ran in CUDA graphs, traced as whole launches (see graphs; nsys records each node "
                  "as a kernel with --cuda-graph-trace=node)." if table == "kernels" and stats.graphs else "")
        stats.skipped[report] = (f"unreadable: {'; '.join(unreadable)}" if unreadable
                                 else f"no data: the capture {rows}{graphs}")
    elif table == "other":  # a report without a typed list: its rows by nsys' column names
        stats.other[report] = cast(list[dict[str, Any]], rows)
    else:
        getattr(stats, table).extend(rows)


Row = TypeVar("Row", KernelRow, ApiCallRow, MemoryTimeRow, MemorySizeRow, NvtxRangeRow, GraphRow)


def _rows(model: type[Row], frame: pl.DataFrame) -> list[Row]:
    """One model per report row (per name: a report is small whatever the trace's size)."""
    fields = set(model.model_fields)
    return [model(**row) for row in frame.select([c for c in frame.columns if c in fields]).to_dicts()]
