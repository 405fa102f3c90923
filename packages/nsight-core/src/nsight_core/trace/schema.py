"""The shapes of a capture's events: the Trace's frames' columns, the export's columns they are read from, and the
codes nsys writes (NVTX event types, copy directions, memory kinds).

Frames and columns (every frame has them, empty when nothing of the kind was traced):

- ``kernels``: start_ns, end_ns, device, stream, name (demangled), short_name, correlation_id, pid
- ``graphs``: CUDA-graph launches as the GPU ran them, one row per launch (CUPTI_ACTIVITY_KIND_GRAPH_TRACE, nsys
  2025's default ``--cuda-graph-trace=graph``): start_ns, end_ns, device, stream, graph_id, correlation_id (that of the
  ``cudaGraphLaunch`` call); the graph's kernels are not in ``kernels`` then. With ``--cuda-graph-trace=node`` nsys
  records each node as a kernel carrying the launch's correlation id instead (2025.3 writes no graph rows then): a
  graph row whose correlation id a kernel carries is left out, so graph work counts once. Empty in nsys 2023.4.
- ``memcpy``: start_ns, end_ns, device, stream, bytes, direction ("Host-to-Device" ...), src_kind,
  dst_kind ("Pageable", "Pinned", "Device" ...), correlation_id
- ``memset``: start_ns, end_ns, device, stream, bytes, correlation_id
- ``cuda_api``: start_ns, end_ns, name (no ``_v3020`` suffix, as nsys reports it), thread, correlation_id,
  name_id (nsys' string id of the full name: `nsys stats` groups calls by it)
- ``sync``: CUDA synchronisation events: start_ns, end_ns, device, stream, kind, correlation_id
- ``nvtx``: start_ns, end_ns, name, domain ('' = default), thread, depth (nesting level on its thread, 0 = outermost),
  kind ("push_pop" or "start_end"), closed (False: never ended, end_ns then NVTX's last timestamp, as in `nsys stats`)
- ``nvtx_marks``: time_ns, name, domain, thread
- ``osrt``: OS-runtime calls: start_ns, end_ns, name, thread, name_id (as for ``cuda_api``)
- ``samples``: CPU samples: time_ns, thread, cpu
- ``diagnostics``: nsys' own record of the capture (DIAGNOSTIC_EVENT, nsys 2025): time_ns, severity ("Info",
  "Warning", "Error" ...), source ("Injection", "Daemon", "Analysis" ...), text, pid; empty before 2025
- ``cuda_contexts``: the CUDA contexts nsys saw (TARGET_INFO_CUDA_CONTEXT_INFO): device, context_id, pid
- ``gpus``, ``processes``, ``threads``: device, process and thread info; ``meta``: export and target facts"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TypeVar

import polars as pl

from nsight_core.trace.tables import Schema, Wanted

# NVTX_EVENTS.eventType values (ENUM_NSYS_EVENT_TYPE; the ids nsys' own reports use).
NVTX_MARK_TYPES = (34, 65)
NVTX_PUSH_POP_TYPES = (59, 70)
NVTX_START_END_TYPES = (60, 71)
NVTX_DOMAIN_CREATE = 75
MAX_DOMAIN_CONDITIONS = 32
"""Up to this many (domain, process) pairs, ranges get their domain name by one condition per pair, not a join."""

# Labels nsys uses when the export lacks its ENUM tables (old SQLite exports).
COPY_DIRECTIONS: dict[int, str] = {
    0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array", 4: "Array-to-Host", 5: "Array-to-Array",
    6: "Array-to-Device", 7: "Device-to-Array", 8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
    11: "Unified Host-to-Device", 12: "Unified Device-to-Host", 13: "Unified Device-to-Device"}
MEMORY_KINDS: dict[int, str] = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
                                6: "Managed Static", 7: "Unknown"}
DIAGNOSTIC_SEVERITIES: dict[int, str] = {0: "Unknown", 1: "Info", 2: "Warning", 3: "Error", 4: "Verbose"}
DIAGNOSTIC_SOURCES: dict[int, str] = {0: "Unknown source", 1: "Injection", 2: "Daemon", 3: "Analysis"}
SYNC_KINDS: dict[int, str] = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync", 4: "Context sync"}

I64, STR = pl.Int64, pl.String
ID = None
"""An id read only to be looked up or compared: kept in the export's own type (see ``tables.Wanted``)."""

# The event frames' columns, for frames built by hand (the Trace's empty ones are what its queries make of no rows).
_ON_GPU: Schema = {"start_ns": I64, "end_ns": I64, "device": I64, "stream": I64}
KERNEL_COLUMNS: Schema = {**_ON_GPU, "name": STR, "short_name": STR, "correlation_id": I64, "pid": I64}
GRAPH_COLUMNS: Schema = {**_ON_GPU, "graph_id": I64, "correlation_id": I64}
MEMCPY_COLUMNS: Schema = {**_ON_GPU, "bytes": I64, "direction": STR, "src_kind": STR, "dst_kind": STR,
                          "correlation_id": I64}
