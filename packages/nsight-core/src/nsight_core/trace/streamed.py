"""A capture's events as lazy frames, which Polars' streaming engine runs batch by batch: what the five default
reports, the trace summary and the completeness checks read.

For a capture read whole they are the Trace's frames made lazy. For one whose export was spilled to Parquet
(:class:`~nsight_core.trace.spill.SpilledTables`, a large capture) they are scans of those files, named the way the
Trace names its frames (the same string table, enum labels, NVTX domains), so that one query serves either and a
streamed one never holds a whole event table. Each table is scanned with one set of columns, the union of what its
readers need: a table is copied to Parquet once per set of columns, and that copy is the slow part. A table whose
columns differ from the ones nsight-core reads is read through the Trace, with the same numbers and notes."""

from __future__ import annotations

import functools
import weakref
from typing import NamedTuple

import polars as pl

from nsight_core.trace.backtraces import LINE_COLUMNS, python_lines
from nsight_core.trace.frames import EventTables
from nsight_core.trace.model import Trace, event_frame
from nsight_core.trace.schema import (
    GRAPH_COLUMNS,
    I64,
    NVTX_LAST,
    NVTX_MARK_TYPES,
    NVTX_PUSH_POP_TYPES,
    NVTX_START_END_TYPES,
    STR,
    event_read,
    nvtx_domains,
    osrt_calls,
    pid_of,
)
from nsight_core.trace.spill import SpilledTables
from nsight_core.trace.tables import SchemaMismatch, Wanted

WINDOW_ROWS = 1_000_000
"""Events per window of every pass over a capture's events (the reports', the summary's and the analysis' alike):
what one pass holds of a table at once, whatever the capture's size. The answers do not depend on it."""


def is_streamed(trace: Trace | EventTables) -> bool:
    """TRACE's tables were spilled to disk for streaming (a large capture): its reports scan them."""
    return isinstance(getattr(trace, "tables", None), SpilledTables)


class Process(NamedTuple):
    """One process of a capture of several (the ranks `torchrun` starts, under one nsys) and the GPUs it launched
    kernels on: what :meth:`Events.of_process` keeps."""

    pid: int
    devices: tuple[int, ...]

    def keeps(self, frame: str) -> pl.Expr | None:
        """The rows of event FRAME that are this process's: its threads' calls, its own kernels, and the other work
        (copies, memsets, graph launches, which carry no process) of its GPUs; None: the frame is not one of them."""
        if frame in ("cuda_api", "osrt"):
            return pid_of(pl.col("thread")) == self.pid
        if frame == "kernels":
            return pl.col("pid") == self.pid
        return pl.col("device").is_in(self.devices) if frame in ("memcpy", "memset", "graphs") else None


