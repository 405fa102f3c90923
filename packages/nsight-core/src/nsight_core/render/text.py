"""Plain-text tables of a capture's statistics, for terminals and logs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nsight_core.stats.models import MemorySizeRow, ProfileStats, TimeRow

_TITLES = {
    "kernels": "CUDA GPU kernels",
    "api_calls": "CUDA API calls",
    "memory_time": "GPU memory operations (time)",
    "memory_size": "GPU memory operations (size)",
    "nvtx_ranges": "NVTX ranges",
}
_MAX_NAME = 80


def _ns(value: float | None) -> str:
    """A duration in the unit a person reads fastest, keeping three significant digits or more."""
    if value is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:,.3f} {unit}"
    return f"{value:,.0f} ns"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == len(cells) - 1 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    ).rstrip()
    return [fmt(header), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)]


def _short(name: str) -> str:
    return name if len(name) <= _MAX_NAME else name[: _MAX_NAME - 3] + "..."


def _time_rows(rows: Sequence[TimeRow]) -> list[list[str]]:
    return [[f"{r.time_pct:.1f}", _ns(r.total_time_ns), f"{r.instances:,}", _ns(r.avg_ns), _ns(r.med_ns),
             _ns(r.min_ns), _ns(r.max_ns), _ns(r.stddev_ns), _short(r.name)] for r in rows]


def _size_rows(rows: Sequence[MemorySizeRow]) -> list[list[str]]:
    return [[f"{r.total_mb:,.3f}", f"{r.instances:,}", f"{r.avg_mb:,.3f}", f"{r.min_mb:,.3f}",
             f"{r.max_mb:,.3f}", _short(r.name)] for r in rows]


def _generic(rows: list[dict[str, Any]]) -> list[str]:
    header = list(rows[0])
    return _table(header, [["" if row[h] is None else str(row[h]) for h in header] for row in rows])


def render_text(stats: ProfileStats) -> str:
    """Every table of STATS, then the skipped reports with their reasons."""
    lines: list[str] = []
    time_header = ["Time %", "Total", "Count", "Avg", "Med", "Min", "Max", "StdDev", "Name"]
    for table, title in _TITLES.items():
        rows = getattr(stats, table)
        if not rows:
            continue
        lines += ["", f"== {title} ({len(rows)} rows)"]
        if table == "memory_size":
            lines += _table(["Total MB", "Count", "Avg MB", "Min MB", "Max MB", "Operation"], _size_rows(rows))
        else:
            lines += _table(time_header, _time_rows(rows))
    for report, rows in stats.other.items():
        lines += ["", f"== {report} ({len(rows)} rows)"]
        lines += _generic(rows) if rows else ["(no rows)"]
    if stats.skipped:
        lines += ["", "== Skipped reports"]
        lines += [f"{report}: {reason}" for report, reason in stats.skipped.items()]
    return "\n".join(lines).lstrip("\n") + "\n"
