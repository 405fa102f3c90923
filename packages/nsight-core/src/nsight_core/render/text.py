"""Plain-text tables of a capture's statistics, for terminals and logs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nsight_core.units import duration, nsys_megabytes

if TYPE_CHECKING:  # the CLI reads DEFAULT_LIMIT before it loads pydantic
    from nsight_core.stats.models import ProfileStats

_TITLES = {"kernels": "CUDA GPU kernels", "graphs": "CUDA graphs (whole launches on the GPU)",
           "api_calls": "CUDA API calls", "memory_time": "GPU memory operations (time)",
           "memory_size": "GPU memory operations (size)", "nvtx_ranges": "NVTX ranges"}
_MAX_NAME = 80


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == len(cells) - 1 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    ).rstrip()
    return [fmt(header), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)]


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(name: str) -> str:
    """NAME with its control characters escaped (``\\x1b``, ``\\n``): an NVTX or kernel name is the program's
    data, and raw it could move the cursor, recolour or clear the reader's terminal, or break a table's line."""
    return _CONTROL.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), name)


def _short(name: str) -> str:
    name = printable(name)
    return name if len(name) <= _MAX_NAME else name[: _MAX_NAME - 3] + "..."


DEFAULT_LIMIT = 50
"""Rows per table `nsight stats` prints unless told (--limit): a long capture has thousands of kernel names."""


def render_text(stats: ProfileStats, limit: int | None = DEFAULT_LIMIT) -> str:
    """Every table of STATS, each cut to its first LIMIT rows (None: all; nsys' order puts those that matter most first)
    with a line saying how many were cut, then the skipped reports with their reasons."""
    lines: list[str] = []
    for table, title in _TITLES.items():
        rows = getattr(stats, table)
        if not rows:
            continue
        lines += ["", f"== {title} ({len(rows):,} rows)"]
        shown = rows[:limit]
        if table == "memory_size":
            lines += _table(["Total", "Count", "Avg", "Min", "Max", "Operation"], [
                [nsys_megabytes(r.total_mb), f"{r.instances:,}", nsys_megabytes(r.avg_mb), nsys_megabytes(r.min_mb),
                 nsys_megabytes(r.max_mb), _short(r.name)] for r in shown])
        else:
            lines += _table(["Time %", "Total", "Count", "Avg", "Med", "Min", "Max", "StdDev", "Name"], [
                [f"{r.time_pct:.1f}", duration(r.total_time_ns), f"{r.instances:,}", duration(r.avg_ns),
                 duration(r.med_ns), duration(r.min_ns), duration(r.max_ns), duration(r.stddev_ns), _short(r.name)]
                for r in shown])
        lines += _cut(len(rows), len(shown))
    for report, rows in stats.other.items():
        lines += ["", f"== {report} ({len(rows):,} rows)"]
        header = list(rows[0]) if rows else []
        lines += _table(header, [["" if row[h] is None else str(row[h]) for h in header] for row in rows[:limit]]) \
            + _cut(len(rows), len(rows[:limit])) if rows else ["(no rows)"]
    if stats.skipped:
        lines += ["", "== Skipped reports", *(f"{report}: {reason}" for report, reason in stats.skipped.items())]
    if stats.notes:
        lines += ["", "== Notes on the export", *stats.notes]
    return "\n".join(lines).lstrip("\n") + "\n"


def _cut(total: int, shown: int) -> list[str]:
    """The line under a cut table: how many rows it left out, and how to see them."""
    if shown == total:
        return []
    cut = total - shown
    return [f"... {cut:,} more row{'s' if cut != 1 else ''} not shown (the first {shown:,} of {total:,}; --limit N "
            "shows N, --limit 0 all, --json every row)"]
