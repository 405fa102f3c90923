"""One capture, everything the GPU Profile report shows about it, from its events: exported once and read as a Trace
(`nsys stats` runs only for reports beyond the default ones), scanned from Parquet copies on disk (trace/spill.py) where
too large for the memory allowed, so the page is the same whatever the memory. Recorded CSVs have stats only."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nsight_core.analysis.analyze import Analyzed, analyze_steps
from nsight_core.analysis.capture_profile import CaptureProfile
from nsight_core.analysis.completeness import CaptureFacts, capture_facts, check_completeness
from nsight_core.analysis.result import Analysis, withhold_savings
from nsight_core.analysis.step_drawing import StepDrawing, drawing_for
from nsight_core.analysis.trace_summary import summarize_trace
from nsight_core.errors import StatsError
from nsight_core.memory import check_summary_memory
from nsight_core.stats.load import load_stats, recorded_captures, stats_of_trace
from nsight_core.stats.reports import DEFAULT_REPORTS
from nsight_core.titles import capture_title
from nsight_core.trace.export import REPORT_SUFFIXES, is_event_source
from nsight_core.trace.load import load_trace
from nsight_core.trace.streamed import events, is_streamed

log = logging.getLogger("nsight")


def build_profile(path: str | Path, reports: Sequence[str] | None = DEFAULT_REPORTS, title: str | None = None,
                  facts: CaptureFacts | None = None) -> CaptureProfile:
    """Profile of PATH: a .nsys-rep/.qdrep, its .sqlite or arrow export, or recorded CSVs (DIR or DIR/PREFIX). REPORTS:
    the nsys reports to show (None: the default ones of a trace, every one recorded of CSVs). FACTS: how the capture was
    made (nsys' output, versions); by default what lies beside PATH. Each stage logs to "nsight"."""
    path = Path(path)
    if not is_event_source(path):
        return CaptureProfile(title=title or path.name, source=str(path), stats=load_stats(path, reports))
    trace = load_trace(path)
    if facts is None:
        facts = capture_facts(path) if path.suffix in REPORT_SUFFIXES else CaptureFacts()
    # Before any event is read: never the task's OOM kill.
    check_summary_memory(None if is_streamed(trace) else trace.event_bytes, path.name)
    started = time.monotonic()
    log.info("%s: statistics, summary, completeness and What to fix%s", path.name,
             " (scanned from disk in windows)" if is_streamed(trace) else "")
    # The analysis runs beside the reports, summary and completeness (Polars computes without the GIL).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsight-analysis") as pool:
        analyzed = pool.submit(analyze_steps, trace)
        profile = CaptureProfile(title=title or capture_title(path, trace), source=str(path),
                                 stats=stats_of_trace(trace, reports or DEFAULT_REPORTS),
                                 trace=summarize_trace(trace), completeness=check_completeness(trace, facts))
        log.info("%s: statistics, summary and completeness done (%.0f s in)", path.name, time.monotonic() - started)
        profile = with_steps_drawn(diagnosed(profile, analyzed.result),
                                   lambda analysis: drawing_for(events(trace), analysis, analyzed.result()))
    log.info("%s: What to fix done (%.0f s in)", path.name, time.monotonic() - started)
    return profile


def diagnosed(profile: CaptureProfile, analysis: Callable[[], Analyzed]) -> CaptureProfile:
    """PROFILE with the ANALYSIS; should it fail (What to fix is a section's newest, most heuristic part: a capture
    shape it does not expect must cost that part of the page, never the statistics), a note says so."""
    try:
        found = analysis().analysis
        if profile.completeness is not None:
            found = withhold_savings(found, profile.completeness)
        return profile.model_copy(update={"analysis": found})
    except Exception as error:  # one part fails, not the page
        log.warning("could not diagnose %s (%s: %s); the page shows its statistics without 'What to fix'",
                    profile.source, type(error).__name__, error)
        return profile.model_copy(update={"notes": [*profile.notes, f"What to fix: the analysis failed "
                                                    f"({type(error).__name__}: {error})"]})


def with_steps_drawn(profile: CaptureProfile, draw: Callable[[Analysis], StepDrawing | None]) -> CaptureProfile:
    """PROFILE with the steps its page draws in full, as DRAW finds them for its analysis (:func:`drawing_for`);
    should that fail, a note says so and the rest of the page stays."""
    if profile.analysis is None:
        return profile
    try:
        return profile.model_copy(update={"steps_drawn": draw(profile.analysis)})
    except Exception as error:  # one part fails, not the page
        log.warning("could not select %s's steps to draw (%s: %s)", profile.source, type(error).__name__, error)
        return profile.model_copy(update={"notes": [*profile.notes, f"Step view: the selection of its steps failed "
                                                    f"({type(error).__name__}: {error})"]})


def capture_paths(path: str | Path) -> list[Path]:
    """The captures PATH names: itself, or each recorded prefix (`DIR/training`, ...) of a folder of regions' CSVs."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    prefixes = sorted(recorded_captures(path))
    if not prefixes and any(path.glob("*.nsys-rep")):
        raise StatsError(f"{path} holds no recorded CSVs; pass its captures instead: {path}/*.nsys-rep")
    return [path / prefix for prefix in prefixes] if len(prefixes) > 1 else [path]
