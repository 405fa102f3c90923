"""The Trace: every event of one capture as Polars frames with resolved names, on the capture's clock.

Each frame is built on first use from only the columns it needs and kept (``nvtx`` and ``nvtx_marks`` come from
one table, read for both at once). Names are resolved once per table through nsys' string table (StringIds) by a
lookup column, after any sort (sorting copies the strings a frame holds). Times are nanoseconds on the capture's
clock, the collection window from 0 to its duration (ANALYSIS_DETAILS). Frames and columns: trace/schema.py."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import polars as pl

from nsight_core.trace.depth import with_depth
from nsight_core.trace.schema import (
    COPY_DIRECTIONS,
    DIAGNOSTIC_SEVERITIES,
    DIAGNOSTIC_SOURCES,
    EVENT_TABLES,
    I64,
    ID,
    MARK_COLUMNS,
    MAX_DOMAIN_CONDITIONS,
    MEMORY_KINDS,
    NVTX_COLUMNS,
    NVTX_LAST,
    NVTX_MARK_TYPES,
    NVTX_PUSH_POP_TYPES,
    NVTX_START_END_TYPES,
    STR,
    SYNC_KINDS,
    FrameT,
    Lookup,
    event_read,
    nvtx_domains,
    os_tid,
    osrt_calls,
    pid_of,
)
from nsight_core.trace.tables import ExportTables, SchemaMismatch, Wanted, _made

OwnerT = TypeVar("OwnerT")


def event_frame(read: Callable[[OwnerT, str], FrameT], frame: str, doc: str) -> functools.cached_property[FrameT]:
    """A property made on first use and kept (DOC its docstring): READ's event FRAME of its owner, a Trace's or the
    lazy one of :class:`nsight_core.trace.streamed.Events`."""
    made = functools.cached_property(lambda owner: read(owner, frame))
    made.__doc__ = doc
    return made


@dataclass(frozen=True)
class Window:
    """The collection window (nsys start to stop) on the capture's clock."""

    start_ns: int
    end_ns: int


