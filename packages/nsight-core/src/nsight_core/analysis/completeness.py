"""Is this trace complete? Warnings, with cause and fix, for captures that lost part of what ran: nsys does not fail
loudly. Each warning is a :data:`CompletenessCode` (its function says what it looks at); ``nsys_older_than_cuda`` is
never a warning alone (an old nsys imports regions opened after CUDA initialises completely), only the cause where
another found one. Only :func:`capture_facts` looks at the file system; the events are read by streamed counts and
maxima, and only a capture whose CUDA activity ends early reads its ranges against its CUDA events, in windows."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, NamedTuple

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.fold import fold, row_counts
from nsight_core.analysis.windows import start_cuts, window_filters
from nsight_core.trace.model import Trace
from nsight_core.trace.streamed import WINDOW_ROWS, Events, events

CompletenessCode = Literal["importer_errors", "raw_stream_left", "cuda_ends_early", "nsys_lost_data",
                           "cuda_calls_missing", "graph_work_missing", "nsys_older_than_cuda"]

CUDA_TAIL_NS = 100_000_000
"""CUDA activity must end at least this long before the last NVTX range for `cuda_ends_early`."""
MAX_RANGES_WITH_CUDA = 0.1
"""...and at most this share of the NVTX ranges may hold a CUDA call (same thread) or GPU work."""
MIN_RANGES = 2
MIN_GRAPH_LAUNCHES = 2
MAX_GRAPH_LAUNCHES_WITHOUT_GPU = 0.5
"""A share of graph launches with no GPU record above this is a loss (one still running as a region stops is not)."""
GRAPH_LAUNCH_API = r"^cu(da)?GraphLaunch"
REPORTED_SEVERITIES = ("Warning", "Error")
"""nsys' diagnostics kept in the verdict: its informational lines ("Profiling has started.") are not."""
_LOSS_WORDS = re.compile(r"\b(?:lost|los(?:e|ing)|dropp\w*|discard\w*|overflow\w*|overr?un\w*|truncat\w*|"
                         r"corrupt\w*|could not be (?:collected|imported|recorded)|failed)\b", re.IGNORECASE)
"""Words in an nsys warning that say events are missing, not merely that some might be."""

# The first nsys release that knows each CUDA major version's API (nsys ships with the toolkit).
FIRST_NSYS_FOR_CUDA: dict[int, tuple[int, int]] = {12: (2022, 4), 13: (2025, 3)}

_IMPORTER_MARKERS = re.compile(
    r"^.*(?:Importer error status|Analysis failed|Errors occurred while processing the raw events|"
    r"Unknown (?:runtime|driver) API function index|Importation failed|QdstrmImporter.*(?:crash|fail)).*$",
    re.IGNORECASE | re.MULTILINE)
_UNKNOWN_CALL = re.compile(r"Unknown (runtime|driver) API function index: (\d+)")
_VERSION = re.compile(r"(\d{4})\.(\d+)(?:\.\d+)*")
# TARGET_INFO_SYSTEM_ENV (what nsys recorded on the target) names the driver's CUDA version CudaDriverVersion, as 1000 *
# major + 10 * minor (13000 = 13.0).
_CUDA_DRIVER_KEY = "CudaDriverVersion"
_EXPORT_VERSION_KEY = "EXPORT_PRODUCT_VERSION"


class CaptureFacts(BaseModel):
    """What is known about how a capture was made, beside its trace."""

    nsys_output: str = Field(default="", description="What `nsys stop` / `nsys profile` printed while writing it")
    leftover_files: list[Path] = Field(default_factory=list, description="Raw .qdstrm streams left beside it")
    nsys_version: str | None = Field(default=None, description="The nsys that recorded and imported it")
    cuda_runtime_version: str | None = Field(default=None, description="The profiled process's CUDA runtime, "
                                             "e.g. torch.version.cuda, where it was recorded")


