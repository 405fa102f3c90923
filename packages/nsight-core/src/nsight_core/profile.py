"""One capture, everything the GPU Profile report shows about it.

A capture is exported ONCE (an arrow directory) and read as a Trace: the per-name tables are computed
from its events, as are span, GPU busy time, timeline, the diagnosis ("What to fix") and the verdict
on whether the trace is complete; `nsys stats` runs only for reports beyond the default five. Recorded
CSV directories have no events, so their profile has stats only and says so.

A large capture is exported to SQLite and streamed from Parquet copies (trace/spill.py): its statistics, summary
and completeness run in bounded memory whatever its size. Its diagnosis reads whole frames: where those would not
fit the memory allowed, it reads the capture's first steps that fit, and a note says so (:func:`first_part`).
"""

from __future__ import annotations

import functools
import logging
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import count, takewhile
from pathlib import Path
from typing import NamedTuple

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.analyze import Analysis, Analyzed, analyze_steps, withhold_savings
from nsight_core.analysis.completeness import CaptureFacts, Completeness, capture_facts, check_completeness
from nsight_core.analysis.footprint import capture_window
from nsight_core.analysis.intervals import WINDOW_ROWS, first_share_end
from nsight_core.analysis.step_events import StepDrawing, drawing_for, streamed_drawing
from nsight_core.analysis.steps import StepStats, find_steps
from nsight_core.analysis.summary import Tile, summary_tiles
from nsight_core.analysis.timeline import TraceSummary, summarize_trace
from nsight_core.analysis.whole_budget import WholeBudget, whole_capture_budget
from nsight_core.analysis.whole_findings import whole_capture_analysis
from nsight_core.analysis.whole_steps import EveryStep, capture_as_step, every_step
from nsight_core.errors import NotEnoughMemoryError, StatsError
from nsight_core.memory import (
    affordable_event_bytes,
    allowed_memory,
    check_streamed_summary_memory,
    check_summary_memory,
    summary_bytes,
)
from nsight_core.render.units import duration, size
from nsight_core.stats.load import load_stats, recorded_captures, stats_of_trace
from nsight_core.stats.models import ProfileStats
from nsight_core.stats.reports import DEFAULT_REPORTS
from nsight_core.trace.export import REPORT_SUFFIXES, is_event_source
from nsight_core.trace.head import head
from nsight_core.trace.load import load_trace
from nsight_core.trace.model import KERNEL_COLUMNS, Trace
from nsight_core.trace.spill import SpilledTables
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
    whole_steps: StepStats | None = Field(default=None, description="Of a capture whose 'What to fix' covers its first "
                                          "steps only: the statistics of all its steps of the same family, streamed; "
                                          "None otherwise")

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
    beside PATH (a leftover raw stream). The export and `nsys stats` log their progress (logger "nsight"),
    which the CLI shows on stderr.
    """
    path = Path(path)
    if not is_event_source(path):
        return CaptureProfile(title=title or path.name, source=str(path), stats=load_stats(path, reports))
    trace = load_trace(path)
    if facts is None:
        facts = capture_facts(path) if path.suffix in REPORT_SUFFIXES else CaptureFacts()
    try:
        check_summary_memory(trace.event_bytes, path.name)  # before any event is read: never the task's OOM kill
    except NotEnoughMemoryError:
        if not is_streamed(trace):
            raise
        check_streamed_summary_memory(path.name)
        return streamed_profile(path, trace, reports or DEFAULT_REPORTS, title, facts)
    # The analysis runs beside the reports, summary and completeness (Polars computes without the GIL), on
    # frames read first: two threads must not both build one (a Python without cached_property's lock would).
    for frame in ANALYSIS_FRAMES:
        getattr(trace, frame)
    for frame in ("graphs", "threads"):  # what the step view reads beyond them, before it runs beside the analysis
        getattr(trace, frame)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsight-analysis") as pool:
        analyzed = pool.submit(analyze_steps, trace)
        profile = CaptureProfile(title=title or capture_title(path, trace), source=str(path),
                                 stats=stats_of_trace(trace, reports or DEFAULT_REPORTS),
                                 trace=summarize_trace(trace), completeness=check_completeness(trace, facts))
        return with_steps_drawn(diagnosed(profile, analyzed.result),
                                lambda analysis: drawing_for(trace, analysis, analyzed.result()))


def streamed_profile(path: Path, trace: Trace, reports: Sequence[str], title: str | None,
                     facts: CaptureFacts) -> CaptureProfile:
    """The profile of a streamed capture whose frames would not fit read whole: statistics, summary (tiles,
    timeline) and completeness, each streamed from the Parquet copies in bounded memory; "What to fix" over every
    step (NVTX ranges or kernel periods), or the capture as one step where it has none (analysis/whole_findings.py),
    else (a pass failed) from the capture's first part that fits (:func:`first_part`), which chooses the step family
    in any case (:func:`chosen_steps`); a note says what covers what (which `nsight stats` prints as well). Each
    stage logs its progress (a capture of gigabytes takes minutes)."""
    started, (allowed, source) = time.monotonic(), allowed_memory()
    whole = f"the whole capture's analysis reads whole frames (about {size(summary_bytes(trace.event_bytes))}) and " \
            f"{source} allows {size(allowed or 0)}"
    log.info("%s is streamed from disk: %s", path.name, whole)
    stats, completeness = stats_of_trace(trace, reports), check_completeness(trace, facts)
    profile = CaptureProfile(title=title or capture_title(path, trace), source=str(path), stats=stats,
                             trace=summarize_trace(trace), completeness=completeness)
    log.info("statistics, summary and completeness done (%.0f s in)", time.monotonic() - started)
    part = first_part(trace)
    if part is None:
        note = f"No 'What to fix' for a capture this large: {whole}, not even for its first steps; the statistics, " \
               "summary and completeness were streamed from disk."
    elif part is trace:  # all of it fits after all (the memory allowed grew): read whole
        parts = functools.cache(lambda: analyze_steps(trace))
        return with_steps_drawn(diagnosed(profile, parts), lambda analysis: drawing_for(trace, analysis, parts()))
    else:
        # The first steps that fit choose the step family (their NVTX ranges and kernels alone are read, or all the
        # capture's NVTX ranges where they hold none), or find none; every step of it (or the capture as one step) is
        # then analysed streamed, or, where that cannot be (a pass failed, a step too large to read at once), the
        # first steps are analysed read whole. Their frames are not alive while every step is streamed (read again
        # should it fail).
        chosen, first_steps, from_all = chosen_steps(trace, part)
        first_tables, part = part.tables, None
        found = _every_step(path, trace, chosen, started)
        every = found.every.stats if found.every and found.every.stats.family else None
        first = _first_steps(first_steps, profile.trace.span_ns if profile.trace else 0)
        if found.analysis is not None and found.budget is not None and found.every is not None:
            windows, budget = found.every.drawn, found.budget
            profile = with_steps_drawn(
                profile.model_copy(update={"analysis": withhold_savings(found.analysis, completeness)}),
                lambda analysis: streamed_drawing(events(trace), analysis, windows, budget))
            chosen_by = ("all its NVTX ranges, which fit read whole (its first part that fits has no NVTX steps)"
                         if from_all else f"its first {first}, which fit read whole")
            covers = (f"all {found.analysis.budget.steps:,} steady steps" if found.every.pieces is None else
                      "all of it as one step (its first part that fits has no steps)")
            note = (f"What to fix covers {covers}, streamed from disk as the statistics, summary and completeness "
                    f"are: {whole}." + (f" The step family was chosen by {chosen_by}." if found.every.pieces is None
                                        else ""))
        else:
            del found  # not alive while the first part is analysed
            first_part_trace = Trace(first_tables)
            parts = functools.cache(lambda: analyze_steps(first_part_trace))
            profile = with_steps_drawn(diagnosed(profile, parts),
                                       lambda analysis: drawing_for(first_part_trace, analysis, parts()))
            if profile.analysis is None:
                return profile
            note = (f"What to fix covers its first {first}: {whole}. The statistics, summary"
                    f"{', step times' if every else ''} and completeness cover all of it, streamed from disk."
                    f"{_steps_compared(every, profile.analysis.steps)}")
            profile = profile.model_copy(update={"whole_steps": every})
    stats.notes.append(note)  # what `nsight stats` prints
    profile.notes.append(note)  # what the page shows
    return profile


def chosen_steps(trace: Trace, part: Trace) -> tuple[StepStats, pl.DataFrame, bool]:
    """The steps of streamed TRACE as its first PART that fits chooses them (:func:`find_steps`: their statistics), the
    part's steps (a row each), and whether the statistics come from all the capture's NVTX ranges instead: where the
    part holds no NVTX step family (a long setup before the loop: model loading, compilation, autotuning) and those
    ranges fit the memory allowed, read alone (every step is then analysed, streamed, where the part alone would give
    none)."""
    chosen, steps = find_steps(part.nvtx, part.kernels)
    affordable = affordable_event_bytes()
    if chosen.source == "nvtx" or affordable is None or trace.tables.arrow_bytes(["NVTX_EVENTS"]) > affordable:
        return chosen, steps, False
    every = find_steps(Trace(trace.tables).nvtx, part.kernels.clear())[0]
    return (every, steps, True) if every.source == "nvtx" else (chosen, steps, False)


class _Every(NamedTuple):
    """What a streamed capture's passes over every step found (:func:`_every_step`)."""

    every: EveryStep | None
    budget: WholeBudget | None
    analysis: Analysis | None


