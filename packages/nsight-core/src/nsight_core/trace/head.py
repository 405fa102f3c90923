"""The first part of a large capture, read whole: its events up to a time, as a Trace of their own.

Why: a capture's diagnosis ("What to fix") reads whole frames, and a capture of several gigabytes does not fit.
Its steps are local in time, though: the first steps alone, read whole, get the same analysis as any capture
that size (:func:`nsight_core.profile.first_part` picks how many fit the memory allowed). The rows are
selected from the Parquet copies the statistics made where those hold the columns (a scan that skips the files
after the cut), else by SQLite from the export (one scan of the table), so only the part is ever in memory.

What "up to a time" means, per table: the host's events (CUDA calls, NVTX, OS calls, CPU samples, CUDA
synchronisation) that start before CUT_NS; the GPU's work (kernels, graphs, copies, memsets) that those CUDA
calls launched, which may run after the cut (PyTorch launches ahead of the GPU). The collection window is the
span of those events (no ANALYSIS_DETAILS), so the user window and the range shares are the part's own (and the
profiler's time before them is the whole capture's summary's to tell).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import polars as pl

from nsight_core.trace.export import ExportChoice
from nsight_core.trace.model import Trace
from nsight_core.trace.spill import SpilledTables
from nsight_core.trace.tables import SqliteExport, Wanted

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
HOST_TABLES = frozenset({RUNTIME, "NVTX_EVENTS", "OSRT_API", "COMPOSITE_EVENTS",
                         "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"})
"""Tables of events on the host's clock with a ``start``: cut at the time."""
LAUNCHED_TABLES = frozenset({"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
                             "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"})
"""Tables of GPU work with a ``correlationId``: kept where a CUDA call before the cut launched it."""
LEFT_OUT = frozenset({"ANALYSIS_DETAILS"})
"""The whole capture's duration: the part's window is its events' span instead."""


class HeadTables:
    """The export's tables (SQLite, in one file or in slices of time) restricted to the events up to CUT_NS (see the
    module).

    From a :class:`SpilledTables`, a table the statistics already copied to Parquet is read from that copy (the
    same rows, typed alike; the scan skips the files after the cut), the others from SQLite."""

    def __init__(self, tables: SqliteExport | SpilledTables, cut_ns: int, choice: ExportChoice | None) -> None:
        self.source: Path = tables.source
        self.choice = choice
        self.cut_ns = cut_ns
        self._copies = tables if isinstance(tables, SpilledTables) else None
        self._sqlite = tables.sqlite if isinstance(tables, SpilledTables) else tables

    def columns(self, table: str) -> frozenset[str]:
        return frozenset() if table in LEFT_OUT else self._sqlite.columns(table)

    def read(self, table: str, wanted: Wanted) -> pl.DataFrame | None:
        before = pl.col("start") < self.cut_ns
        if table in HOST_TABLES:
            if (copy := self._copy(table, {"start": pl.Int64, **wanted})) is not None:
                return copy.filter(before).select(list(wanted)).collect()
            return self._sqlite.read(table, wanted, where='"start" < ?', parameters=(self.cut_ns,))
        if table in LAUNCHED_TABLES:
            if {"correlationId"} <= self._sqlite.columns(RUNTIME) & self._sqlite.columns(table):
                # Which calls launched it joins two tables: an export in slices answers per file, and a call may lie in
                # one slice and its work in the next, so it is the copies' to join, made now where none is yet.
                made = not self._sqlite.joins_tables
                calls = self._copy(RUNTIME, {"start": pl.Int64, "correlationId": None}, made)
                copy = self._copy(table, {**wanted, "correlationId": None}, made) if calls is not None else None
                if calls is not None and copy is not None:
                    launched = calls.filter(before).select("correlationId").collect()["correlationId"]
                    return copy.filter(pl.col("correlationId").is_in(launched.implode())).select(list(wanted)).collect()
                return self._sqlite.read(table, wanted, where=f'"correlationId" IN (SELECT "correlationId" FROM '
                                         f'"{RUNTIME}" WHERE "start" < ?)', parameters=(self.cut_ns,))
            return self._sqlite.read(table, wanted, where='"start" < ?', parameters=(self.cut_ns,))
        return self._sqlite.read(table, wanted)

    def _copy(self, table: str, wanted: Wanted, made: bool = False) -> pl.LazyFrame | None:
        """TABLE's Parquet copy holding WANTED: one the statistics made, or, where MADE, one made now if need be."""
        if self._copies is None:
            return None
        return (self._copies.scan if made else self._copies.copied)(table, wanted)

    def arrow_bytes(self, tables: Iterable[str]) -> int:
        """The whole export's (an upper bound: the part's are not known before it is read)."""
        return self._sqlite.arrow_bytes(tables)


def head(tables: SqliteExport | SpilledTables, cut_ns: int, choice: ExportChoice | None = None) -> Trace:
    """The capture of TABLES' export up to CUT_NS (see the module) as a Trace, whose frames are read whole."""
    return Trace(HeadTables(tables, cut_ns, choice))