class NsysDiagnostic(BaseModel):
    """One warning or error nsys itself wrote about the capture (DIAGNOSTIC_EVENT), as nsys worded it."""

    severity: str = Field(description="Warning or Error")
    source: str = Field(description="The nsys part that said it: Injection, Daemon or Analysis")
    text: str
    pid: int | None = Field(description="The process it is about, where nsys names one")
    lost_data: bool = Field(description="It says events are missing (an error, or a warning of lost, dropped or "
                            "uncollected events): the trace is incomplete")


class CompletenessWarning(BaseModel):
    """One sign that the trace misses part of what ran: what was found, why, and what to do."""

    code: CompletenessCode
    message: str = Field(description="What was found, one sentence")
    cause: str
    fix: str
    evidence: dict[str, int | float | str] = Field(default_factory=dict, description="The numbers behind it (ns)")


class Completeness(BaseModel):
    """The verdict on one capture: complete, or the warnings that say why not."""

    complete: bool
    nsys_version: str | None = Field(description="The recording nsys where known, else the exporting one")
    cuda_version: str | None = Field(description="CUDA of the profiled process (runtime where recorded, "
                                     "else the driver's), 'major.minor'")
    warnings: list[CompletenessWarning]
    diagnostics: list[NsysDiagnostic] = Field(default_factory=list, description="Every warning and error nsys "
                                              "wrote about the capture (nsys 2025 and later), with its text")


def capture_facts(report: Path, nsys_output: str = "", nsys_version: str | None = None,
                  cuda_runtime_version: str | None = None) -> CaptureFacts:
    """The side facts of REPORT: the given nsys output and versions, and a `<stem>.qdstrm` left beside it."""
    stream = report.with_suffix(".qdstrm")
    return CaptureFacts(nsys_output=nsys_output, leftover_files=[stream] if stream.is_file() else [],
                        nsys_version=nsys_version, cuda_runtime_version=cuda_runtime_version)


def check_completeness(trace: Trace, facts: CaptureFacts | None = None, window_rows: int | None = None) -> Completeness:
    """Every sign that TRACE is incomplete, given what is known about its capture (FACTS). WINDOW_ROWS: events per
    window where a check reads events in windows (by default ``WINDOW_ROWS`` if streamed); any gives one verdict."""
    facts = facts or CaptureFacts()
    nsys_version = facts.nsys_version or trace.meta.get(_EXPORT_VERSION_KEY)
    raw = trace.meta.get(_CUDA_DRIVER_KEY, "")
    driver = f"{int(raw) // 1000}.{int(raw) % 1000 // 10}" if raw.isdigit() and int(raw) > 0 else None
    cuda_version = facts.cuda_runtime_version or driver
    diagnostics = nsys_diagnostics(trace)
    frames = events(trace)
    losses = [w for w in (_importer_errors(facts.nsys_output), _raw_stream_left(facts.leftover_files),
                          _cuda_ends_early(frames, trace.window.end_ns, window_rows), _nsys_lost_data(diagnostics),
                          _cuda_calls_missing(trace, frames), _graph_work_missing(frames)) if w is not None]
    too_old = _nsys_older_than_cuda(nsys_version, cuda_version) if losses else None
    warnings = [*([too_old] if too_old else []), *losses]
    return Completeness(complete=not warnings, nsys_version=nsys_version, cuda_version=cuda_version,
                        warnings=warnings, diagnostics=diagnostics)


def nsys_diagnostics(trace: Trace) -> list[NsysDiagnostic]:
    """The warnings and errors of nsys' own diagnostics in TRACE, each marked where it means lost data."""
    frame = trace.diagnostics
    if not frame.height:
        return []
    return [NsysDiagnostic(severity=row["severity"], source=row["source"], text=row["text"].strip(), pid=row["pid"],
                           lost_data=row["severity"] == "Error" or bool(_LOSS_WORDS.search(row["text"])))
            for row in frame.filter(pl.col("severity").is_in(REPORTED_SEVERITIES)).iter_rows(named=True)]


