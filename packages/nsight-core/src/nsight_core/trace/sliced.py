"""A capture's SQLite export made in slices of time, read as one export."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import polars as pl

from nsight_core.trace.export import SLICE_PATTERN, ExportChoice
from nsight_core.trace.tables import SQLITE_BATCH_ROWS, DamagedExportError, SqliteTables, Wanted

PART_ROWIDS = 1 << 48
"""A sliced export numbers its rows part by part: row R of part I is I * PART_ROWIDS + R, so that a range of rowids
(what :meth:`SqliteTables.rowid_slices` gives and :meth:`SqliteTables.batches` reads) names rows of one part, in the
parts' order. A rowid is within 2**47 of 0 (nsys numbers a table's rows from 1; an enum's id, its rowid, may be -1)."""
TIMED_COLUMNS = frozenset({"start", "timestamp"})
"""A table with one of these is one of events, which ``nsys export --times`` cuts by time; the others (strings,
threads, processes, GPUs, enums) it writes whole into every slice."""


class SlicedSqliteTables:
    """A folder of part-NNN.sqlite, a capture's SQLite export in slices of time, read as one :class:`SqliteTables`
    (how, and why it is exact: trace/export.py :func:`_export_sliced`); within a part, rows keep nsys' order."""

    def __init__(self, folder: Path, choice: ExportChoice | None = None) -> None:
        self.source = folder
        self.choice = choice
        files = sorted(folder.glob(SLICE_PATTERN))
        if not files:
            raise DamagedExportError(f"{folder} holds no SQLite export in slices ({SLICE_PATTERN}).")
        self._parts = [SqliteTables(file) for file in files]

    def _holding(self, table: str) -> list[tuple[int, SqliteTables]]:
        """The parts TABLE is read from, numbered: every part holding it for events, else the first that holds it."""
        holding = [(number, part) for number, part in enumerate(self._parts) if part.columns(table)]
        return holding if TIMED_COLUMNS & self.columns(table) else holding[:1]

    def columns(self, table: str) -> frozenset[str]:
        return next((found for part in self._parts if (found := part.columns(table))), frozenset())

    def read(self, table: str, wanted: Wanted, where: str = "") -> pl.DataFrame | None:
        """As :meth:`SqliteTables.read`; WHERE is asked of each part, so it may name TABLE's columns only."""
        found = [frame for _, part in self._holding(table) if (frame := part.read(table, wanted, where)) is not None]
        return pl.concat(found) if found else None

    def batches(self, table: str, wanted: Wanted, rows: int = SQLITE_BATCH_ROWS, where: str = "",
                rowids: tuple[int, int] | None = None) -> Iterator[pl.DataFrame]:
        """As :meth:`SqliteTables.batches`, ROWIDS numbered as ``PART_ROWIDS`` says."""
        if rowids is not None:
            number = (rowids[0] + PART_ROWIDS // 2) // PART_ROWIDS
            yield from self._parts[number].batches(table, wanted, rows, where,
                                                   (rowids[0] - number * PART_ROWIDS, rowids[1] - number * PART_ROWIDS))
            return
        for _, part in self._holding(table):
            yield from part.batches(table, wanted, rows, where)

    def rowid_slices(self, table: str, parts: int) -> list[tuple[int, int]] | None:
        """As :meth:`SqliteTables.rowid_slices`: each part's own slices (PARTS shared among them), numbered as
        ``PART_ROWIDS`` says."""
        holding = self._holding(table)
        each = -(-parts // max(1, len(holding)))
        found = [(number, part.rowid_slices(table, each)) for number, part in holding]
        if all(slices is None for _, slices in found):
            return None
        return [(number * PART_ROWIDS + low, number * PART_ROWIDS + high)
                for number, slices in found for low, high in slices or []]

    def arrow_bytes(self, tables: Iterable[str]) -> int:
        return sum(part.arrow_bytes([table]) for table in tables for _, part in self._holding(table))


SqliteExport = SqliteTables | SlicedSqliteTables
"""An SQLite export in one file or in slices of time: what a large capture's tables are copied from (trace/spill.py)."""
