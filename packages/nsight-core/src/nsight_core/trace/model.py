"""The Trace: every event of one capture as Polars frames with resolved names, on the capture's clock.

Each frame is built on first use from only the columns it needs and kept: a report that never looks
at OS-runtime calls never reads them. Names are resolved once per table through nsys' string table
(StringIds) by a join, never per row in Python. Times are nanoseconds on the capture's clock, where
the collection window runs from 0 to its duration (ANALYSIS_DETAILS).

Frames and columns (every frame has them, empty when nothing of the kind was traced):

- ``kernels``: start_ns, end_ns, device, stream, name (demangled), short_name, correlation_id, pid
- ``memcpy``: start_ns, end_ns, device, stream, bytes, direction ("Host-to-Device" ...), src_kind,
  dst_kind ("Pageable", "Pinned", "Device" ...), correlation_id
- ``memset``: start_ns, end_ns, device, stream, bytes, correlation_id
- ``cuda_api``: start_ns, end_ns, name (no ``_v3020`` suffix, as nsys reports it), thread, correlation_id,
  name_id (nsys' string id of the full name: `nsys stats` groups calls by it)
- ``sync``: CUDA synchronisation events: start_ns, end_ns, device, stream, kind, correlation_id
- ``nvtx``: start_ns, end_ns, name, domain ('' = default), thread, depth (nesting level on its thread,
  0 = outermost), kind ("push_pop" or "start_end"), closed (False: never ended; end_ns is then the
  last NVTX timestamp, as `nsys stats` counts it)
- ``nvtx_marks``: time_ns, name, domain, thread
- ``osrt``: OS-runtime calls: start_ns, end_ns, name, thread
- ``samples``: CPU samples: time_ns, thread, cpu
- ``gpus``, ``processes``, ``threads``: device, process and thread info; ``meta``: export and target facts
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from nsight_core.trace.tables import ExportTables, Schema

# NVTX_EVENTS.eventType values (ENUM_NSYS_EVENT_TYPE; the ids nsys' own reports use).
NVTX_MARK_TYPES = (34, 65)
NVTX_PUSH_POP_TYPES = (59, 70)
NVTX_START_END_TYPES = (60, 71)
NVTX_DOMAIN_CREATE = 75

# Labels nsys uses when the export lacks its ENUM tables (old SQLite exports).
COPY_DIRECTIONS: dict[int, str] = {
    0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array", 4: "Array-to-Host",
    5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array", 8: "Device-to-Device",
    9: "Host-to-Host", 10: "Peer-to-Peer", 11: "Unified Host-to-Device", 12: "Unified Device-to-Host",
    13: "Unified Device-to-Device",
}
MEMORY_KINDS: dict[int, str] = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
    6: "Managed Static", 7: "Unknown",
}
SYNC_KINDS: dict[int, str] = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync",
                              4: "Context sync"}

I64, U64, STR = pl.Int64, pl.UInt64, pl.String

KERNEL_COLUMNS: Schema = {"start_ns": I64, "end_ns": I64, "device": I64, "stream": I64, "name": STR,
                          "short_name": STR, "correlation_id": I64, "pid": I64}
MEMCPY_COLUMNS: Schema = {"start_ns": I64, "end_ns": I64, "device": I64, "stream": I64, "bytes": I64,
                          "direction": STR, "src_kind": STR, "dst_kind": STR, "correlation_id": I64}
MEMSET_COLUMNS: Schema = {"start_ns": I64, "end_ns": I64, "device": I64, "stream": I64, "bytes": I64,
                          "correlation_id": I64}
API_COLUMNS: Schema = {"start_ns": I64, "end_ns": I64, "name": STR, "thread": I64, "correlation_id": I64,
                       "name_id": I64}
SYNC_COLUMNS: Schema = {"start_ns": I64, "end_ns": I64, "device": I64, "stream": I64, "kind": STR,
                        "correlation_id": I64}
NVTX_COLUMNS: Schema = {"start_ns": I64, "end_ns": I64, "name": STR, "domain": STR, "thread": I64,
                        "depth": I64, "kind": STR, "closed": pl.Boolean}
MARK_COLUMNS: Schema = {"time_ns": I64, "name": STR, "domain": STR, "thread": I64}
OSRT_COLUMNS: Schema = {"start_ns": I64, "end_ns": I64, "name": STR, "thread": I64}
SAMPLE_COLUMNS: Schema = {"time_ns": I64, "thread": I64, "cpu": I64}
GPU_COLUMNS: Schema = {"device": I64, "name": STR, "memory_bytes": I64, "bandwidth_bytes_per_s": I64,
                       "sm_count": I64, "compute_capability": STR, "bus": STR}
PROCESS_COLUMNS: Schema = {"pid": I64, "name": STR}
THREAD_COLUMNS: Schema = {"thread": I64, "tid": I64, "pid": I64, "name": STR}


def _empty(schema: Schema) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def _pid(global_id: pl.Expr) -> pl.Expr:
    """The OS process id inside nsys' global thread/process ids (bits 24..47)."""
    return (global_id // (1 << 24)) % (1 << 24)


@dataclass(frozen=True)
class Window:
    """The collection window (nsys start to stop) on the capture's clock."""

    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


class Trace:
    """The events of one capture; see the module docstring for the frames and their columns.

    Build it with :func:`nsight_core.load_trace`. ``source`` is the export the frames are read from,
    ``report`` the .nsys-rep it came from where known.
    """

    def __init__(self, tables: ExportTables, report: Path | None = None) -> None:
        self._tables = tables
        self.source = tables.source
        self.report = report

    def __repr__(self) -> str:
        return f"Trace({self.report or self.source})"

    # -- strings and enums, resolved once --------------------------------------------------------------

    @functools.cached_property
    def strings(self) -> pl.DataFrame:
        """nsys' string table: id -> value."""
        frame = self._tables.read("StringIds", {"id": I64, "value": STR})
        return frame if frame is not None else _empty({"id": I64, "value": STR})

    def _named(self, frame: pl.DataFrame, id_column: str, alias: str) -> pl.DataFrame:
        """FRAME with ID_COLUMN replaced by its string, as ALIAS (one join, not a lookup per row)."""
        names = self.strings.rename({"id": id_column, "value": alias})
        return frame.join(names, on=id_column, how="left", maintain_order="left").drop(id_column)

    def _enum(self, table: str, fallback: Mapping[int, str]) -> pl.DataFrame:
        frame = self._tables.read(table, {"id": I64, "label": STR})
        if frame is None:
            return pl.DataFrame({"id": list(fallback), "label": list(fallback.values())},
                                schema={"id": I64, "label": STR})
        return frame

    def _labelled(self, frame: pl.DataFrame, column: str, table: str, fallback: Mapping[int, str]) -> pl.DataFrame:
        labels = self._enum(table, fallback).rename({"id": column, "label": f"_{column}"})
        return (frame.join(labels, on=column, how="left", maintain_order="left")
                .with_columns(pl.col(f"_{column}").fill_null("Unknown").alias(column)).drop(f"_{column}"))

    # -- GPU activity ----------------------------------------------------------------------------------

    @functools.cached_property
    def kernels(self) -> pl.DataFrame:
        """CUDA kernels, by start time."""
        raw = self._tables.read("CUPTI_ACTIVITY_KIND_KERNEL", {
            "start": I64, "end": I64, "deviceId": I64, "streamId": I64, "demangledName": I64, "shortName": I64,
            "correlationId": I64, "globalPid": I64})
        if raw is None:
            return _empty(KERNEL_COLUMNS)
        frame = self._named(self._named(raw, "demangledName", "name"), "shortName", "short_name")
        return frame.select(
            pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"), pl.col("deviceId").alias("device"),
            pl.col("streamId").alias("stream"), pl.col("name").fill_null(""), pl.col("short_name").fill_null(""),
            pl.col("correlationId").alias("correlation_id"), _pid(pl.col("globalPid")).alias("pid"),
        ).sort("start_ns")

    @functools.cached_property
    def memcpy(self) -> pl.DataFrame:
        """Memory copies with direction and the memory kind of each side (pageable copies show here)."""
        raw = self._tables.read("CUPTI_ACTIVITY_KIND_MEMCPY", {
            "start": I64, "end": I64, "deviceId": I64, "streamId": I64, "bytes": I64, "copyKind": I64,
            "srcKind": I64, "dstKind": I64, "correlationId": I64})
        if raw is None:
            return _empty(MEMCPY_COLUMNS)
        frame = self._labelled(raw, "copyKind", "ENUM_CUDA_MEMCPY_OPER", COPY_DIRECTIONS)
        frame = self._labelled(frame, "srcKind", "ENUM_CUDA_MEM_KIND", MEMORY_KINDS)
        frame = self._labelled(frame, "dstKind", "ENUM_CUDA_MEM_KIND", MEMORY_KINDS)
        return frame.select(
            pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"), pl.col("deviceId").alias("device"),
            pl.col("streamId").alias("stream"), "bytes", pl.col("copyKind").alias("direction"),
            pl.col("srcKind").alias("src_kind"), pl.col("dstKind").alias("dst_kind"),
            pl.col("correlationId").alias("correlation_id"),
        ).sort("start_ns")

    @functools.cached_property
    def memset(self) -> pl.DataFrame:
        """Memsets."""
        raw = self._tables.read("CUPTI_ACTIVITY_KIND_MEMSET", {
            "start": I64, "end": I64, "deviceId": I64, "streamId": I64, "bytes": I64, "correlationId": I64})
        if raw is None:
            return _empty(MEMSET_COLUMNS)
        return raw.select(
            pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"), pl.col("deviceId").alias("device"),
            pl.col("streamId").alias("stream"), "bytes", pl.col("correlationId").alias("correlation_id"),
        ).sort("start_ns")

    @functools.cached_property
    def sync(self) -> pl.DataFrame:
        """CUDA synchronisation events (stream, event, context syncs) as the GPU side saw them."""
        raw = self._tables.read("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {
            "start": I64, "end": I64, "deviceId": I64, "streamId": I64, "syncType": I64, "correlationId": I64})
        if raw is None:
            return _empty(SYNC_COLUMNS)
        frame = self._labelled(raw, "syncType", "ENUM_CUPTI_SYNC_TYPE", SYNC_KINDS)
        return frame.select(
            pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"), pl.col("deviceId").alias("device"),
            pl.col("streamId").alias("stream"), pl.col("syncType").alias("kind"),
            pl.col("correlationId").alias("correlation_id"),
        ).sort("start_ns")

    # -- CPU side --------------------------------------------------------------------------------------

    @functools.cached_property
    def cuda_api(self) -> pl.DataFrame:
        """CUDA runtime and driver API calls; names without nsys' ``_v3020``-style version suffix."""
        raw = self._tables.read("CUPTI_ACTIVITY_KIND_RUNTIME", {
            "start": I64, "end": I64, "nameId": I64, "globalTid": I64, "correlationId": I64})
        if raw is None:
            return _empty(API_COLUMNS)
        name = pl.col("name").fill_null("")
        versioned = name.str.slice(-6, 2) == "_v"
        return self._named(raw.with_columns(pl.col("nameId").alias("name_id")), "nameId", "name").select(
            pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"),
            pl.when(versioned).then(name.str.slice(0, name.str.len_chars() - 6)).otherwise(name).alias("name"),
            pl.col("globalTid").alias("thread"), pl.col("correlationId").alias("correlation_id"), "name_id",
        ).sort("start_ns")

    @functools.cached_property
    def osrt(self) -> pl.DataFrame:
        """OS-runtime calls (trace=osrt): sleeps, locks, reads, polls."""
        raw = self._tables.read("OSRT_API", {"start": I64, "end": I64, "nameId": I64, "globalTid": I64})
        if raw is None:
            return _empty(OSRT_COLUMNS)
        return self._named(raw, "nameId", "name").select(
            pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"), pl.col("name").fill_null(""),
            pl.col("globalTid").alias("thread"),
        ).sort("start_ns")

    @functools.cached_property
    def samples(self) -> pl.DataFrame:
        """CPU samples (sample=process-tree/system-wide), where the capture has them."""
        raw = self._tables.read("COMPOSITE_EVENTS", {"start": I64, "globalTid": I64, "cpu": I64})
        if raw is None:
            return _empty(SAMPLE_COLUMNS)
        return raw.select(pl.col("start").alias("time_ns"), pl.col("globalTid").alias("thread"), "cpu").sort("time_ns")

    @functools.cached_property
    def _nvtx_table(self) -> tuple[pl.DataFrame, int | None]:
        """NVTX ranges and marks with their text and domain name resolved, and the table's last timestamp."""
        raw = self._tables.read("NVTX_EVENTS", {
            "start": I64, "end": I64, "eventType": I64, "text": STR, "textId": I64, "globalTid": I64,
            "domainId": I64})
        if raw is None:
            return pl.DataFrame(schema={"start": I64, "end": I64, "eventType": I64, "name": STR, "globalTid": I64,
                                        "domain": STR}), None
        # `nsys stats` ends a range that never ended at the table's last timestamp, of any event type.
        last = raw.select(pl.max_horizontal(pl.col("start").max(), pl.col("end").max())).item()
        # A domain is created once per process (eventType 75, its name as text); ranges name it by id.
        domains = (raw.filter(pl.col("eventType") == NVTX_DOMAIN_CREATE)
                   .group_by("domainId", _pid(pl.col("globalTid")).alias("_pid"))
                   .agg(pl.col("text").sort_by("start").first().alias("domain")))
        events = (raw.filter(pl.col("eventType") != NVTX_DOMAIN_CREATE)
                  .with_columns(_pid(pl.col("globalTid")).alias("_pid")))
        events = self._named(events, "textId", "_registered").join(
            domains, on=["domainId", "_pid"], how="left", maintain_order="left")
        return events.select(
            "start", "end", "eventType", pl.coalesce("_registered", "text", pl.lit("")).alias("name"), "globalTid",
            pl.col("domain").fill_null("")), last

    @functools.cached_property
    def nvtx(self) -> pl.DataFrame:
        """NVTX push/pop and start/end ranges with their nesting depth per thread, by start time."""
        events, last = self._nvtx_table
        ranges = events.filter(pl.col("eventType").is_in(NVTX_PUSH_POP_TYPES + NVTX_START_END_TYPES))
        if not ranges.height:
            return _empty(NVTX_COLUMNS)
        frame = ranges.select(
            pl.col("start").alias("start_ns"), pl.col("end").fill_null(last).alias("end_ns"), "name", "domain",
            pl.col("globalTid").alias("thread"),
            pl.when(pl.col("eventType").is_in(NVTX_PUSH_POP_TYPES)).then(pl.lit("push_pop"))
            .otherwise(pl.lit("start_end")).alias("kind"),
            pl.col("end").is_not_null().alias("closed"),
        )
        return with_depth(frame).select(list(NVTX_COLUMNS))

    @functools.cached_property
    def nvtx_marks(self) -> pl.DataFrame:
        """NVTX marks (instant events)."""
        marks = self._nvtx_table[0].filter(pl.col("eventType").is_in(NVTX_MARK_TYPES))
        return marks.select(pl.col("start").alias("time_ns"), "name", "domain",
                            pl.col("globalTid").alias("thread")).sort("time_ns")

    # -- the capture -----------------------------------------------------------------------------------

    @functools.cached_property
    def window(self) -> Window:
        """The collection window: [0, duration] from the export, else the span of the traced events."""
        details = self._tables.read("ANALYSIS_DETAILS", {"duration": I64})
        if details is not None and details.height and details["duration"][0] is not None:
            return Window(0, int(details["duration"][0]))
        bounds = pl.concat([frame.select("start_ns", "end_ns") for frame in
                            (self.kernels, self.memcpy, self.memset, self.cuda_api, self.nvtx, self.osrt)])
        if not bounds.height:
            return Window(0, 0)
        first, last = bounds.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
        return Window(int(first), int(last))

    @functools.cached_property
    def gpus(self) -> pl.DataFrame:
        """The GPUs of the target: device id, name, memory, bandwidth, SMs, compute capability."""
        raw = self._tables.read("TARGET_INFO_GPU", {
            "id": I64, "name": STR, "totalMemory": I64, "memoryBandwidth": I64, "smCount": I64,
            "computeMajor": I64, "computeMinor": I64, "busLocation": STR})
        if raw is None:
            return _empty(GPU_COLUMNS)
        return raw.select(
            pl.col("id").alias("device"), "name", pl.col("totalMemory").alias("memory_bytes"),
            pl.col("memoryBandwidth").alias("bandwidth_bytes_per_s"), pl.col("smCount").alias("sm_count"),
            pl.format("{}.{}", "computeMajor", "computeMinor").alias("compute_capability"),
            pl.col("busLocation").alias("bus"))

    @functools.cached_property
    def processes(self) -> pl.DataFrame:
        """Processes seen in the capture: pid and name."""
        raw = self._tables.read("PROCESSES", {"pid": I64, "name": STR})
        return raw.unique(maintain_order=True) if raw is not None else _empty(PROCESS_COLUMNS)

    @functools.cached_property
    def threads(self) -> pl.DataFrame:
        """Named threads: the nsys thread id (``thread`` in the other frames), OS tid and pid, name."""
        raw = self._tables.read("ThreadNames", {"nameId": I64, "globalTid": I64})
        if raw is None:
            return _empty(THREAD_COLUMNS)
        return self._named(raw, "nameId", "name").select(
            pl.col("globalTid").alias("thread"), (pl.col("globalTid") % (1 << 24)).alias("tid"),
            _pid(pl.col("globalTid")).alias("pid"), pl.col("name").fill_null(""))

    @functools.cached_property
    def meta(self) -> Mapping[str, str]:
        """Facts about the export and the target: EXPORT_PRODUCT_VERSION, CudaDriverVersion, ..."""
        facts: dict[str, str] = {}
        for table in ("TARGET_INFO_SYSTEM_ENV", "META_DATA_EXPORT"):
            frame = self._tables.read(table, {"name": STR, "value": STR})
            if frame is not None:
                facts.update(zip(frame["name"].fill_null("").to_list(), frame["value"].fill_null("").to_list(),
                                 strict=True))
        return facts