def _nsys_lost_data(diagnostics: Sequence[NsysDiagnostic]) -> CompletenessWarning | None:
    """nsys' diagnostics (DIAGNOSTIC_EVENT, nsys 2025) hold an error or a warning of lost events."""
    lost = [d for d in diagnostics if d.lost_data]
    if not lost:
        return None
    said = list(dict.fromkeys(f"{d.severity}: {d.text}" for d in lost))
    return CompletenessWarning(
        code="nsys_lost_data", message=f"nsys reported that the capture lost data: {lost[0].text}",
        cause="nsys' own diagnostics (written into the report) name events it could not collect or import",
        fix="record again; for lost buffers, shorter regions (capture='manual' around fewer steps) or fewer trace "
            "domains; " + _GENERIC_FIX,
        evidence={"nsys_said": " | ".join(said)[:500], "diagnostics": len(lost)})


def _cuda_calls_missing(trace: Trace, frames: Events) -> CompletenessWarning | None:
    """A process created a CUDA context under trace=cuda, and not one CUDA API call was imported."""
    contexts = trace.cuda_contexts
    if not contexts.height:
        return None
    calls, kernels, ranges, unended = row_counts(frames.cuda_api, frames.kernels, frames.nvtx,
                                             frames.nvtx.filter(~pl.col("closed")))
    if calls:
        return None
    pids = ", ".join(str(pid) for pid in contexts["pid"].unique(maintain_order=True).to_list())
    return CompletenessWarning(
        code="cuda_calls_missing",
        message=f"process {pids} created a CUDA context while CUDA was traced, yet the trace holds no CUDA API call "
                f"({kernels} kernels, {ranges} NVTX ranges): its CUDA activity was not imported",
        cause="nsys lost the CUDA events of the capture (seen with nsys 2023.4.4 on CUDA 13, around CUDA graph "
              "replays)",
        fix=_GENERIC_FIX,
        evidence={"cuda_contexts": contexts.height, "kernels": kernels, "nvtx_ranges": ranges,
                  "unended_ranges": unended})


def _graph_work_missing(frames: Events) -> CompletenessWarning | None:
    """CUDA graphs were launched, and most launches left no GPU record (no graph row, no node kernel)."""
    launches = (frames.cuda_api.filter(pl.col("name").str.contains(GRAPH_LAUNCH_API)).select("correlation_id")
                .collect(engine="streaming").to_series())
    if launches.len() < MIN_GRAPH_LAUNCHES:
        return None
    launched = pl.col("correlation_id").is_in(launches.implode())
    recorded = (pl.concat([frame.select("correlation_id").filter(launched) for frame in
                           (frames.kernels, frames.memcpy, frames.memset, frames.graphs)])
                .unique().collect(engine="streaming").to_series())
    missing = int((~launches.is_in(recorded.implode())).sum())
    if missing <= MAX_GRAPH_LAUNCHES_WITHOUT_GPU * launches.len():
        return None
    graphs, kernels = row_counts(frames.graphs, frames.kernels)
    return CompletenessWarning(
        code="graph_work_missing",
        message=f"{missing} of {launches.len()} CUDA graph launches have no GPU work in the trace: the GPU side of "
                "those steps is missing",
        cause="this nsys records a CUDA graph launch on the CPU side only (nsys 2023.4 exports no graph-level GPU "
              "rows), or its GPU records were lost",
        fix="use nsys 2025.3 or later (the NGC PyTorch image's), which records each launch on the GPU; or record "
            "with cuda_graph_trace='node' (nsys --cuda-graph-trace=node), which records the graph's kernels",
        evidence={"graph_launches": launches.len(), "launches_without_gpu_work": missing,
                  "graph_rows": graphs, "kernels": kernels})


_GENERIC_FIX = ("use an nsys at least as new as the profiled process's CUDA runtime, or record regions opened "
                "after CUDA has initialised (capture='manual' after a warm-up step)")


def _importer_errors(output: str) -> CompletenessWarning | None:
    """What `nsys stop` / `nsys profile` printed about its import: nsys' own word."""
    lines = [line.strip().strip("*").strip() for line in _IMPORTER_MARKERS.findall(output)]
    if not lines:
        return None
    unknown = _UNKNOWN_CALL.search(output)
    unknown_call = f"{unknown.group(1)} API function index {unknown.group(2)}" if unknown else None
    evidence: dict[str, int | float | str] = {"nsys_said": " | ".join(dict.fromkeys(lines))[:500],
                                              **({"unknown_call": unknown_call} if unknown_call else {})}
    return CompletenessWarning(
        code="importer_errors",
        message="nsys reported errors while importing the raw trace, so events after the first error are "
                "missing: " + lines[0],
        cause=(f"the importer met a CUDA call it does not know ({unknown_call})" if unknown_call
               else "the importer could not process every raw event") + " and dropped the rest of that stream",
        fix=_GENERIC_FIX, evidence=evidence)


