"""The raw tables of one nsys export, read column by column into Polars: an arrow directory or SQLite.

nsys names its tables and columns the same way in every export format (CUPTI_ACTIVITY_KIND_KERNEL with start, end,
deviceId ...), so the Trace is built from one interface, :class:`ExportTables`: "these columns of that table, or None
when the export has no such table". nsys writes a table only when it holds data (lazy export), so a missing table means
"nothing of this kind was traced", not an error. A column of another type than the Trace wants (a schema nsight-core has
not seen) raises :class:`SchemaMismatch`, naming the table and the columns, which the Trace turns into a note.

An arrow directory (`nsys export --type arrowdir`) holds one Arrow IPC *stream* file per table; Polars reads just the
requested columns of it without a Python object per row. SQLite (a `.sqlite` passed, an nsys without arrowdir, a capture
too large for the arrow export's memory: trace/export.py) is read in batches, so memory stays bounded by one batch: with
ADBC's SQLite driver where it is installed (the ``sqlite-arrow`` extra: Arrow batches straight into Polars), else with
the standard library's sqlite3. A read with a condition (the Python backtraces' marks) is one sqlite3 query."""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import sqlite3
import struct
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

import polars as pl

from nsight_core.errors import StatsError, one_line
from nsight_core.trace.export import ExportChoice

if TYPE_CHECKING:  # the sqlite-arrow extra's
    from adbc_driver_manager import AdbcConnection, AdbcDatabase

Schema = Mapping[str, pl.DataType | type[pl.DataType]]
"""Column name -> the Polars type the Trace wants it as."""
Wanted = Mapping[str, pl.DataType | type[pl.DataType] | None]
"""The columns to read: name -> the Polars type the Trace wants, or None for an id that is only looked up or
compared. That one keeps the export's own integer type (casting nsys' UInt32/UInt64 ids to Int64 would copy the
column while the original is alive), Int64 where the column must be made (SQLite rows, a column the export lacks)."""
SQLITE_BATCH_ROWS = 200_000
"""Rows per sqlite3 fetch: bounds the Python objects alive at once on the SQLite path."""
ENV_SQLITE_READER = "NSIGHT_SQLITE_READER"
"""``sqlite3``: read SQLite exports with the standard library even where ADBC's driver is installed (a way round a
driver that misbehaves; the tests compare the two)."""
SQLITE_TO_ARROW = 2.5
"""Bytes as Arrow per byte of SQLite pages: SQLite stores integers in as few bytes as they need, Arrow in 8."""


class ExportTables(Protocol):
    """Columns of the tables of one export."""

    source: Path
    choice: ExportChoice | None
    """Which export nsight chose for the capture and why; None for an export the user passed."""

    def columns(self, table: str) -> frozenset[str]:
        """The column names of TABLE (empty when it is missing)."""

    def read(self, table: str, wanted: Wanted) -> pl.DataFrame | None:
        """The WANTED columns of TABLE in its rows' order, cast to their types (None: as exported), or None when the
        export has no such table."""

    def arrow_bytes(self, tables: Iterable[str]) -> int:
        """About how many bytes TABLES hold as Arrow (every column), without reading them."""


_CONTINUATION = b"\xff\xff\xff\xff"
"""Arrow IPC: the marker before each message's length; followed by a zero length, the end of a stream."""


class ArrowDirTables:
    """An `nsys export --type arrowdir` directory: <table>.arrow IPC stream files."""

    def __init__(self, directory: Path, choice: ExportChoice | None = None) -> None:
        self.source = directory
        self.choice = choice
        self._files = {path.stem: path for path in directory.glob("*.arrow")}
        if not self._files:
            raise StatsError(f"{directory} holds no .arrow tables: it is not an nsys arrowdir export "
                             "(nsys export --type arrowdir), or the export was interrupted.")
        self._columns: dict[str, frozenset[str]] = {}

    def columns(self, table: str) -> frozenset[str]:
        if table not in self._files:
            return frozenset()
        if table not in self._columns:
            self._columns[table] = frozenset(self._header(table).columns)
        return self._columns[table]

    def _header(self, table: str) -> pl.DataFrame:
        """An empty frame with TABLE's columns, from the stream's first message alone: Polars reads a whole IPC stream
        even for ``n_rows=0``. The stream starts with its schema message (an optional 0xFFFFFFFF marker, its length,
        the message), so that message followed by the end-of-stream marker is a complete, empty stream."""
        try:
            with self._files[table].open("rb") as stream:
                head = stream.read(8)
                prefix = head if head[:4] == _CONTINUATION else head[:4]  # ends with the message's length
                (size,) = struct.unpack("<i", prefix[-4:])
                stream.seek(len(prefix))
                message = stream.read(size)
            if size <= 0 or len(message) != size:
                raise ValueError("truncated schema message")
            return pl.read_ipc_stream(io.BytesIO(prefix + message + _CONTINUATION + bytes(4)))
        except (OSError, ValueError, struct.error, pl.exceptions.PolarsError):
            return self._read(table, None, n_rows=0)  # the whole stream; a damaged one fails there, by name

    def read(self, table: str, wanted: Wanted) -> pl.DataFrame | None:
        if table not in self._files:
            return None
        return _typed(self._read(table, [c for c in wanted if c in self.columns(table)]), wanted, table)

    def arrow_bytes(self, tables: Iterable[str]) -> int:
        return sum(self._files[table].stat().st_size for table in tables if table in self._files)

    def _read(self, table: str, columns: list[str] | None, n_rows: int | None = None) -> pl.DataFrame:
        path = self._files[table]
        try:
            return pl.read_ipc_stream(path, columns=columns, n_rows=n_rows)
        except (OSError, pl.exceptions.PolarsError) as error:
            raise DamagedExportError(f"{path} cannot be read as an Arrow table ({one_line(error)}); delete "
                                     f"{self.source} and load the .nsys-rep again to export it anew.") from error


