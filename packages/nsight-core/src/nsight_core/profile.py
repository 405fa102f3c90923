"""One capture, everything the GPU Profile report shows about it.

A capture is exported ONCE and read as a Trace: the per-name tables are computed from its events, as are span, GPU
busy time, the trace summary, the diagnosis ("What to fix") and the verdict on whether the trace is complete; `nsys
stats` runs only for reports beyond the default five. Recorded CSV directories have no events, so their profile has
stats only and says so.

Every part reads the events in windows (lazy frames): a capture too large for the memory allowed is exported to
SQLite and scanned from Parquet copies on disk (trace/spill.py), the same code over the same windows, so the page
is the same whatever the memory.
"""

from __future__ import annotations

import logging
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import count, takewhile
from pathlib import Path

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.analyze import Analyzed, analyze_steps
from nsight_core.analysis.completeness import CaptureFacts, Completeness, capture_facts, check_completeness
from nsight_core.analysis.result import Analysis, withhold_savings
from nsight_core.analysis.step_events import StepDrawing, drawing_for
from nsight_core.analysis.summary import Tile, summary_tiles
from nsight_core.analysis.timeline import TraceSummary, summarize_trace
from nsight_core.errors import StatsError
from nsight_core.memory import check_streamed_summary_memory, check_summary_memory
from nsight_core.stats.load import load_stats, recorded_captures, stats_of_trace
from nsight_core.stats.models import ProfileStats
from nsight_core.stats.reports import DEFAULT_REPORTS
from nsight_core.trace.export import REPORT_SUFFIXES, is_event_source
from nsight_core.trace.load import load_trace
from nsight_core.trace.model import Trace
from nsight_core.trace.streamed import events, is_streamed

log = logging.getLogger("nsight")


class CaptureProfile(BaseModel):
    """The data of one report section: a capture's stats, its event-trace summary and notes."""

    title: str
    source: str = Field(description="The file or directory the profile was built from")
    stats: ProfileStats
    trace: TraceSummary | None = Field(default=None, description="None for recorded CSVs (no event trace)")
    analysis: Analysis | None = Field(default=None, description="Steps, budget and findings; None without events")
    completeness: Completeness | None = Field(default=None, description="Whether the trace holds all that ran; "
                                              "None without events")
    notes: list[str] = Field(default_factory=list, description="Plain-text lines shown below the charts")
    steps_drawn: StepDrawing | None = Field(default=None, description="The steps the page draws in full, with their "
                                            "events, and every step's budget; None without steps")

    @property
    def tiles(self) -> list[Tile]:
        """The summary tiles of this capture."""
        return summary_tiles(self.stats, self.trace)


def build_profile(
    path: str | Path,
    reports: Sequence[str] | None = DEFAULT_REPORTS,
    title: str | None = None,
    facts: CaptureFacts | None = None,
) -> CaptureProfile:
    """Profile of PATH: a .nsys-rep/.qdrep, its .sqlite or arrow export, or recorded CSVs (DIR or DIR/PREFIX).

    REPORTS: the nsys reports to show; None: the default ones of a trace, every one recorded of CSVs.

    FACTS: what is known of how the capture was made (nsys' output, versions); by default only what lies
    beside PATH (a leftover raw stream). The export, `nsys stats` and each stage log their progress (logger
    "nsight"), which the CLI shows on stderr.
    """
    path = Path(path)
    if not is_event_source(path):
        return CaptureProfile(title=title or path.name, source=str(path), stats=load_stats(path, reports))
    trace = load_trace(path)
    if facts is None:
        facts = capture_facts(path) if path.suffix in REPORT_SUFFIXES else CaptureFacts()
    # Before any event is read: never the task's OOM kill.
    if is_streamed(trace):
        check_streamed_summary_memory(path.name)
    else:
        check_summary_memory(trace.event_bytes, path.name)
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


GENERATED_NAME = re.compile(r"nsight-[0-9a-f]{8}")
"""The name a Session without one gives itself, and so the file of its whole-process capture (`nsight run`)."""