def _raw_stream_left(files: Sequence[Path]) -> CompletenessWarning | None:
    """The raw `.qdstrm` beside the report, which nsys deletes after a clean import."""
    if not files:
        return None
    return CompletenessWarning(
        code="raw_stream_left",
        message=f"the raw stream {files[0].name} is still beside the report: nsys deletes it after a clean import",
        cause="the import into .nsys-rep did not finish cleanly (an importer error, or nsys was stopped)",
        fix=_GENERIC_FIX + " (re-importing this .qdstrm with a newer nsys does not recover it: the stream "
                           "itself lacks what the old nsys could not decode)",
        evidence={"files": ", ".join(str(f) for f in files)})


def _cuda_ends_early(frames: Events, window_end_ns: int, window_rows: int | None) -> CompletenessWarning | None:
    """CUDA was used, its activity ends well before the NVTX ranges do, and almost no range holds any."""
    ranges = frames.nvtx.select("start_ns", "end_ns", "thread").drop_nulls()
    api = frames.cuda_api.select("start_ns", "end_ns", "thread")
    gpu = pl.concat([f.select("start_ns", "end_ns") for f in (frames.kernels, frames.memcpy, frames.memset)])
    calls, count, kernels = row_counts(api, ranges, frames.kernels)
    if not calls or count < MIN_RANGES:
        return None
    ends = pl.collect_all([frame.select(pl.col("end_ns").max()) for frame in (api, gpu, ranges)], engine="streaming")
    api_end, gpu_end, nvtx_end = (frame.item() for frame in ends)
    cuda_end = int(max(api_end, gpu_end if gpu_end is not None else api_end))
    if nvtx_end - cuda_end < CUDA_TAIL_NS:
        return None
    # Suspected: a range that starts after every CUDA event ended holds none.
    early = ranges.filter(pl.col("start_ns") <= cuda_end)
    rows = window_rows if window_rows is not None else WINDOW_ROWS if frames.streamed else None
    with_cuda = _ranges_with_cuda(early, api, gpu, rows)
    if with_cuda > MAX_RANGES_WITH_CUDA * count:
        return None
    [after] = row_counts(ranges.filter(pl.col("start_ns") >= cuda_end))
    return CompletenessWarning(
        code="cuda_ends_early",
        message=f"the process used CUDA, but its CUDA activity ends {(nvtx_end - cuda_end) / 1e6:.0f} ms before "
                f"its NVTX ranges do and {count - with_cuda} of {count} ranges hold no CUDA call "
                "or GPU work: the trace looks truncated",
        cause="CUDA events after some point were not recorded or not imported (typically an nsys older than the "
              "CUDA runtime, with a collection that started before CUDA initialised)",
        fix=_GENERIC_FIX,
        evidence={"cuda_end_ns": cuda_end, "nvtx_end_ns": nvtx_end, "window_end_ns": int(window_end_ns),
                  "ranges": count, "ranges_with_cuda": with_cuda, "ranges_after_cuda_end": after,
                  "cuda_api_calls": calls, "kernels": kernels})


