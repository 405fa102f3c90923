"""A capture's Parquet export in slices of time (trace/export.py, kind 'parquetdir'), scanned as nsys wrote it.

Why: a large capture's reports stream their events from Parquet (trace/streamed.py); from an SQLite export every table
they read is first copied there (trace/spill.py), where nsys' own Parquet export is that copy, made faster."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import polars as pl

from nsight_core.trace.export import PARQUET_META, PARQUET_SLICE_PATTERN, ExportChoice
from nsight_core.trace.sliced import TIMED_COLUMNS
from nsight_core.trace.tables import (
    DamagedExportError,
    Schema,
    SchemaMismatch,
    SqliteTables,
    Wanted,
    _made,
    same_kind,
)

ROW_BYTES = 8
"""Bytes per value as Arrow, where a table's size is estimated from its rows and columns (Parquet's own sizes are
compressed)."""


class SlicedParquetTables:
    """An `nsys export --type parquetdir` in slices of time, FOLDER/part-NNN/<TABLE>.parquet, read as one export
    (trace/export.py :func:`_export_sliced`)."""

    def __init__(self, folder: Path, choice: ExportChoice | None = None) -> None:
        self.source = folder
        self.choice = choice
        self._files: dict[str, list[Path]] = {}
        for path in sorted(folder.glob(PARQUET_SLICE_PATTERN)):
            self._files.setdefault(path.stem, []).append(path)
        if not self._files:
            raise DamagedExportError(f"{folder} holds no Parquet export in slices ({PARQUET_SLICE_PATTERN}).")
        self._schemas: dict[str, Schema] = {}
        meta = folder / PARQUET_META
        self._left_out = SqliteTables(meta) if meta.exists() else None
        """The tables nsys' Parquet export leaves out (META_DATA_CAPTURE), where nsight exported them beside it."""

    def _schema(self, table: str) -> Schema:
        if table not in self._schemas:
            try:
                self._schemas[table] = pl.read_parquet_schema(self._files[table][0])
            except (OSError, pl.exceptions.PolarsError) as error:
                raise DamagedExportError(f"{self._files[table][0]} cannot be read as Parquet ({error}); delete "
                                         f"{self.source} and load the .nsys-rep again to export it anew.") from error
        return self._schemas[table]

    def _holding(self, table: str) -> list[Path]:
        files = self._files.get(table, [])
        return files if TIMED_COLUMNS & self.columns(table) else files[:1]

    def columns(self, table: str) -> frozenset[str]:
        if table not in self._files:
            return self._left_out.columns(table) if self._left_out else frozenset()
        return frozenset(self._schema(table))

    def scan(self, table: str, wanted: Wanted) -> pl.LazyFrame | None:
        """TABLE's WANTED columns as :meth:`read` gives them, a lazy scan of its files; None when there is no TABLE.
        A column of another kind than wanted (text for a number) is a :class:`SchemaMismatch`."""
        if table not in self._files:
            found = self._left_out.read(table, wanted) if self._left_out else None
            return found.lazy() if found is not None else None
        schema, made = self._schema(table), _made(wanted)
        mistyped = {name: str(schema[name]) for name, dtype in made.items()
                    if name in schema and not same_kind(schema[name], dtype)}
        if mistyped:
            raise SchemaMismatch(table, mistyped)
        return pl.scan_parquet(self._holding(table)).select(
            pl.lit(None, dtype).alias(name) if name not in schema else pl.col(name) if schema[name] == dtype
            else pl.col(name).cast(dtype) for name, dtype in made.items())

    def read(self, table: str, wanted: Wanted) -> pl.DataFrame | None:
        scanned = self.scan(table, wanted)
        return scanned.collect() if scanned is not None else None

    def arrow_bytes(self, tables: Iterable[str]) -> int:
        return sum(ROW_BYTES * len(self.columns(table))
                   * pl.scan_parquet(self._holding(table)).select(pl.len()).collect().item()
                   for table in tables if table in self._files)