def capture_title(path: Path, trace: Trace) -> str:
    """A capture's section title: its file's name, which is its region's (or a named run's); for the capture of an
    unnamed run, whose file is named by a random id (nsight-cb27362c), the command it recorded instead.

    The command is in the export when nsys wrote it there (its SQLite exports: META_DATA_CAPTURE); else the title
    is the program, by the process with the most CPU events (NVTX ranges, CUDA and OS calls), named by its main
    thread: nsys records a process's name when it starts, which for `nsight run` is the shell that then execs the
    command, while the thread carries the command's own name (when nsys read it after the exec: otherwise both say
    `sh`, and the title says only the pid)."""
    if not GENERATED_NAME.fullmatch(path.stem):
        return path.stem
    command = recorded_command(trace.meta)
    if command:
        text = shlex.join(command)
        return text if len(text) <= MAX_TITLE else text[:MAX_TITLE - 1] + "…"
    frames = events(trace)  # streamed queries: a large capture's frames are never read whole for its title
    threads = pl.concat([frame.select("thread") for frame in (frames.nvtx, frames.cuda_api, frames.osrt)])
    by_pid = (threads.group_by(((pl.col("thread") // (1 << 24)) % (1 << 24)).alias("pid")).agg(pl.len())
              .sort(["len", "pid"], descending=[True, False]).head(1).collect(engine="streaming"))
    if not by_pid.height:
        return f"whole-process capture {path.stem}"
    pid = by_pid["pid"].item()
    main = trace.threads.filter((pl.col("pid") == pid) & (pl.col("tid") == pid))["name"].to_list()
    named = trace.processes.filter(pl.col("pid") == pid)["name"].to_list()
    program = next((name for name in (*main, *named) if name and Path(name).name not in NOT_PROGRAMS), None)
    return f"{program} (whole process, pid {pid})" if program else f"whole-process capture, pid {pid}"


NOT_PROGRAMS = frozenset({"sh", "bash", "dash", "nsys-launcher"})
"""Names nsys may record for the command's process before it execs the command: `nsight run`'s own shell, and
nsys' own launcher before that (seen in a fresh-clone CI run, 2026-12-04): no program's name."""


MAX_TITLE = 100


def recorded_command(meta: Mapping[str, str]) -> list[str]:
    """The command a capture recorded, from the export's META (empty when it does not say): without the shell that
    `nsight run` starts it with (``/bin/sh -c SCRIPT nsight PENDING FD FD CMD...``, nsys.py)."""
    arguments = takewhile(lambda key: key in meta, (f"PROCESS_0:ARGUMENT_{index}" for index in count()))
    argv = [meta.get("PROCESS_0:COMMAND", ""), *(meta[key] for key in arguments)]
    if argv[:2] == ["/bin/sh", "-c"] and argv[3:4] == ["nsight"]:
        argv = argv[7:]
    return argv if argv and argv[0] else []


def diagnosed(profile: CaptureProfile, analysis: Callable[[], Analyzed]) -> CaptureProfile:
    """PROFILE with the ANALYSIS; should it fail, a note says so and the rest of the page stays.

    The diagnosis is the newest and most heuristic part of the page: a capture shape it does not expect
    must cost the "What to fix" section, not the user's statistics (profiling never breaks the job).
    """
    try:
        found = analysis().analysis
        if profile.completeness is not None:
            found = withhold_savings(found, profile.completeness)
        return profile.model_copy(update={"analysis": found})
    except Exception as error:  # see the docstring: one part fails, not the page
        log.warning("could not diagnose %s (%s: %s); the page shows its statistics without 'What to fix'",
                    profile.source, type(error).__name__, error)
        return profile.model_copy(update={"notes": [*profile.notes, f"What to fix: the analysis failed "
                                                    f"({type(error).__name__}: {error})"]})


def with_steps_drawn(profile: CaptureProfile, draw: Callable[[Analysis], StepDrawing | None]) -> CaptureProfile:
    """PROFILE with the steps its page draws in full, as DRAW finds them for its analysis (:func:`drawing_for`);
    should that fail, a note says so and the rest of the page stays (as for the analysis:
    :func:`diagnosed`)."""
    if profile.analysis is None:
        return profile
    try:
        return profile.model_copy(update={"steps_drawn": draw(profile.analysis)})
    except Exception as error:  # see the docstring
        log.warning("could not select %s's steps to draw (%s: %s)", profile.source, type(error).__name__, error)
        return profile.model_copy(update={"notes": [*profile.notes, f"Step view: the selection of its steps failed "
                                                    f"({type(error).__name__}: {error})"]})


def capture_paths(path: str | Path) -> list[Path]:
    """The captures PATH names: itself, or each recorded prefix of a directory holding several.

    A directory of recorded CSVs from several regions (`training_*.csv`, `evaluation_*.csv`) becomes
    one `DIR/PREFIX` per region, so one command reports them all.
    """
    path = Path(path)
    if not path.is_dir():
        return [path]
    prefixes = sorted(recorded_captures(path))
    if not prefixes and any(path.glob("*.nsys-rep")):
        raise StatsError(f"{path} holds no recorded CSVs; pass its captures instead: {path}/*.nsys-rep")
    if len(prefixes) <= 1:
        return [path]
    return [path / prefix for prefix in prefixes]