def _every_step(path: Path, trace: Trace, chosen: StepStats, started: float) -> _Every:
    """Every step of streamed TRACE (of PATH) of the family its first part CHOSE (:func:`every_step`), their budget
    (:func:`whole_capture_budget`) and analysis (:func:`whole_capture_analysis`); None where there is none, or a
    streamed pass fails (a loss for the note, not the page's: as for the analysis, :func:`diagnosed`). Progress is
    logged with the seconds since STARTED."""
    frames, most = events(trace), step_rows(trace)
    try:
        every = every_step_of(trace, chosen, most)
    except Exception as error:  # see the docstring
        log.warning("could not read every step of %s (%s: %s)", path, type(error).__name__, error)
        return _Every(None, None, None)
    if every is None:
        return _Every(None, None, None)
    if every.pieces is None:
        log.info("What to fix: the time budget of each of %s steps, streamed (%.0f s in)", f"{every.ranges.height:,}",
                 time.monotonic() - started)
    else:
        log.info("What to fix: the time budget of the capture as one step, in %s pieces, streamed (%.0f s in)",
                 f"{every.pieces.height:,}", time.monotonic() - started)
    try:
        budget = whole_capture_budget(frames, every, step_rows=most, held_rows=most)
        log.info("What to fix: findings and NVTX ranges over %s (%.0f s in)",
                 "every step" if every.pieces is None else "all of it", time.monotonic() - started)
        return _Every(every, budget,
                      None if budget is None else whole_capture_analysis(trace, every, budget))
    except Exception as error:  # see the docstring
        log.warning("could not analyse every step of %s (%s: %s)", path, type(error).__name__, error)
        return _Every(every, None, None)