def _ranges_with_cuda(ranges: pl.LazyFrame, api: pl.LazyFrame, gpu: pl.LazyFrame, rows: int | None) -> int:
    """How many of RANGES overlap a CUDA call on their thread (API) or any GPU work (GPU), in windows of about ROWS
    positions (None: one). A range [s, e] overlaps events exactly when the largest end of those starting by e reaches
    s: ranges come in windows of their end, events in the same windows of their start (a fold: :func:`_reached`)."""
    positions = pl.concat([api.select("start_ns"), gpu.select("start_ns"), ranges.select(pl.col("end_ns").alias(
        "start_ns"))])
    cuts = start_cuts(positions, rows)
    windows = (pl.collect_all([ranges.filter(ends), api.filter(starts), gpu.filter(starts)], engine="streaming")
               for starts, ends in zip(window_filters(cuts, pl.col("start_ns")), window_filters(cuts, pl.col("end_ns")),
                                       strict=True))
    return fold(windows, _Reach(pl.DataFrame(schema={"thread": pl.Int64, "_carry": pl.Int64}), None, 0), _reached).found


class _Reach(NamedTuple):
    """What :func:`_ranges_with_cuda` carries: the latest end of calls per thread and of GPU work, overlaps so far."""

    calls: pl.DataFrame
    work: int | None
    found: int


def _reached(reach: _Reach, window: list[pl.DataFrame]) -> _Reach:
    """REACH after one WINDOW (its ranges by end, its calls and GPU work by start)."""
    part, calls, work = window
    calls_carry = part.select("thread").join(reach.calls, on="thread", how="left", maintain_order="left")["_carry"]
    hit = _overlaps(part, calls, calls_carry, by="thread") | _overlaps(part, work, pl.repeat(
        reach.work, part.height, dtype=pl.Int64, eager=True))
    calls_reach = (pl.concat([reach.calls, calls.group_by("thread").agg(pl.col("end_ns").max().alias("_carry"))
                             .cast({"thread": pl.Int64, "_carry": pl.Int64})])
                   .group_by("thread").agg(pl.col("_carry").max()))
    ends = [end for end in (reach.work, work.select(pl.col("end_ns").max()).item()) if end is not None]
    return _Reach(calls_reach, max(ends, default=None), reach.found + int(hit.sum()))


def _overlaps(ranges: pl.DataFrame, events: pl.DataFrame, carried: pl.Series, by: str | None = None) -> pl.Series:
    """Per range (in RANGES' order): does any of EVENTS (on the same BY, when given), or an earlier event that reaches
    as far as CARRIED (per range, null for none), overlap it, by the test of :func:`_ranges_with_cuda`?"""
    ranges = ranges.with_columns(carried.alias("_carried"))
    reached = pl.col("_carried")
    if events.height:
        running = pl.col("end_ns").cum_max()
        reach = (events.sort("start_ns").with_columns((running.over(by) if by else running).alias("_reach"))
                 .select(*([by] if by else []), pl.col("start_ns").alias("_event_start"), "_reach"))
        ranges = (ranges.with_row_index("_row").sort("end_ns")
                  .join_asof(reach, left_on="end_ns", right_on="_event_start", by=by, strategy="backward",
                             check_sortedness=False)  # both sorted above; polars cannot check within groups
                  .sort("_row"))
        reached = pl.max_horizontal("_reach", "_carried")
    return ranges.select((reached >= pl.col("start_ns")).fill_null(False)).to_series()


def _nsys_older_than_cuda(nsys_version: str | None, cuda_version: str | None) -> CompletenessWarning | None:
    if not nsys_version or not cuda_version:
        return None
    if (nsys := _VERSION.match(nsys_version)) is None:
        return None
    cuda_major = int(cuda_version.split(".")[0])
    first = FIRST_NSYS_FOR_CUDA.get(cuda_major)
    if first is None or (int(nsys.group(1)), int(nsys.group(2))) >= first:
        return None
    return CompletenessWarning(
        code="nsys_older_than_cuda", message=f"nsys {nsys_version} cannot fully import CUDA {cuda_major} traces",
        cause=f"nsys {nsys_version} predates CUDA {cuda_major} (the first nsys for it is {first[0]}.{first[1]}): "
              f"calls it does not know stop its importer",
        fix=f"use an nsys at least as new as the CUDA runtime (CUDA {cuda_version}: nsys {first[0]}.{first[1]} or "
            "later), e.g. the one in the NGC image; with this nsys, record regions opened after CUDA has "
            "initialised (capture='manual' after a warm-up step), which it imports completely",
        evidence={"nsys_version": nsys_version, "cuda_version": cuda_version})