class SqliteTables:
    """An `nsys export --type sqlite` file, read table by table in batches through one connection, shared by the
    threads that read frames (the analysis runs beside the reports), one query at a time under a lock: sqlite3 refuses
    a connection another thread made unless told, and reads nothing faster for two cursors at once."""

    def __init__(self, path: Path, choice: ExportChoice | None = None) -> None:
        self.source = path
        self.choice = choice
        self._lock = threading.RLock()
        try:
            self._connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            names = self._connection.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        except sqlite3.DatabaseError as error:
            raise DamagedExportError(f"{path} is not a readable SQLite export ({one_line(error)}).") from error
        self._tables = frozenset(name for (name,) in names)
        if "StringIds" not in self._tables and "ANALYSIS_DETAILS" not in self._tables:
            raise DamagedExportError(f"{path} is empty or not an nsys SQLite export (no StringIds table).")
        self._arrow = _arrow_connection(path)
        if self._arrow is not None:  # ADBC holds its file open until closed, not when collected
            weakref.finalize(self, self._arrow.close)
        self._table_bytes: dict[str, int] = {}
        """Each table's bytes in SQLite's pages, as :meth:`arrow_bytes` found them."""

    def columns(self, table: str) -> frozenset[str]:
        if table not in self._tables:
            return frozenset()
        with self._lock:
            return frozenset(row[1] for row in self._connection.execute(f'PRAGMA table_info("{table}")'))

    def read(self, table: str, wanted: Wanted, where: str = "") -> pl.DataFrame | None:
        """TABLE's WANTED columns, of the rows that satisfy WHERE (an SQL condition) where given."""
        if table not in self._tables:
            return None
        return pl.concat([pl.DataFrame(schema=_made(wanted)), *self.batches(table, wanted, where=where)])

    def batches(self, table: str, wanted: Wanted, rows: int = SQLITE_BATCH_ROWS, where: str = "",
                rowids: tuple[int, int] | None = None) -> Iterator[pl.DataFrame]:
        """TABLE's WANTED columns ROWS rows at a time, in its rows' order (none when the table is missing or empty).
        WHERE: an SQL condition on TABLE's rows. ROWIDS: only the rows of rowid LO <= rowid < HI, through an ADBC
        connection of their own (one of :meth:`rowid_slices`, read beside the others)."""
        if table not in self._tables:
            return
        schema, present = _made(wanted), self.columns(table)
        listed = ", ".join(f'"{c}"' if c in present else f'NULL AS "{c}"' for c in schema)
        if self._arrow is not None and not where:
            own = _arrow_connection(self.source) if rowids is not None else None  # a slice's, read beside the others
            with contextlib.closing(own) if own is not None else contextlib.nullcontext():
                connection = self._arrow.connection if rowids is None else own.connection if own else None
                yield from self._arrow_batches(table, schema, present, listed, rows, connection, rowids)
            return
        # In the table's own order, whatever indexes a tool added: the Trace reads a table's columns in more than one
        # query and lines them up by row (an index that covers a query would give its rows in the index's order).
        if rowids is not None:  # a slice read with sqlite3 (rowid_slices gives none for it, but a caller may)
            where = f"({where or 1}) AND rowid >= {int(rowids[0])} AND rowid < {int(rowids[1])}"
        query = f'SELECT {listed} FROM "{table}" {f"WHERE {where}" if where else ""} ORDER BY rowid'
        yield from self._sqlite_batches(table, query, schema, present, rows)

    def _sqlite_batches(self, table: str, query: str, schema: Schema, present: frozenset[str],
                        rows: int) -> Iterator[pl.DataFrame]:
        """QUERY's rows through sqlite3 as frames of SCHEMA, ROWS at a time; its errors in nsight-core's words."""
        try:
            with self._lock:
                cursor = self._connection.execute(query)
                while batch := cursor.fetchmany(rows):
                    yield pl.DataFrame(batch, schema=schema, orient="row")
        except sqlite3.DatabaseError as error:
            raise DamagedExportError(f"{self.source}: table {table} cannot be read ({one_line(error)}).") from error
        except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError) as error:
            raise SchemaMismatch(table, self._mistyped(table, schema, present), error) from error

    def rowid_slices(self, table: str, parts: int) -> list[tuple[int, int]] | None:
        """TABLE's rows cut into at most PARTS ranges of rowid (lo, hi: lo <= rowid < hi) of about equal span, in
        order, to be read side by side (:meth:`batches` ROWIDS): SQLite serves several connections at once, where one
        reads a batch at a time. None where they would not be read through ADBC (the standard library's rows are made
        under the GIL) or TABLE is missing or empty."""
        if self._arrow is None or table not in self._tables:
            return None
        with self._lock:  # each alone: SQLite finds MIN or MAX of rowid in its b-tree, both in one query by a full scan
            low, high = self._connection.execute(f'SELECT (SELECT MIN(rowid) FROM "{table}"), '
                                                 f'(SELECT MAX(rowid) FROM "{table}")').fetchone()
        if low is None:
            return None
        parts = max(1, min(parts, (high + 1 - low) // SQLITE_BATCH_ROWS))  # a batch of rows each at least
        return list(itertools.pairwise(sorted({low + (high + 1 - low) * part // parts for part in range(parts + 1)})))

    def _arrow_batches(self, table: str, schema: Schema, present: frozenset[str], listed: str, rows: int,
                       connection: AdbcConnection | None, rowids: tuple[int, int] | None) -> Iterator[pl.DataFrame]:
        """:meth:`batches` of a table through ADBC's CONNECTION (None: a fresh one failed, read with sqlite3): ROWS rows
        a query, each query starting after the last rowid of the one before (keyset), so that one Arrow stream never
        holds more than a batch (the driver's stream cannot be read a batch at a time without pyarrow); the rows of
        ROWIDS only where given. The driver takes a column's type from its first values: a column null in those and a
        float or text later fails its query, which is then read with sqlite3 (the same rows)."""
        after: int | None = None if rowids is None else rowids[0] - 1
        bound = "" if rowids is None else f" AND rowid < {int(rowids[1])}"
        while True:
            query = (f'SELECT rowid AS "{_ROWID}", {listed} FROM "{table}" '
                     f'{f"WHERE rowid > {int(after)}{bound}" if after is not None else ""} ORDER BY rowid '
                     f'LIMIT {int(rows)}')
            frame = self._arrow_query(query, connection)
            if frame is None:
                numbered = {_ROWID: pl.Int64, **schema}
                frame = pl.concat([pl.DataFrame(schema=numbered),
                                   *self._sqlite_batches(table, query, numbered, present, rows)])
            if not frame.height:
                return
            after = frame[_ROWID][-1]
            # A column with no value in the batch is typed by the driver's guess (Int64): it holds nothing to cast.
            frame = frame.with_columns(pl.lit(None, dtype).alias(name) for name, dtype in schema.items()
                                       if frame[name].null_count() == frame.height)
            mistyped = [name for name, dtype in schema.items() if not _casts(frame[name], dtype)]
            if mistyped:
                raise SchemaMismatch(table, self._mistyped(table, schema, present) or
                                     {name: str(frame.schema[name]) for name in mistyped})
            yield frame.select(pl.col(name).cast(dtype) for name, dtype in schema.items())
            if frame.height < rows:
                return

    def _arrow_query(self, query: str, connection: AdbcConnection | None) -> pl.DataFrame | None:
        """QUERY's rows as one frame read through ADBC's CONNECTION, or None where the driver failed on them (or there
        is no connection). The shared connection is used under the lock, one of a slice's own without it."""
        from adbc_driver_manager import AdbcStatement, Error

        if connection is None:
            return None
        shared = self._arrow is not None and connection is self._arrow.connection
        with self._lock if shared else contextlib.nullcontext(), AdbcStatement(connection) as statement:
            try:
                statement.set_sql_query(query)
                stream, _ = statement.execute_query()
                return pl.DataFrame(stream)
            except (Error, pl.exceptions.PolarsError):
                return None

    def _mistyped(self, table: str, schema: Schema, present: frozenset[str]) -> dict[str, str]:
        """The columns of SCHEMA whose values in TABLE are of another storage class than the type wanted:
        name -> the classes found (only asked once a read has failed)."""
        wanted_class = {name: "text" if dtype == pl.String else "real" if dtype.is_float() else "integer"
                        for name, dtype in schema.items() if name in present}
        found: dict[str, str] = {}
        for name, expected in wanted_class.items():
            with self._lock:
                classes = {row[0] for row in self._connection.execute(
                    f'SELECT DISTINCT typeof("{name}") FROM "{table}" LIMIT 8')} - {"null", expected}
            if classes - ({"integer"} if expected == "real" else set()):
                found[name] = "/".join(sorted(classes))
        return found

    def arrow_bytes(self, tables: Iterable[str]) -> int:
        """From the tables' pages (SQLite's dbstat), or the whole file's size where SQLite lacks dbstat. Each table's
        count is kept: dbstat reads every page of the file, and a streamed profile asks more than once."""
        present = sorted({table for table in tables if table in self._tables})
        with self._lock:
            if missing := [table for table in present if table not in self._table_bytes]:
                try:
                    marks = ", ".join("?" for _ in missing)
                    found = dict(self._connection.execute(
                        f"SELECT name, SUM(pgsize) FROM dbstat WHERE name IN ({marks}) GROUP BY name", missing))
                except sqlite3.DatabaseError:  # no dbstat in this build of SQLite
                    return int(self.source.stat().st_size * SQLITE_TO_ARROW)
                self._table_bytes.update({table: found.get(table, 0) for table in missing})
            return int(sum(self._table_bytes[table] for table in present) * SQLITE_TO_ARROW)


_ROWID = "_nsight_rowid"


class _Arrow(NamedTuple):
    """An ADBC database and its connection: neither closes its file when collected, so both are closed together."""

    database: AdbcDatabase
    connection: AdbcConnection

    def close(self) -> None:
        self.connection.close()
        self.database.close()


def _arrow_connection(path: Path) -> _Arrow | None:
    """A read-only ADBC connection to the SQLite export at PATH where ADBC's SQLite driver is installed and not turned
    off (``NSIGHT_SQLITE_READER=sqlite3``), else None."""
    if os.environ.get(ENV_SQLITE_READER) == "sqlite3":
        return None
    try:
        import adbc_driver_sqlite
        from adbc_driver_manager import AdbcConnection, Error
    except ImportError:
        return None
    try:
        database = adbc_driver_sqlite.connect(f"file:{path}?mode=ro")
        return _Arrow(database, AdbcConnection(database))
    except Error:  # the sqlite3 connection reads it, or says why not
        return None


def _typed(frame: pl.DataFrame, wanted: Wanted, table: str) -> pl.DataFrame:
    """FRAME in WANTED's order and types; a column the export lacks (an older schema) is null. An id (None)
    must be an integer; a column that does not cast is a :class:`SchemaMismatch` naming it."""
    made = _made(wanted)
    mistyped = {name: str(frame.schema[name]) for name, dtype in wanted.items() if name in frame.columns
                and not _casts(frame[name], pl.Int64 if dtype is None else dtype)}
    if mistyped:
        raise SchemaMismatch(table, mistyped)
    return frame.select((pl.col(name) if dtype is None else pl.col(name).cast(dtype)) if name in frame.columns
                        else pl.lit(None, made[name]).alias(name) for name, dtype in wanted.items())


def _casts(column: pl.Series, dtype: pl.DataType | type[pl.DataType]) -> bool:
    """COLUMN is of DTYPE's kind (:func:`same_kind`) and casts to it: text of digits is another schema, not a number."""
    if not same_kind(column.dtype, dtype):  # a column of nulls is of any kind, and casts to any type
        return False
    try:
        column.cast(dtype, strict=True)
    except pl.exceptions.PolarsError:
        return False
    return True


def same_kind(found: pl.DataType | type[pl.DataType], wanted: pl.DataType | type[pl.DataType]) -> bool:
    """FOUND holds WANTED's kind of value: text for text, any number for a float, an integer for an integer (nsys
    writes ids as unsigned in one export, signed in another)."""
    return found == pl.Null or (found == pl.String if wanted == pl.String else found.is_numeric() if wanted.is_float()
                                else found.is_integer() if wanted.is_integer() else found == wanted)


def _made(wanted: Wanted) -> Schema:
    """WANTED's types where a column is made rather than read from Arrow: Int64 for the ids kept as they are."""
    return {name: pl.Int64 if dtype is None else dtype for name, dtype in wanted.items()}


class SchemaMismatch(StatsError):
    """A table whose columns hold another type than nsight-core reads them as: another nsys schema."""

    def __init__(self, table: str, columns: Mapping[str, str], error: Exception | None = None) -> None:
        self.table = table
        self.columns = dict(columns)
        found = ", ".join(f"{name} ({kind})" for name, kind in self.columns.items())
        detail = f": {found}" if found else f" ({one_line(error)})" if error else ""
        super().__init__(f"{table} has columns of another type than nsight-core reads{detail}")


class DamagedExportError(StatsError):
    """An export that exists but cannot be read: re-export it from the .nsys-rep, or say what is wrong."""
