"""Names of the nsys stats reports this package understands, and their header variants.

nsys renamed its reports in 2023 (gpukernsum -> cuda_gpu_kern_sum, ...) and has changed column headers between
versions ("Time(%)" / "Time (%)"): everything that depends on a version lives here, not in the parser or the models."""

from __future__ import annotations

_REPORTS: dict[str, tuple[str, str]] = {
    "cuda_gpu_kern_sum": ("gpukernsum", "kernels"), "cuda_gpu_mem_time_sum": ("gpumemtimesum", "memory_time"),
    "cuda_gpu_mem_size_sum": ("gpumemsizesum", "memory_size"), "cuda_api_sum": ("cudaapisum", "api_calls"),
    "nvtx_pushpop_sum": ("nvtxppsum", "nvtx_ranges")}
"""The reports with a typed table, the default ones in their order: new name -> the name before 2023 of the same
report, the ProfileStats list it fills."""
DEFAULT_REPORTS: tuple[str, ...] = tuple(_REPORTS)
_NEW_NAMES: dict[str, str] = {old: new for new, (old, _) in _REPORTS.items()}


def canonical(report: str) -> str:
    """The new-style name of a report (old names map to new ones; any other name is returned as is)."""
    return _NEW_NAMES.get(report, report)


def aliases(report: str) -> tuple[str, ...]:
    """All names nsys versions use for the same report, the new name first."""
    new = canonical(report)
    return (new, _REPORTS[new][0]) if new in _REPORTS else (new,)


def table_of(report: str) -> str | None:
    """The typed table a report fills, or None for a report kept as a generic table."""
    known = _REPORTS.get(canonical(report.split(":", 1)[0]))
    return known[1] if known else None


_HEADERS: dict[str, tuple[str, ...]] = {
    "time_pct": ("time(%)", "time%"), "total_time_ns": ("totaltime(ns)", "totaltime"),
    "instances": ("instances", "numcalls", "calls", "count", "operations"),
    "avg_ns": ("avg(ns)", "average(ns)", "average", "avg"), "med_ns": ("med(ns)", "median(ns)", "median", "med"),
    "min_ns": ("min(ns)", "minimum", "min"), "max_ns": ("max(ns)", "maximum", "max"),
    "stddev_ns": ("stddev(ns)", "stddev"), "total_mb": ("total(mb)", "total"), "avg_mb": ("avg(mb)", "average(mb)"),
    "med_mb": ("med(mb)", "median(mb)"), "min_mb": ("min(mb)",), "max_mb": ("max(mb)",), "stddev_mb": ("stddev(mb)",),
    "name": ("name", "range", "operation"), "style": ("style",)}
"""Model field -> the headers nsys versions 2021-2024 write for it, normalised (lower case, no spaces). Sizes in old
reports were in KiB ("Total (KiB)": the (mb) header's words), converted to MB."""
NAME_HEADERS = _HEADERS["name"]
_FIELD_OF = {header: field for field, headers in _HEADERS.items() for header in headers}
_INTEGERS = {"total_time_ns", "instances", "min_ns", "max_ns"}
"""The fields nsys writes as integers."""
KIB_TO_MB = 1024 / 1_000_000


def header_field(header: str, size_report: bool) -> tuple[str, bool, float] | None:
    """Map one CSV header to (model field, is_integer, scale), or None when the column is unknown. ``size_report``
    resolves the only real ambiguity: "Total"/"Avg" mean MB in a size report and nanoseconds elsewhere."""
    key = "".join(header.split()).lower()
    if key.endswith("(kib)") and (field := _FIELD_OF.get(key.replace("(kib)", "(mb)"))):
        return field, False, KIB_TO_MB
    if (field := _FIELD_OF.get(key)) is None:
        return None
    if size_report and field in {"avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns", "total_time_ns"}:
        return field.replace("_ns", "_mb").replace("total_time", "total"), False, 1.0
    return field, field in _INTEGERS, 1.0
