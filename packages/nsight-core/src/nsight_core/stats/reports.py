"""Names of the nsys stats reports this package understands, and their header variants.

nsys renamed its reports in 2023 (gpukernsum -> cuda_gpu_kern_sum, ...) and has changed column
headers between versions ("Time(%)" / "Time (%)", "Average" / "Avg (ns)"). Everything that depends on
a version lives here, so the parser and the models never see the difference.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_REPORTS: tuple[str, ...] = (
    "cuda_gpu_kern_sum",
    "cuda_gpu_mem_time_sum",
    "cuda_gpu_mem_size_sum",
    "cuda_api_sum",
    "nvtx_pushpop_sum",
)

# new name -> pre-2023 name of the same report
_OLD_NAMES: dict[str, str] = {
    "cuda_gpu_kern_sum": "gpukernsum",
    "cuda_gpu_mem_time_sum": "gpumemtimesum",
    "cuda_gpu_mem_size_sum": "gpumemsizesum",
    "cuda_api_sum": "cudaapisum",
    "nvtx_pushpop_sum": "nvtxppsum",
}
_NEW_NAMES: dict[str, str] = {old: new for new, old in _OLD_NAMES.items()}

# canonical report -> the ProfileStats list it fills
TABLE_OF_REPORT: dict[str, str] = {
    "cuda_gpu_kern_sum": "kernels",
    "cuda_api_sum": "api_calls",
    "cuda_gpu_mem_time_sum": "memory_time",
    "cuda_gpu_mem_size_sum": "memory_size",
    "nvtx_pushpop_sum": "nvtx_ranges",
}


def canonical(report: str) -> str:
    """The new-style name of a report (old names map to new ones; any other name is returned as is)."""
    return _NEW_NAMES.get(report, report)


def aliases(report: str) -> tuple[str, ...]:
    """All names nsys versions use for the same report, the new name first."""
    new = canonical(report)
    old = _OLD_NAMES.get(new)
    return (new, old) if old else (new,)


def table_of(report: str) -> str | None:
    """The typed table a report fills, or None for a report kept as a generic table."""
    return TABLE_OF_REPORT.get(canonical(report.split(":", 1)[0]))


@dataclass(frozen=True)
class Column:
    """A model field and whether nsys writes it as an integer."""

    field: str
    integer: bool = False


# Normalised header (lower case, no spaces) -> model field. Covers 2021-2024 nsys variants.
_HEADER_FIELDS: dict[str, Column] = {
    "time(%)": Column("time_pct"),
    "time%": Column("time_pct"),
    "totaltime(ns)": Column("total_time_ns", integer=True),
    "totaltime": Column("total_time_ns", integer=True),
    "instances": Column("instances", integer=True),
    "numcalls": Column("instances", integer=True),
    "calls": Column("instances", integer=True),
    "count": Column("instances", integer=True),
    "operations": Column("instances", integer=True),
    "avg(ns)": Column("avg_ns"),
    "average(ns)": Column("avg_ns"),
    "average": Column("avg_ns"),
    "avg": Column("avg_ns"),
    "med(ns)": Column("med_ns"),
    "median(ns)": Column("med_ns"),
    "median": Column("med_ns"),
    "med": Column("med_ns"),
    "min(ns)": Column("min_ns", integer=True),
    "minimum": Column("min_ns", integer=True),
    "min": Column("min_ns", integer=True),
    "max(ns)": Column("max_ns", integer=True),
    "maximum": Column("max_ns", integer=True),
    "max": Column("max_ns", integer=True),
    "stddev(ns)": Column("stddev_ns"),
    "stddev": Column("stddev_ns"),
    "total(mb)": Column("total_mb"),
    "total": Column("total_mb"),
    "avg(mb)": Column("avg_mb"),
    "average(mb)": Column("avg_mb"),
    "med(mb)": Column("med_mb"),
    "median(mb)": Column("med_mb"),
    "min(mb)": Column("min_mb"),
    "max(mb)": Column("max_mb"),
    "stddev(mb)": Column("stddev_mb"),
    "name": Column("name"),
    "range": Column("name"),
    "operation": Column("name"),
    "style": Column("style"),
}

# Sizes in old reports were in KiB ("Total (KiB)"); they are converted to MB.
_KIB_HEADERS = {"total(kib)": "total_mb", "avg(kib)": "avg_mb", "average(kib)": "avg_mb",
                "med(kib)": "med_mb", "median(kib)": "med_mb", "min(kib)": "min_mb",
                "max(kib)": "max_mb", "stddev(kib)": "stddev_mb"}
KIB_TO_MB = 1024 / 1_000_000


def header_field(header: str, size_report: bool) -> tuple[str, bool, float] | None:
    """Map one CSV header to (model field, is_integer, scale), or None when the column is unknown.

    ``size_report`` resolves the only real ambiguity: "Total"/"Avg" mean MB in a size report and
    nanoseconds elsewhere.
    """
    key = "".join(header.split()).lower()
    if key in _KIB_HEADERS:
        return _KIB_HEADERS[key], False, KIB_TO_MB
    column = _HEADER_FIELDS.get(key)
    if column is None:
        return None
    field = column.field
    if size_report and field in {"avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns", "total_time_ns"}:
        field = field.replace("_ns", "_mb").replace("total_time", "total")
        return field, False, 1.0
    return field, column.integer, 1.0
