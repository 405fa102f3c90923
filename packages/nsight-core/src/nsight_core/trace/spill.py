"""A large capture's event tables copied to Parquet on disk, for summaries that stream: from its SQLite export, or
rewritten from nsys' own Parquet export (:mod:`nsight_core.trace.parquet`) into row groups a window's scan skips.

Why: a Trace holds its frames whole. From SQLite (the export whose memory does not grow with the capture) each table
the summary reads is copied, its needed columns only, into Parquet files of ``SQLITE_BATCH_ROWS`` rows each (one batch
at a time in memory); Polars' streaming engine then scans those files (:mod:`nsight_core.trace.streamed`), so no whole
event table is ever in memory.

The files live in a temporary folder beside the export (or in the temp folder where that is not writable), removed
when the tables are closed or garbage-collected, at the latest when the interpreter exits; one a killed process left is
removed by the next process that copies tables there. Before a table is copied the free space there is checked against
the table's size as Arrow, an upper bound of its Parquet size."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl

from nsight_core.claims import abandoned
from nsight_core.errors import StatsError
from nsight_core.trace.export import ExportChoice
from nsight_core.trace.parquet import SlicedParquetTables
from nsight_core.trace.sliced import SqliteExport
from nsight_core.trace.tables import SQLITE_BATCH_ROWS, Schema, Wanted, _made
from nsight_core.units import size as _size

log = logging.getLogger("nsight")

SPILL_READERS = 4
"""Slices of a table copied side by side, each through a connection of its own (no more than Polars' threads): one
batch of rows each in memory."""
PROGRESS_BYTES = 64 << 20
"""A table copied to disk is named on stderr from this size on (the copy takes seconds); smaller ones under -v."""
SPILL_PREFIX = "nsight-spill-"
"""The temporary folder's name starts with this and the process id (``.`` before it: hidden beside the capture)."""


class SpilledTables:
    """An export (SQLite, or nsys' Parquet in slices) read as it is, its tables also scanned lazily from Parquet."""

    def __init__(self, export: SqliteExport | SlicedParquetTables, choice: ExportChoice,
                 folder: Path | None = None) -> None:
        self.source = export.source
        self.choice: ExportChoice | None = choice
        self.export = export
        """The export these tables read (the Python backtraces' marks are read from it with a condition)."""
        prefix = f"{SPILL_PREFIX}{os.getpid()}-"
        try:
            self.folder = Path(tempfile.mkdtemp(prefix="." + prefix, dir=folder or export.source.parent))
        except OSError:  # a read-only folder: the temp folder
            self.folder = Path(tempfile.mkdtemp(prefix=prefix))
        for leftover in abandoned(self.folder.parent, rf"\.?{SPILL_PREFIX}(\d+)(-.*)?"):  # a killed process's copies
            shutil.rmtree(leftover, ignore_errors=True)
        self._remove = weakref.finalize(self, shutil.rmtree, self.folder, ignore_errors=True)
        self._copies: dict[str, list[tuple[Path, Schema]]] = {}
        """Per table, each Parquet copy made and its columns: a scan of some of them reads it again."""
        self._lock = threading.Lock()

    def columns(self, table: str) -> frozenset[str]:
        return self.export.columns(table)

    def read(self, table: str, wanted: Wanted) -> pl.DataFrame | None:
        """TABLE read whole from the export (the analysis, where its frames fit). Not through a Parquet copy: for a
        whole profile that is slower and no leaner."""
        return self.export.read(table, wanted)

    def arrow_bytes(self, tables: Iterable[str]) -> int:
        return self.export.arrow_bytes(tables)

    def scan(self, table: str, wanted: Wanted) -> pl.LazyFrame | None:
        """TABLE's WANTED columns (typed as :meth:`read` gives them) as a lazy scan of Parquet files: of a copy already
        made that holds them, else of one copied from the SQLite export now; None when the export has no such table."""
        if not self.columns(table):
            return None
        made = dict(_made(wanted))
        with self._lock:  # two threads asking for one table copy it once
            copies = self._copies.setdefault(table, [])
            found = next(((folder, columns) for folder, columns in copies
                          if all(columns.get(name) == dtype for name, dtype in made.items())), None)
            if found is None:
                found = (self._spill(table, wanted, self.folder / f"{table}-{len(copies)}"), made)
                copies.append(found)
        folder, columns = found
        # In the table's order: the files are named by batch.
        return pl.scan_parquet(sorted(folder.glob("*.parquet")), schema=columns).select(list(made))

    def _spill(self, table: str, wanted: Wanted, target: Path) -> Path:
        needed, free = self.export.arrow_bytes([table]), shutil.disk_usage(self.folder).free
        if needed > free:
            raise StatsError(f"summarising {self.source.name} copies its table {table} to disk (about "
                             f"{_size(needed)}) and {self.folder.parent} has {_size(free)} free: free some space "
                             "there, or pass a copy of the capture in a folder with more.")
        log.log(logging.INFO if needed >= PROGRESS_BYTES else logging.DEBUG,
                "copying %s's table %s to disk (Parquet, about %s as Arrow)", self.source.name, table, _size(needed))
        target.mkdir()
        source = self.export

        def copy(sqlite: SqliteExport, part: int, rowids: tuple[int, int] | None) -> None:
            for written, batch in enumerate(sqlite.batches(table, wanted, rowids=rowids)):
                # Named in the table's order. Uncompressed: every pass of a summary reads the copy again, and
                # decompressing takes longer than reading; at most the table's bytes as Arrow, found free above.
                batch.write_parquet(target / f"{part:04d}-{written:06d}.parquet", compression="uncompressed")

        try:
            if isinstance(source, SlicedParquetTables):  # one streamed pass, in row groups a scan skips by time
                scanned = source.scan(table, wanted)
                assert scanned is not None  # the table has columns
                scanned.sink_parquet(target / "0000-000000.parquet", compression="uncompressed",
                                     row_group_size=SQLITE_BATCH_ROWS)
            else:  # a sliced export may give more slices (one a part at least) than readers
                readers = min(SPILL_READERS, pl.thread_pool_size())
                found = source.rowid_slices(table, readers)
                slices: list[tuple[int, int] | None] = [*found] if found else [None]
                with ThreadPoolExecutor(min(len(slices), readers), thread_name_prefix="nsight-spill") as pool:
                    for done in [pool.submit(copy, source, part, rowids) for part, rowids in enumerate(slices)]:
                        done.result()
        except BaseException:  # never half a table: the next scan copies it again, or fails the same way
            shutil.rmtree(target, ignore_errors=True)
            raise
        if not any(target.iterdir()):  # an empty table: one empty file, so the scan has its schema
            pl.DataFrame(schema=_made(wanted)).write_parquet(target / "0000-000000.parquet")
        return target

    def close(self) -> None:
        """Remove the Parquet files now (they are also removed when these tables are garbage-collected)."""
        self._remove()
