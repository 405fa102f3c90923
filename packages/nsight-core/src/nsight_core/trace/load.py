"""``load_trace``: a capture's events from its .nsys-rep (one export, cached), an SQLite or arrow export."""

from __future__ import annotations

from pathlib import Path

from nsight_core.errors import StatsError
from nsight_core.memory import fits, summary_bytes
from nsight_core.nsys import Nsys
from nsight_core.trace.export import (
    PARQUET_SLICE_PATTERN,
    REPORT_SUFFIXES,
    SLICE_PATTERN,
    SQLITE_SUFFIX,
    ExportChoice,
    chosen_export,
    discard,
    export,
)
from nsight_core.trace.model import Trace
from nsight_core.trace.parquet import SlicedParquetTables
from nsight_core.trace.schema import EVENT_TABLES
from nsight_core.trace.sliced import SlicedSqliteTables, SqliteExport
from nsight_core.trace.spill import SpilledTables
from nsight_core.trace.tables import ArrowDirTables, DamagedExportError, ExportTables, SqliteTables


def load_trace(path: str | Path, nsys: Nsys | None = None) -> Trace:
    """The events of PATH: a .nsys-rep (exported once beside it, as :func:`export_choice` picks), a .sqlite export
    (or the folder of one in slices of time nsight made), or an arrow directory (`nsys export --type arrowdir`). A
    large capture's tables are also scanned from Parquet copies on disk, for reports that stream
    (:mod:`nsight_core.trace.spill`).

    >>> trace = load_trace("training.nsys-rep")
    >>> trace.nvtx.filter(pl.col("name") == "step").select((pl.col("end_ns") - pl.col("start_ns")).quantile(0.95))
    """
    path = Path(path)
    if not path.exists():
        raise StatsError(f"{path} does not exist: pass a .nsys-rep, its .sqlite export or an arrow-directory "
                         "export (nsys export --type arrowdir).")
    if path.suffix in REPORT_SUFFIXES:
        return _from_report(path, nsys)
    if path.is_dir() and any(path.glob(PARQUET_SLICE_PATTERN)):
        parts = sorted(path.glob(PARQUET_SLICE_PATTERN))  # as a passed SQLite export that streams is said to be
        return Trace(SpilledTables(SlicedParquetTables(path), ExportChoice(
            kind="parquetdir", streamed=True, reason="memory", trace_bytes=sum(part.stat().st_size for part in parts),
            slices=len({part.parent for part in parts}))))
    if path.is_dir() and not any(path.glob(SLICE_PATTERN)):
        return Trace(ArrowDirTables(path))
    if path.is_dir() or path.suffix == SQLITE_SUFFIX:
        try:
            tables: SqliteExport = SlicedSqliteTables(path) if path.is_dir() else SqliteTables(path)
        except DamagedExportError as error:
            raise DamagedExportError(f"{error} {_sqlite_remedy(path)}") from error
        # Passed as it is: streamed only where its events would not fit the memory allowed read whole.
        if fits(summary_bytes(tables.arrow_bytes(EVENT_TABLES))):
            return Trace(tables)
        parts = sorted(path.glob(SLICE_PATTERN)) if path.is_dir() else [path]
        choice = ExportChoice(kind="sqlitedir" if path.is_dir() else "sqlite", streamed=True, reason="memory",
                              trace_bytes=sum(part.stat().st_size for part in parts), slices=len(parts))
        return Trace(SpilledTables(tables, choice))
    raise StatsError(f"{path} is not a trace: pass a .nsys-rep, its .sqlite export or an arrow-directory export.")


def _sqlite_remedy(sqlite: Path) -> str:
    """What to do about a damaged .sqlite a user passed: its capture, when it lies beside it, does not need it."""
    for suffix in sorted(REPORT_SUFFIXES):
        if (report := sqlite.with_suffix(suffix)).exists():
            return f"Pass {report} instead: nsight exports it itself."
    return ("Pass the .nsys-rep it was exported from (nsight exports it itself), or export it again with "
            "`nsys export --type sqlite --force-overwrite=true CAPTURE.nsys-rep`.")


def _from_report(report: Path, nsys: Nsys | None) -> Trace:
    """Export REPORT once, as :func:`export_choice` picks, and open it. An export that turns out unreadable is
    discarded and made again once; a second failure is an error that names the file, never an empty trace."""
    choice, target = chosen_export(report, nsys)
    try:
        tables = _open(target, choice)
    except DamagedExportError:
        discard(target)
        tables = _open(export(report, choice.kind, nsys, choice.slices), choice)
    return Trace(tables, report)


def _open(target: Path, choice: ExportChoice) -> ExportTables:
    if choice.kind == "arrowdir":
        return ArrowDirTables(target, choice)
    if choice.kind == "parquetdir":
        return SpilledTables(SlicedParquetTables(target), choice)
    sqlite = SlicedSqliteTables(target) if choice.kind == "sqlitedir" else SqliteTables(target)
    if choice.streamed:
        return SpilledTables(sqlite, choice)
    sqlite.choice = choice
    return sqlite
