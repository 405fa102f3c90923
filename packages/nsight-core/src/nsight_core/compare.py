"""`nsight diff`: load two captures (traces, exports or recorded CSVs) and compare them.

The only I/O of the comparison: everything after loading is :mod:`nsight_core.analysis.diff`.
A trace or export gives events (steps, budget, GPU busy); a directory of recorded CSVs gives only
the per-name totals, and the comparison says what it could not compare.
"""

from __future__ import annotations

from pathlib import Path

from nsight_core.analysis.diff import Side, TraceDiff, diff_sides, side_from_stats, side_from_trace
from nsight_core.errors import StatsError
from nsight_core.stats.load import load_stats
from nsight_core.trace.export import is_event_source
from nsight_core.trace.load import load_trace


def load_side(path: str | Path) -> Side:
    """One side of a comparison from PATH."""
    path = Path(path)
    if not path.exists() and (is_event_source(path) or not path.parent.is_dir()):
        raise StatsError(f"{path} does not exist: pass a .nsys-rep, a .sqlite or arrow-directory export, "
                         "or a directory of recorded CSVs.")
    if is_event_source(path):
        return side_from_trace(str(path), load_trace(path))
    return side_from_stats(str(path), load_stats(path))


def diff(a: str | Path, b: str | Path) -> TraceDiff:
    """Capture B against capture A: step p50/p95, budget parts, kernels, NVTX ranges, summary, verdict."""
    return diff_sides(load_side(a), load_side(b))