def with_depth(ranges: pl.DataFrame) -> pl.DataFrame:
    """RANGES (start_ns, end_ns, thread) with ``depth``: how many ranges of its thread enclose it.

    Columnar: every range contributes +1 at its start and -1 at its end; sorted per thread by time
    (ends before starts at one instant, outer ranges before inner ones starting together), the running
    sum just before a start is the number of ranges still open there.
    """
    ordered = ranges.sort(["start_ns", "end_ns"], descending=[False, True]).with_row_index("_id")
    starts = ordered.select("_id", "thread", pl.col("start_ns").alias("t"), pl.lit(1, I64).alias("_step"),
                            pl.lit(1, pl.Int8).alias("_order"), pl.col("end_ns").neg().alias("_tie"))
    # An end sorts before starts at the same instant, except a zero-length range's own end.
    ends = ordered.select(pl.lit(None, pl.UInt32).alias("_id"), "thread", pl.col("end_ns").alias("t"),
                          pl.lit(-1, I64).alias("_step"),
                          pl.when(pl.col("end_ns") > pl.col("start_ns")).then(0).otherwise(2)
                          .cast(pl.Int8).alias("_order"),
                          pl.lit(0, I64).alias("_tie"))
    depth = (pl.concat([starts, ends]).sort("thread", "t", "_order", "_tie", "_id", nulls_last=True)
             .with_columns((pl.col("_step").cum_sum().over("thread") - 1).alias("depth"))
             .filter(pl.col("_id").is_not_null()).select("_id", "depth"))
    return ordered.join(depth, on="_id", how="left").sort("_id").drop("_id")