class Events:
    """TRACE's event frames as lazy frames with the Trace's column names (at least these: read whole, a frame keeps the
    Trace's others, ``nvtx`` its ``depth``), each made on first use. ``streamed``: scanned from Parquet on disk. Frames
    built by hand (any :class:`EventTables`) are made lazy as they are. PROCESS: of a capture of several processes,
    only that one's CUDA calls, OS calls and GPU work (NVTX ranges and samples are read whole: their readers pick
    threads)."""

    def __init__(self, trace: Trace | EventTables, process: Process | None = None) -> None:
        self._frames = trace
        self._trace = trace if isinstance(trace, Trace) else None
        self.process = process
        self.streamed = is_streamed(trace)

    def of_process(self, process: Process) -> Events:
        """These events as PROCESS alone made them (:class:`Process`)."""
        return Events(self._frames, process)

    def _frame(self, frame: str) -> pl.LazyFrame:
        """Event FRAME scanned from disk (:func:`_scanned`) where the capture is streamed, else the frame made lazy;
        of the process alone where there is one."""
        scanned = _scanned(self._trace, frame) if self._trace else None
        return self._own(frame, scanned if scanned is not None else getattr(self._frames, frame).lazy())

    def _own(self, frame: str, rows: pl.LazyFrame) -> pl.LazyFrame:
        """ROWS of event FRAME, of the process alone where there is one."""
        keeps = self.process.keeps(frame) if self.process is not None else None
        return rows if keeps is None else rows.filter(keeps)

    kernels = event_frame(_frame, "kernels", "start_ns, end_ns, device, stream, name (demangled), short_name, "
                          "correlation_id, pid")
    memcpy = event_frame(_frame, "memcpy", "start_ns, end_ns, device, stream, bytes, direction, src_kind, dst_kind, "
                         "correlation_id")
    memset = event_frame(_frame, "memset", "start_ns, end_ns, device, stream, bytes, correlation_id")
    cuda_api = event_frame(_frame, "cuda_api", "start_ns, end_ns, name (no version suffix), thread, correlation_id, "
                           "name_id")
    osrt = event_frame(_frame, "osrt", "start_ns, end_ns, name, thread, name_id")

    @functools.cached_property
    def graphs(self) -> pl.LazyFrame:
        """start_ns, end_ns, device, stream, graph_id, correlation_id: the launches whose nodes are not kernels"""
        launched = _scanned(self._trace, "graphs") if self._trace else None
        if launched is None:
            graphs = getattr(self._frames, "graphs", None)
            return self._own("graphs", graphs.lazy()) if graphs is not None else pl.LazyFrame(schema=GRAPH_COLUMNS)
        launched = self._own("graphs", launched)
        # The launches whose nodes are kernels, found from the launches' side: a hash of the launches' ids, the kernels
        # streamed past it (a hash of the kernels' distinct ids grows with the kernels).
        with_kernels = (self.kernels.select("correlation_id")
                        .join(launched.select("correlation_id"), on="correlation_id", how="semi").unique())
        return launched.join(with_kernels, on="correlation_id", how="anti")

    @functools.cached_property
    def python_lines(self) -> pl.DataFrame:
        """start_ns, thread, file, line, function: the user's Python line of each CUDA call nsys took a Python
        backtrace of (:mod:`nsight_core.trace.backtraces`); empty for frames built by hand"""
        lines = python_lines(self._trace) if self._trace else pl.DataFrame(schema=LINE_COLUMNS)
        return lines if self.process is None else lines.filter(pid_of(pl.col("thread")) == self.process.pid)

    @functools.cached_property
    def nvtx(self) -> pl.LazyFrame:
        """start_ns, end_ns, name, domain, thread, kind, closed: push/pop and start/end ranges"""
        if self._trace:
            return _nvtx(self._trace)[0]
        return self._frames.nvtx.lazy().with_columns(pl.col("name", "domain").fill_null(""))  # as the loader has them

    @functools.cached_property
    def nvtx_names(self) -> pl.DataFrame:
        """The distinct (name, domain) pairs of ``nvtx``: a handful, found in one pass and kept, so that what is
        decided per name (a range's family) is decided once per name, not once per range in every pass."""
        return self.nvtx.select("name", "domain").unique().collect(engine="streaming")

    @functools.cached_property
    def nvtx_marks(self) -> pl.LazyFrame:
        """time_ns, name, domain, thread"""
        return _nvtx(self._trace)[1] if self._trace else self._frames.nvtx_marks.lazy()

    @property
    def threads(self) -> pl.DataFrame:
        """The Trace's named threads (a small table, read whole; none of frames built by hand)."""
        return self._trace.threads if self._trace else pl.DataFrame(schema={"thread": pl.Int64, "name": pl.String})

    @functools.cached_property
    def samples(self) -> pl.LazyFrame:
        """time_ns"""
        if self._trace is None:
            return pl.LazyFrame(schema={"time_ns": pl.Int64})
        raw = _scan(self._trace, "COMPOSITE_EVENTS", {"start": I64})
        return raw.select(pl.col("start").alias("time_ns")) if raw is not None else \
            self._trace.samples.lazy().select("time_ns")


def events(trace: Trace | EventTables) -> Events:
    """TRACE's events as lazy frames (see :class:`Events`)."""
    return Events(trace)


_NVTX_PASSES: weakref.WeakKeyDictionary[SpilledTables, tuple[int | None, int, pl.DataFrame]] = \
    weakref.WeakKeyDictionary()
"""Per spilled export, the NVTX table's last timestamp, how many of its ranges never ended, and its domains: streamed
passes of their own, made once."""


def _scan(trace: Trace, table: str, wanted: Wanted) -> pl.LazyFrame | None:
    """TABLE's WANTED columns scanned from disk; None where TRACE is read whole, or TABLE lacks one of them (the
    Trace then reads it and notes why)."""
    tables = trace.tables
    if not isinstance(tables, SpilledTables) or not set(wanted) <= tables.columns(table):
        return None
    try:
        return tables.scan(table, wanted)
    except SchemaMismatch:  # a column of another type: the Trace reads what it can, and notes the rest
        return None