MEMSET_COLUMNS: Schema = {**_ON_GPU, "bytes": I64, "correlation_id": I64}
API_COLUMNS: Schema = {"start_ns": I64, "end_ns": I64, "name": STR, "thread": I64, "correlation_id": I64,
                       "name_id": I64}
NVTX_COLUMNS: Schema = {"start_ns": I64, "end_ns": I64, "name": STR, "domain": STR, "thread": I64,
                        "depth": I64, "kind": STR, "closed": pl.Boolean}
MARK_COLUMNS: Schema = {"time_ns": I64, "name": STR, "domain": STR, "thread": I64}
OSRT_COLUMNS: Schema = {"start_ns": I64, "end_ns": I64, "name": STR, "thread": I64, "name_id": I64}
SAMPLE_COLUMNS: Schema = {"time_ns": I64, "thread": I64, "cpu": I64}

_TIMES: Wanted = {"start": I64, "end": I64}
_GPU_READ: Wanted = {**_TIMES, "deviceId": I64, "streamId": I64}
EVENT_READS: dict[str, tuple[str, Wanted]] = {
    "kernels": ("CUPTI_ACTIVITY_KIND_KERNEL", {**_GPU_READ, "demangledName": ID, "shortName": ID, "correlationId": I64,
                                              "globalPid": I64}),
    "graphs": ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", {**_GPU_READ, "graphId": I64, "correlationId": I64}),
    "memcpy": ("CUPTI_ACTIVITY_KIND_MEMCPY", {**_GPU_READ, "bytes": I64, "copyKind": I64, "srcKind": I64,
                                              "dstKind": I64, "correlationId": I64}),
    "memset": ("CUPTI_ACTIVITY_KIND_MEMSET", {**_GPU_READ, "bytes": I64, "correlationId": I64}),
    "sync": ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {**_GPU_READ, "syncType": I64, "correlationId": I64}),
    "cuda_api": ("CUPTI_ACTIVITY_KIND_RUNTIME", {**_TIMES, "nameId": I64, "globalTid": I64, "correlationId": I64}),
    "osrt": ("OSRT_API", {**_TIMES, "nameId": ID, "globalTid": I64}),
}
"""Per event frame (``Trace.event_columns``), the export table it is read from and the columns read of it."""
EVENT_TABLES = (*(table for table, _ in EVENT_READS.values()), "COMPOSITE_EVENTS", "NVTX_EVENTS", "StringIds")
"""The export's tables the frames read events from (and the strings they name): what a summary grows with."""
Lookup = Callable[[str, pl.DataFrame], pl.Expr]
"""An id column's text in a table of (id, value): a lookup column over a frame read whole, a batch at a time over one
streamed."""


def event_read(frame: str, columns: Callable[[str], Collection[str]]) -> tuple[str, Wanted]:
    """Event FRAME's table and the columns to read of it (EVENT_READS), given the export's COLUMNS of a table; for
    OSRT_API also its ``eventClass`` (:func:`osrt_calls`) where the export has it, with no note where not."""
    table, wanted = EVENT_READS[frame]
    classed = frame == "osrt" and "eventClass" in columns(table)
    return table, {**wanted, "eventClass": I64} if classed else wanted


FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)


def osrt_calls(raw: FrameT) -> FrameT:
    """The rows of OSRT_API (RAW, as read) that are calls (ENUM_NSYS_EVENT_CLASS 27, TRACE_PROCESS_EVENT_OS_RUNTIME),
    as nsys' osrt_sum counts them: not its zero-length "OS runtime libraries profiling started" (31) at the start of
    each collection. Every row where the export has no ``eventClass``."""
    return raw.filter(pl.col("eventClass").is_null() | (pl.col("eventClass") == 27)) \
        if "eventClass" in raw.collect_schema() else raw


NVTX_LAST = pl.max_horizontal(pl.col("start").max(), pl.col("end").max())
"""NVTX_EVENTS' last timestamp, of any event type: where `nsys stats` ends a range that never ended."""


def nvtx_domains(raw: FrameT) -> FrameT:
    """The NVTX domains RAW (NVTX_EVENTS, as read) creates: domainId, _pid, domain. A domain is created once per process
    (eventType 75, its name as text); ranges name it by id."""
    return (raw.filter(pl.col("eventType") == NVTX_DOMAIN_CREATE)
            .group_by("domainId", pid_of(pl.col("globalTid")).alias("_pid"))
            .agg(pl.col("text").sort_by("start").first().alias("domain")))


def in_domain(name: str = "name") -> pl.Expr:
    """``domain:NAME``, or NAME alone in the default domain (as nsys-ui and nvtx_pushpop_sum show them)."""
    return pl.when(pl.col("domain") != "").then(pl.format("{}:{}", "domain", name)).otherwise(name)


def pid_of(global_id: pl.Expr) -> pl.Expr:
    """The OS process id inside nsys' global thread/process ids (bits 24..47)."""
    return (global_id // (1 << 24)) % (1 << 24)


Thread = TypeVar("Thread", int, pl.Expr)


def os_tid(thread: Thread) -> Thread:
    """The OS thread id in nsys' thread id (an int or a column): its low 24 bits, below the pid (:func:`pid_of`)."""
    return thread % (1 << 24)
