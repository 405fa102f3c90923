"""Plain-text tables of a capture's statistics, for terminals and logs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nsight_core.render.units import duration, nsys_megabytes
from nsight_core.stats.models import MemorySizeRow, ProfileStats, TimeRow

_TITLES = {
    "kernels": "CUDA GPU kernels",
    "api_calls": "CUDA API calls",
    "memory_time": "GPU memory operations (time)",
    "memory_size": "GPU memory operations (size)",
    "nvtx_ranges": "NVTX ranges",
}
_MAX_NAME = 80
_ns = duration
"""The name render/findings.py imports (until it calls :func:`nsight_core.render.units.duration`)."""


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == len(cells) - 1 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    ).rstrip()
    return [fmt(header), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)]


def _short(name: str) -> str:
    return name if len(name) <= _MAX_NAME else name[: _MAX_NAME - 3] + "..."


def _time_rows(rows: Sequence[TimeRow]) -> list[list[str]]:
    return [[f"{r.time_pct:.1f}", duration(r.total_time_ns), f"{r.instances:,}", duration(r.avg_ns),
             duration(r.med_ns), duration(r.min_ns), duration(r.max_ns), duration(r.stddev_ns), _short(r.name)]
            for r in rows]


def _size_rows(rows: Sequence[MemorySizeRow]) -> list[list[str]]:
    return [[nsys_megabytes(r.total_mb), f"{r.instances:,}", nsys_megabytes(r.avg_mb), nsys_megabytes(r.min_mb),
             nsys_megabytes(r.max_mb), _short(r.name)] for r in rows]


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
            lines += _table(["Total", "Count", "Avg", "Min", "Max", "Operation"], _size_rows(rows))
        else:
            lines += _table(time_header, _time_rows(rows))
    for report, rows in stats.other.items():
        lines += ["", f"== {report} ({len(rows)} rows)"]
        lines += _generic(rows) if rows else ["(no rows)"]
    if stats.skipped:
        lines += ["", "== Skipped reports"]
        lines += [f"{report}: {reason}" for report, reason in stats.skipped.items()]
    return "\n".join(lines).lstrip("\n") + "\n"