class Trace:
    """The events of one capture (:func:`nsight_core.load_trace`): ``source``, the export the frames are read from,
    ``report``, the .nsys-rep it came from where known."""

    def __init__(self, tables: ExportTables, report: Path | None = None) -> None:
        self.tables = tables
        """The export's tables the frames are read from; its ``choice`` says which export and why (None where the
        user passed the export), and a streamed one is also scanned lazily (:mod:`nsight_core.trace.streamed`)."""
        self.source = tables.source
        self.report = report
        self.notes: dict[str, str] = {}
        """Per table, what of it was left out because the export's schema differs from the one nsight-core reads
        (filled as frames are read): a table without a column it needs, or with one of another type."""

    def __repr__(self) -> str:
        return f"Trace({self.report or self.source})"

    @property
    def event_bytes(self) -> int:
        """About the event tables' bytes as Arrow, known before any is read: what a summary's memory grows with."""
        return self.tables.arrow_bytes(EVENT_TABLES)

    def _read(self, table: str, wanted: Wanted, required: Collection[str] = ("start", "end")) -> pl.DataFrame | None:
        """TABLE's WANTED columns, or None when the export has no such table. A schema nsight-core has not seen
        degrades with a note (``notes[table]``), never a crash: without a REQUIRED column (missing, or of another type)
        the table's events are left out; another such column is null (every column read is in the 2023.4.4 and 2025.3
        exports)."""
        present = self.tables.columns(table)
        if not present:
            return None
        missing = [column for column in wanted if column not in present]
        if lost := [column for column in missing if column in required]:
            self.notes[table] = f"{table} has no column {', '.join(lost)}: its events are left out"
            return None
        if missing:
            self.notes[table] = f"{table} has no column {', '.join(missing)}: left empty"
        try:
            return self.tables.read(table, wanted)
        except SchemaMismatch as error:
            mistyped = error.columns
            if not mistyped or set(mistyped) & set(required):
                self.notes[table] = f"{error}: its events are left out"
                return None
            self.notes[table] = f"{error}: {', '.join(mistyped)} left empty"
            raw = self.tables.read(table, {name: dtype for name, dtype in wanted.items() if name not in mistyped})
        return None if raw is None else raw.with_columns(pl.lit(None, _made(wanted)[name]).alias(name)
                                                         for name in mistyped).select(list(wanted))

    def _frame(self, table: str, wanted: Wanted, *columns: pl.Expr | str,
               required: Collection[str] = ("start", "end")) -> pl.DataFrame:
        """TABLE's WANTED columns (:meth:`_read`) made into COLUMNS, by start time where it has one, only its rows that
        are calls where it says (OSRT_API, :func:`osrt_calls`); where the export has none of them, no rows, with the
        columns the same query makes of an empty table."""
        raw = self._read(table, wanted, required)
        raw = pl.DataFrame(schema=_made(wanted)) if raw is None else osrt_calls(raw)
        # A stable sort, skipped when already in order (as exports mostly are), before names are looked up: sorting a
        # frame copies every string it holds, the lookup does not.
        if "start" in wanted and not raw["start"].is_sorted():
            raw = raw.sort("start", maintain_order=True)
        return raw.select(*columns)

    @functools.cached_property
    def strings(self) -> pl.DataFrame:
        """nsys' string table: id -> value."""
        return self._frame("StringIds", {"id": I64, "value": STR}, "id", "value", required=("id", "value"))

    def _string(self, id_column: str, table: pl.DataFrame | None = None) -> pl.Expr:
        """ID_COLUMN's string (null where unknown) in TABLE (id, value; else the string table): a lookup, no join."""
        table = self.strings if table is None else table
        return pl.col(id_column).replace_strict(table["id"], table["value"], default=None, return_dtype=STR)

    def _enum(self, table: str, fallback: Mapping[int, str]) -> pl.DataFrame:
        """TABLE's enum labels as (id, value), else FALLBACK's (old SQLite exports have no ENUM tables)."""
        frame = self._read(table, {"id": I64, "label": STR}, required=("id", "label"))
        if frame is None:
            return pl.DataFrame(list(fallback.items()), schema={"id": I64, "value": STR}, orient="row")
        return frame.rename({"label": "value"})

    def _label(self, column: str, table: str, fallback: Mapping[int, str], lookup: Lookup | None = None) -> pl.Expr:
        """COLUMN's enum label from TABLE (else FALLBACK) by LOOKUP (else :meth:`_string`); "Unknown" where none."""
        return (lookup or self._string)(column, self._enum(table, fallback)).fill_null("Unknown")

    def event_columns(self, frame: str, lookup: Lookup) -> list[pl.Expr]:
        """The columns of event FRAME (a key of EVENT_READS) made of its export table's, each id's text found by
        LOOKUP in its table of (id, value): one definition for the frames read whole here and for those a large
        capture streams from disk (:mod:`nsight_core.trace.streamed`)."""
        times = [pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns")]
        on_gpu = [*times, pl.col("deviceId").alias("device"), pl.col("streamId").alias("stream")]
        thread, name_id = pl.col("globalTid").alias("thread"), pl.col("nameId").alias("name_id")
        correlation = pl.col("correlationId").alias("correlation_id")
        match frame:
            case "kernels":
                return [*on_gpu, lookup("demangledName", self.strings).fill_null("").alias("name"),
                        lookup("shortName", self.strings).fill_null("").alias("short_name"), correlation,
                        pid_of(pl.col("globalPid")).alias("pid")]
            case "graphs":
                return [*on_gpu, pl.col("graphId").alias("graph_id"), correlation]
            case "memcpy":
                return [*on_gpu, pl.col("bytes"),
                        self._label("copyKind", "ENUM_CUDA_MEMCPY_OPER", COPY_DIRECTIONS, lookup).alias("direction"),
                        self._label("srcKind", "ENUM_CUDA_MEM_KIND", MEMORY_KINDS, lookup).alias("src_kind"),
                        self._label("dstKind", "ENUM_CUDA_MEM_KIND", MEMORY_KINDS, lookup).alias("dst_kind"),
                        correlation]
            case "memset":
                return [*on_gpu, pl.col("bytes"), correlation]
            case "sync":
                return [*on_gpu, self._label("syncType", "ENUM_CUPTI_SYNC_TYPE", SYNC_KINDS, lookup).alias("kind"),
                        correlation]
            case "cuda_api":
                return [*times, lookup("nameId", self.api_names).fill_null("").alias("name"), thread, correlation,
                        name_id]
            case "osrt":
                return [*times, lookup("nameId", self.strings).fill_null("").alias("name"), thread, name_id]
        raise KeyError(frame)

    def _events(self, frame: str, *more: pl.Expr) -> pl.DataFrame:
        """Event FRAME (:meth:`event_columns`, then MORE) read whole, by start time (see :meth:`_frame`)."""
        table, wanted = event_read(frame, self.tables.columns)
        return self._frame(table, wanted, *self.event_columns(frame, self._string), *more)

    @functools.cached_property
    def kernels(self) -> pl.DataFrame:
        """CUDA kernels, by start time."""
        return self._events("kernels")

    @functools.cached_property
    def graphs(self) -> pl.DataFrame:
        """CUDA-graph launches on the GPU, by start; those whose nodes are in ``kernels`` left out (see the module)."""
        graphs = self._events("graphs")
        if not graphs.height or not self.kernels.height:  # no launches: the kernels, maybe streamed, stay unread
            return graphs
        return graphs.filter(~pl.col("correlation_id").is_in(self.kernels["correlation_id"].implode()))

    memcpy = event_frame(_events, "memcpy", "Memory copies with direction and the memory kind of each side (pageable "
                         "copies show here).")
    memset = event_frame(_events, "memset", "Memsets.")
    sync = event_frame(_events, "sync", "CUDA synchronisation events (stream, event, context syncs) as the GPU side "
                       "saw them.")

    cuda_api = event_frame(_events, "cuda_api", "CUDA runtime and driver API calls; names without nsys' "
                           "``_v3020``-style version suffix.")
    osrt = event_frame(_events, "osrt", "OS-runtime calls (trace=osrt): sleeps, locks, reads, polls; not nsys' own row "
                       "saying the tracing started (:func:`osrt_calls`).")

    @functools.cached_property
    def api_names(self) -> pl.DataFrame:
        """The string table with nsys' ``_v3020``-style version suffixes cut (once, not per call): CUDA API names."""
        value = pl.col("value")
        return self.strings.with_columns(pl.when(value.str.slice(-6, 2) == "_v")
                                         .then(value.str.slice(0, value.str.len_chars() - 6)).otherwise(value))

    @functools.cached_property
    def samples(self) -> pl.DataFrame:
        """CPU samples (sample=process-tree/system-wide), where the capture has them."""
        return self._frame("COMPOSITE_EVENTS", {"start": I64, "globalTid": I64, "cpu": I64}, pl.col("start")
                           .alias("time_ns"), pl.col("globalTid").alias("thread"), "cpu", required=("start",))

    @functools.cached_property
    def _nvtx_events(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """NVTX ranges (``nvtx``) and marks (``nvtx_marks``) from the one table, text and domain resolved."""
        # The text first, alone: usually every name is a registered string and the text all null, which Polars still
        # holds as 16 bytes a row. Then it is a constant, let go before the rest is read.
        texts = self._read("NVTX_EVENTS", {"text": STR}, required=())  # None: no such table (raw is None below)
        text = (texts["text"] if texts is not None and texts["text"].null_count() < texts.height
                else pl.lit(None, STR).alias("text"))
        del texts
        raw = self._read("NVTX_EVENTS", {"start": I64, "end": I64, "eventType": ID, "textId": ID, "globalTid": I64,
                                         "domainId": ID}, required=("start", "end", "eventType"))
        if raw is None:
            return pl.DataFrame(schema=NVTX_COLUMNS), pl.DataFrame(schema=MARK_COLUMNS)
        raw = raw.with_columns(text)
        del text
        last, domains = raw.select(NVTX_LAST).item(), nvtx_domains(raw)
        event_type = pl.col("eventType")
        marks = self._nvtx_named(raw.filter(event_type.is_in(NVTX_MARK_TYPES)), domains, "globalTid").select(
            pl.col("start").alias("time_ns"), "name", "domain", pl.col("globalTid").alias("thread")).sort("time_ns")
        # Only the ranges from here on: the whole table is let go before the names are added.
        raw = raw.filter(event_type.is_in(NVTX_PUSH_POP_TYPES + NVTX_START_END_TYPES))
        if not raw.height:
            return pl.DataFrame(schema=NVTX_COLUMNS), marks
        # Depth (and order) first, on numbers alone: sorting a frame copies the strings it holds.
        ranges = with_depth(raw.select(pl.col("start").alias("start_ns"), pl.col("end").fill_null(last).alias("end_ns"),
                                       pl.col("globalTid").alias("thread"), "eventType", "text", "textId", "domainId",
                                       pl.col("end").is_not_null().alias("closed")))
        del raw
        push_pop = ranges["eventType"].is_in(NVTX_PUSH_POP_TYPES)
        # One kind throughout (the usual case) is a constant, which takes no memory per range.
        kind = (pl.lit("push_pop") if push_pop.all() else pl.lit("start_end") if not push_pop.any()
                else pl.when(push_pop).then(pl.lit("push_pop")).otherwise(pl.lit("start_end")))
        del push_pop
        ranges = ranges.with_columns(kind.alias("kind")).drop("eventType")
        return self._nvtx_named(ranges, domains, "thread").select(list(NVTX_COLUMNS)), marks

    def _nvtx_named(self, events: pl.DataFrame, domains: pl.DataFrame, thread: str) -> pl.DataFrame:
        """NVTX EVENTS with text, textId and domainId replaced by ``name`` (registered string, else the event's own
        text, else '') and ``domain`` (from DOMAINS by domainId and the THREAD column's process), one at a time."""
        # Only as many whole-column passes as the names need: usually all are registered, or none is.
        name = (self._string("textId").fill_null("") if events["text"].null_count() == events.height
                else pl.col("text").fill_null("") if events["textId"].null_count() == events.height
                else pl.coalesce(self._string("textId"), "text", pl.lit("")))
        events = events.with_columns(name.alias("name")).drop("text", "textId")
        return events.with_columns(self._nvtx_domain(events, domains, thread).alias("domain")).drop("domainId")

    @staticmethod
    def _nvtx_domain(events: pl.DataFrame, domains: pl.DataFrame, thread: str) -> pl.Expr | pl.Series:
        """The domain name of each of EVENTS ('' for the default domain): DOMAINS by (domainId, _pid)."""
        pid = pid_of(pl.col(thread))
        if not events["domainId"].is_in(domains["domainId"].implode()).any():
            return pl.lit("")  # all in the default domain: a constant, no memory per event
        if domains.height <= MAX_DOMAIN_CONDITIONS:
            # A condition per created domain (a handful): no per-event join, no copy of the key columns.
            domain = pl.lit("")
            for domain_id, process, name in domains.select("domainId", "_pid", "domain").iter_rows():
                domain = pl.when((pl.col("domainId") == domain_id) & (pid == process)).then(pl.lit(name or "")) \
                    .otherwise(domain)
            return domain
        keys = events.select("domainId", pid.alias("_pid"))
        return keys.join(domains, on=["domainId", "_pid"], how="left", maintain_order="left")["domain"].fill_null("")

    @functools.cached_property
    def nvtx(self) -> pl.DataFrame:
        """NVTX push/pop and start/end ranges with their nesting depth per thread, by start time."""
        return self._nvtx_events[0]

    @functools.cached_property
    def nvtx_marks(self) -> pl.DataFrame:
        """NVTX marks (instant events)."""
        return self._nvtx_events[1]

    @functools.cached_property
    def window(self) -> Window:
        """The collection window: [0, duration] from the export, else the span of the traced events."""
        details = self._read("ANALYSIS_DETAILS", {"duration": I64}, required=("duration",))
        if details is not None and details.height and details["duration"][0] is not None:
            return Window(0, int(details["duration"][0]))
        bounds = pl.concat([frame.select("start_ns", "end_ns") for frame in
                            (self.kernels, self.graphs, self.memcpy, self.memset, self.cuda_api, self.nvtx, self.osrt)])
        first, last = bounds.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
        return Window(int(first or 0), int(last or 0))  # none traced: (0, 0)

    @functools.cached_property
    def diagnostics(self) -> pl.DataFrame:
        """What nsys itself said about the capture (nsys 2025's DIAGNOSTIC_EVENT), in the export's order."""
        return self._frame(
            "DIAGNOSTIC_EVENT", {"timestamp": I64, "severity": I64, "source": I64, "text": STR, "globalPid": I64},
            pl.col("timestamp").alias("time_ns"),
            self._label("severity", "ENUM_DIAGNOSTIC_SEVERITY_LEVEL", DIAGNOSTIC_SEVERITIES).alias("severity"),
            self._label("source", "ENUM_DIAGNOSTIC_SOURCE_TYPE", DIAGNOSTIC_SOURCES).alias("source"),
            pl.col("text").fill_null(""), pid_of(pl.col("globalPid")).alias("pid"), required=("severity", "text"))

    @functools.cached_property
    def cuda_contexts(self) -> pl.DataFrame:
        """The CUDA contexts of the traced processes: present once a process initialised CUDA under trace=cuda."""
        return self._frame("TARGET_INFO_CUDA_CONTEXT_INFO", {"deviceId": I64, "contextId": I64, "processId": I64},
                           pl.col("deviceId").alias("device"), pl.col("contextId").alias("context_id"),
                           pl.col("processId").alias("pid"), required=("contextId",))

    @functools.cached_property
    def gpus(self) -> pl.DataFrame:
        """The GPUs of the target: device id, name, memory, bandwidth, SMs, compute capability."""
        return self._frame(
            "TARGET_INFO_GPU", {"id": I64, "name": STR, "totalMemory": I64, "memoryBandwidth": I64, "smCount": I64,
                                "computeMajor": I64, "computeMinor": I64, "busLocation": STR},
            pl.col("id").alias("device"), "name", pl.col("totalMemory").alias("memory_bytes"),
            pl.col("memoryBandwidth").alias("bandwidth_bytes_per_s"), pl.col("smCount").alias("sm_count"),
            pl.format("{}.{}", "computeMajor", "computeMinor").alias("compute_capability"),
            pl.col("busLocation").alias("bus"), required=("id",))

    @functools.cached_property
    def processes(self) -> pl.DataFrame:
        """Processes seen in the capture: pid and name."""
        return self._frame("PROCESSES", {"pid": I64, "name": STR}, "pid", "name", required=("pid",)).unique(
            maintain_order=True)

    @functools.cached_property
    def threads(self) -> pl.DataFrame:
        """Named threads: the nsys thread id (``thread`` in the other frames), OS tid and pid, name."""
        return self._frame("ThreadNames", {"nameId": I64, "globalTid": I64}, pl.col("globalTid").alias("thread"),
                           os_tid(pl.col("globalTid")).alias("tid"), pid_of(pl.col("globalTid")).alias("pid"),
                           self._string("nameId").fill_null("").alias("name"), required=("globalTid",))

    @functools.cached_property
    def meta(self) -> Mapping[str, str]:
        """Facts about the export and the target: EXPORT_PRODUCT_VERSION, CudaDriverVersion, ..., and where the export
        has them (SQLite), how the capture was made: PROCESS_0:COMMAND, PROCESS_0:ARGUMENT_0, ..."""
        frames = [self._read(table, {"name": STR, "value": STR}, required=("name", "value"))
                  for table in ("META_DATA_CAPTURE", "TARGET_INFO_SYSTEM_ENV", "META_DATA_EXPORT")]
        return dict(row for frame in frames if frame is not None for row in frame.fill_null("").iter_rows())