def _named(id_column: str, names: pl.DataFrame) -> pl.Expr:
    """ID_COLUMN's value in NAMES (id, value; null where it has none), looked up a batch at a time: the Lookup of a
    streamed frame. Not a join: Polars keeps a join in every query of the frame, those that never read the name too
    (most of a pass's time where the pass reads only times), where an unread column is left out. Not ``replace_strict``
    over the frame: in the streaming engine that holds every row at once."""
    ids, values = names["id"], names["value"]
    return pl.col(id_column).map_batches(lambda batch: batch.replace_strict(ids, values, default=None),
                                         return_dtype=values.dtype, is_elementwise=True)


def _scanned(trace: Trace, frame: str) -> pl.LazyFrame | None:
    """Event FRAME (:meth:`Trace.event_columns`) scanned from disk, of its table only the columns it is made of; None
    where TRACE is read whole, or the table lacks one of them."""
    if not is_streamed(trace):
        return None
    columns = trace.event_columns(frame, _named)
    used = {name for column in columns for name in column.meta.root_names()} | {"eventClass"}
    table, read = event_read(frame, trace.tables.columns)
    raw = _scan(trace, table, {name: dtype for name, dtype in read.items() if name in used})
    return None if raw is None else osrt_calls(raw).select(columns)  # eventClass: OSRT_API's alone


def _nvtx(trace: Trace) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """NVTX ranges and marks, as ``Trace.nvtx`` and ``Trace.nvtx_marks`` name them (ranges without ``depth`` where
    scanned: that needs the ranges in order, :mod:`nsight_core.analysis.windows`). A range that never ended ends at the
    table's last timestamp (one streamed pass); domains are the few domain-creation events, by (domain id, process)."""
    raw = _scan(trace, "NVTX_EVENTS", {"start": I64, "end": I64, "eventType": I64, "textId": I64, "text": STR,
                                       "globalTid": I64, "domainId": I64})
    if raw is None:
        return trace.nvtx.lazy(), trace.nvtx_marks.lazy()
    assert isinstance(trace.tables, SpilledTables)  # only a spilled export is scanned
    event_type = pl.col("eventType")
    is_range = event_type.is_in(NVTX_PUSH_POP_TYPES + NVTX_START_END_TYPES)
    if trace.tables not in _NVTX_PASSES:
        never_ended = pl.col("end").filter(is_range).null_count().alias("_open")
        _NVTX_PASSES[trace.tables] = (*raw.select(NVTX_LAST.alias("_last"), never_ended).collect(engine="streaming")
                                      .row(0), nvtx_domains(raw).collect(engine="streaming"))
    last, unended, domains = _NVTX_PASSES[trace.tables]
    # Without domains created (the default domain throughout), no lookup of them in any pass.
    in_domains = (raw.with_columns(pid_of(pl.col("globalTid")).alias("_pid"))
                  .join(domains.lazy(), on=["domainId", "_pid"], how="left") if domains.height
                  else raw.with_columns(pl.lit(None, STR).alias("domain")))
    named = (in_domains.with_columns(_named("textId", trace.strings).alias("_registered"))
             .with_columns(pl.coalesce("_registered", "text", pl.lit("")).alias("name"),
                           pl.col("domain").fill_null(""), pl.col("globalTid").alias("thread")))
    kind = pl.when(event_type.is_in(NVTX_PUSH_POP_TYPES)).then(pl.lit("push_pop")).otherwise(pl.lit("start_end"))
    # Where every range ended (the usual case), end_ns is the column itself: a filter on it then reaches the Parquet
    # scan, which skips the files that end before a window, where a filled column reads every file up to it.
    end, closed = ((pl.col("end"), pl.lit(True)) if not unended else
                   (pl.col("end").fill_null(pl.lit(last, I64)), pl.col("end").is_not_null()))
    ranges = named.filter(is_range).select(pl.col("start").alias("start_ns"), end.alias("end_ns"), "name", "domain",
                                           "thread", kind.alias("kind"), closed.alias("closed"))
    marks = named.filter(event_type.is_in(NVTX_MARK_TYPES)).select(pl.col("start").alias("time_ns"), "name",
                                                                    "domain", "thread")
    return ranges, marks
