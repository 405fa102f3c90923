"""`nsight diff`: load two captures (traces, exports or recorded CSVs) and compare them.

The only I/O of the comparison: everything after loading is :mod:`nsight_core.analysis.diff`.
A trace or export gives events (steps, budget, GPU busy, the GPUs it ran on) and is checked for
completeness (with what lies beside a .nsys-rep: a leftover raw stream); a directory of recorded CSVs
gives only the per-name totals, and the comparison says what it could not compare. A capture too large to
analyse whole in the memory allowed is compared on what streams: its totals, GPU busy time and every step's time.
"""

from __future__ import annotations

import logging
from pathlib import Path

from nsight_core.analysis.completeness import CaptureFacts, Completeness, capture_facts, check_completeness
from nsight_core.analysis.diff import Side, TraceDiff, diff_sides, side_from_events, side_from_stats, side_from_trace
from nsight_core.analysis.intervals import WINDOW_ROWS
from nsight_core.analysis.whole_budget import StepTooLarge, whole_capture_budget
from nsight_core.analysis.whole_findings import whole_capture_analysis
from nsight_core.errors import NotEnoughMemoryError, StatsError
from nsight_core.memory import allowed_memory, check_comparison_memory, summary_bytes
from nsight_core.profile import chosen_steps, every_step_of, first_part, step_rows
from nsight_core.render.units import size
from nsight_core.stats.load import load_stats
from nsight_core.trace.export import REPORT_SUFFIXES, is_event_source
from nsight_core.trace.load import load_trace
from nsight_core.trace.model import Trace
from nsight_core.trace.streamed import events, is_streamed

log = logging.getLogger("nsight")


def load_side(path: str | Path) -> Side:
    """One side of a comparison from PATH."""
    path = Path(path)
    if not path.exists() and (is_event_source(path) or not path.parent.is_dir()):
        raise StatsError(f"{path} does not exist: pass a .nsys-rep, a .sqlite or arrow-directory export, "
                         "or a directory of recorded CSVs.")
    if is_event_source(path):
        trace = load_trace(path)
        facts = capture_facts(path) if path.suffix in REPORT_SUFFIXES else CaptureFacts()
        try:
            check_comparison_memory(trace.event_bytes, path.name)  # before any frame is read whole: never an OOM kill
        except NotEnoughMemoryError:
            if not is_streamed(trace):
                raise
            check_comparison_memory(None, path.name)
            # Not even the first steps, which pick the family, fit; or its steps are not known for all of it: a gate on
            # another number would pass a slower step.
            part = first_part(trace)
            if part is None or (side := streamed_side(path, trace, part, check_completeness(trace, facts))) is None:
                raise
            allowed, source = allowed_memory()
            log.info("%s: read whole, it needs about %s of memory and %s allows %s: it is compared on its totals and "
                     "every step's time and budget instead, streamed from disk", path.name,
                     size(summary_bytes(trace.event_bytes)), source, size(allowed or 0))
            return side
        return side_from_trace(str(path), trace, check_completeness(trace, facts))
    return side_from_stats(str(path), load_stats(path))


def streamed_side(path: Path, trace: Trace, part: Trace, completeness: Completeness) -> Side | None:
    """The side of streamed TRACE (of PATH) too large to analyse whole: its totals and GPU busy time streamed, and
    every step's time of the family its first PART that fits chose (:func:`first_part`, :func:`every_step_of`), as
    its report's note states them, with every step's budget and window (the analysis of its report,
    :func:`whole_capture_analysis`); where the part found no steps, the budget of the capture as one step. None where
    the part has steps whose times over the whole capture are not known (NVTX ranges that overlap somewhere, or fewer
    than two of its steps found)."""
    chosen = chosen_steps(trace, part)[0]
    del part  # its frames were read whole: not alive while the capture is streamed
    frames, most = events(trace), step_rows(trace)
    every = every_step_of(trace, chosen, most)
    if every is None:
        return None
    try:
        budget = whole_capture_budget(frames, every, step_rows=most, held_rows=most)
    except StepTooLarge as error:  # its steps' times (if any) and totals are known: compared on those
        log.warning("%s: compared %s, not its budget (%s)", path.name,
                    "on its totals" if every.pieces is not None else "on every step's time", error)
        budget = None
    analysis = None if budget is None else whole_capture_analysis(trace, every, budget, full=False)
    return side_from_events(str(path), frames, trace.gpus, every.stats, completeness, WINDOW_ROWS, analysis)


def diff(a: str | Path, b: str | Path) -> TraceDiff:
    """Capture B against capture A: step p50/p95, budget parts, kernels, NVTX ranges, summary, verdict, and the
    reasons the two are not comparable (step families, GPUs, completeness) where they are not."""
    return diff_sides(load_side(a), load_side(b))
