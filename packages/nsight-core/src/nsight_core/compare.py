"""`nsight diff`: load two captures and compare them (:mod:`nsight_core.analysis.diff`). A trace or export gives events,
checked for completeness; recorded CSVs only per-name totals, and the comparison says what it could not compare."""

from __future__ import annotations

from pathlib import Path

from nsight_core.analysis.completeness import CaptureFacts, capture_facts, check_completeness
from nsight_core.analysis.diff import Side, TraceDiff, diff_sides, side_from_stats, side_from_trace
from nsight_core.errors import StatsError
from nsight_core.memory import check_comparison_memory
from nsight_core.stats.load import load_stats
from nsight_core.trace.export import REPORT_SUFFIXES, is_event_source
from nsight_core.trace.load import load_trace
from nsight_core.trace.streamed import is_streamed


def load_side(path: str | Path) -> Side:
    """One side of a comparison from PATH."""
    path = Path(path)
    if not path.exists() and (is_event_source(path) or not path.parent.is_dir()):
        raise StatsError(f"{path} does not exist: pass a .nsys-rep, a .sqlite or arrow-directory export, "
                         "or a directory of recorded CSVs.")
    if is_event_source(path):
        trace = load_trace(path)
        facts = capture_facts(path) if path.suffix in REPORT_SUFFIXES else CaptureFacts()
        # Before any event is read: never an OOM kill.
        check_comparison_memory(None if is_streamed(trace) else trace.event_bytes, path.name)
        return side_from_trace(str(path), trace, check_completeness(trace, facts))
    return side_from_stats(str(path), load_stats(path))


def diff(a: str | Path, b: str | Path) -> TraceDiff:
    """Capture B against capture A: step p50/p95, budget parts, kernels, NVTX ranges, summary, verdict, and the
    reasons the two are not comparable (step families, GPUs, completeness) where they are not."""
    return diff_sides(load_side(a), load_side(b))