def every_step_of(trace: Trace, chosen: StepStats, most: int | None) -> EveryStep | None:
    """Every step of streamed TRACE of the family its first part CHOSE (:func:`every_step`), or where it found none,
    the capture as one step (:func:`capture_as_step`) in pieces of at most half the MOST events a step may hold
    (:func:`step_rows`; a cut moves on to the next kernel)."""
    frames = events(trace)
    if chosen.source != "none":
        return every_step(frames, chosen)
    window = capture_window(trace, frames)
    return capture_as_step(frames, chosen, window.start_ns, window.end_ns,
                           WINDOW_ROWS if most is None else min(WINDOW_ROWS, most // 2))


def step_rows(trace: Trace) -> int | None:
    """The most events one step of streamed TRACE may hold for its budget over every step (:func:`whole_capture_budget`
    reads a step's events at once): as many as fit the memory allowed read whole, the share of its events that
    :func:`affordable_event_bytes` is of its bytes; None where no limit is known."""
    affordable = affordable_event_bytes()
    if affordable is None:
        return None
    frames = events(trace)
    rows = sum(frame.select(pl.len()).collect(engine="streaming").item() for frame in
               (frames.kernels, frames.memcpy, frames.memset, frames.cuda_api, frames.osrt, frames.nvtx))
    return affordable * rows // max(trace.event_bytes, 1)


def _first_steps(steps: pl.DataFrame, span_ns: int) -> str:
    """How much of a capture (SPAN_NS) the STEPS of its first part cover: 'N steps (1.08 s of 55.60 s)'."""
    if not steps.height:
        return f"part (of {duration(span_ns)})"
    covered = int(steps["end_ns"].max()) - int(steps["start_ns"].min())  # type: ignore[arg-type]
    return f"{steps.height:,} steps ({duration(covered)} of {duration(span_ns)})"


def _steps_compared(every: StepStats | None, part: StepStats) -> str:
    """A sentence on EVERY step's times beside the first PART's: whether the steps "What to fix" saw are typical."""
    if every is None or every.family is None or part.family is None:
        return ""
    clock = "on the GPU's clock" if every.clock == "gpu" else "their ranges' own times"
    return (f" All {every.family.count:,} steps, {clock}: p50 {duration(every.family.p50_ns)}, p95 "
            f"{duration(every.family.p95_ns)}, max {duration(every.family.max_ns)}, trend {every.trend} (the first "
            f"{part.family.count:,}: p50 {duration(part.family.p50_ns)}, p95 {duration(part.family.p95_ns)}).")


def first_part(trace: Trace) -> Trace | None:
    """The first part of streamed TRACE whose analysis fits the memory allowed now (:func:`affordable_event_bytes`),
    as a Trace read whole (:mod:`nsight_core.trace.head`); TRACE itself where all of it fits, None where nothing does.

    Steps are local in time, so the first steps alone get the analysis any capture of their size gets. The cut
    first lies where the events up to it take the share of the event tables' bytes that fits; where NVTX steps
    are found before it, it moves back to the start of the last one, which would be cut short.
    """
    tables, affordable = trace.tables, affordable_event_bytes()
    if not isinstance(tables, SpilledTables) or affordable is None or affordable >= trace.event_bytes:
        return trace
    if not affordable:
        return None
    frames = events(trace)
    cut = first_share_end([frames.kernels, frames.memcpy, frames.memset, frames.cuda_api, frames.nvtx, frames.osrt],
                          affordable / trace.event_bytes)
    if cut is None:
        return trace
    part = head(tables, cut, tables.choice)
    found, steps = find_steps(part.nvtx, pl.DataFrame(schema=KERNEL_COLUMNS))
    if found.source == "nvtx" and steps.height >= 2:
        part = head(tables, int(steps.select(pl.col("start_ns").max()).item()), tables.choice)
    return part


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


ANALYSIS_FRAMES = ("kernels", "memcpy", "memset", "cuda_api", "osrt", "nvtx", "nvtx_marks", "window")
"""What :func:`analyze_steps` reads of a Trace (:class:`EventTables`)."""


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
    """PROFILE with the steps its page draws in full, as DRAW finds them for its analysis (:func:`drawing_for`, or
    :func:`streamed_drawing`); should that fail, a note says so and the rest of the page stays (as for the analysis:
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
