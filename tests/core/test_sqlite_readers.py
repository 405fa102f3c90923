"""ADBC's SQLite driver (the `sqlite-arrow` extra) and the standard library's sqlite3 read an export into the same
frames, every table and column of every SQLite export among the fixtures, in batches small enough that the driver's
keyset queries cross many boundaries; where the driver guesses a column's type wrong (null in its first rows, a float
or text later) the batch is read with sqlite3, and a column of another type is the same SchemaMismatch either way.

`NSIGHT_SQLITE_READER=sqlite3` is the standard library; unset, the driver the dev environment installs.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from fixture_sets import fanned, unpacked

from nsight_core.trace import spill as spill_module
from nsight_core.trace import tables as tables_module
from nsight_core.trace.export import ExportChoice
from nsight_core.trace.model import Trace
from nsight_core.trace.spill import SpilledTables
from nsight_core.trace.tables import ENV_SQLITE_READER, SchemaMismatch, SqliteTables, Wanted

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXPORTS = sorted(FIXTURES.rglob("*.sqlite"))
FEW = 97  # rows a batch: many keyset boundaries in every table of a few thousand rows
READERS = ("adbc", "sqlite3")
TRACE_FRAMES = ("strings", "kernels", "graphs", "memcpy", "memset", "sync", "cuda_api", "api_names", "osrt",
                "samples", "nvtx", "nvtx_marks", "diagnostics", "cuda_contexts", "gpus", "processes", "threads")


def tables(path: Path, reader: str, monkeypatch: pytest.MonkeyPatch) -> SqliteTables:
    """PATH read by READER (the reader is chosen when the tables are opened)."""
    if reader == "sqlite3":
        monkeypatch.setenv(ENV_SQLITE_READER, "sqlite3")
    else:
        monkeypatch.delenv(ENV_SQLITE_READER, raising=False)
    return SqliteTables(path)


def declared(path: Path) -> dict[str, Wanted]:
    """Every table of PATH with every column, as the type its declaration says (an integer kept as read), but bytes
    where a column holds blobs: nsys 2025.3 declares NVTX_EVENTS.binaryData (the Python backtraces) TEXT."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        def kind_of(table: str, column: str, declaration: str) -> type[pl.DataType] | None:
            if connection.execute(f'SELECT 1 FROM "{table}" WHERE typeof("{column}") = \'blob\' LIMIT 1').fetchone():
                return pl.Binary
            return {"TEXT": pl.String, "REAL": pl.Float64}.get(declaration.upper())

        names = [name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {name: {column: kind_of(name, column, kind) for _, column, kind, *_ in
                       connection.execute(f'PRAGMA table_info("{name}")')}
                for name in names}


def test_the_dev_environment_has_the_driver() -> None:
    """Else every comparison below compares sqlite3 with itself."""
    import adbc_driver_sqlite  # noqa: F401

    from nsight_core.trace.tables import _arrow_connection

    assert _arrow_connection(EXPORTS[0]) is not None


@pytest.mark.parametrize("export", fanned(EXPORTS))  # every fixture: make test-all
def test_every_table_in_batches_and_every_frame_are_the_same_either_way(export: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    read = {reader: tables(export, reader, monkeypatch) for reader in READERS}
    for table, wanted in declared(export).items():
        adbc, stdlib = (pl.concat([pl.DataFrame(schema={}), *read[reader].batches(table, wanted, rows=FEW)],
                                  how="diagonal") for reader in READERS)
        assert adbc.equals(stdlib), table
    traces = [Trace(read[reader]) for reader in READERS]
    for frame in TRACE_FRAMES:
        assert getattr(traces[0], frame).equals(getattr(traces[1], frame)), frame
    assert traces[0].meta == traces[1].meta and traces[0].window == traces[1].window
    assert traces[0].notes == traces[1].notes


@pytest.fixture
def late_values(tmp_path: Path) -> Path:
    """An export whose float and text columns are null in their first 1,500 rows (more than the driver looks at
    to type a column), then hold values; and an integer column that holds text in its last row."""
    path = tmp_path / "late.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
        connection.execute('CREATE TABLE T ("start" INTEGER, "ratio" REAL, "label" TEXT, "id" INTEGER)')
        rows = [(i, None, None, i) for i in range(1500)] + [(i, i / 7, f"name {i}", i) for i in range(1500, 1800)]
        connection.executemany("INSERT INTO T VALUES (?, ?, ?, ?)", rows)
        connection.execute("INSERT INTO T VALUES (1800, 1.5, 'x', 'not a number')")
    return path


def test_columns_typed_late_read_the_same_and_a_wrong_type_is_the_same_error(late_values: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    wanted: Wanted = {"start": pl.Int64, "ratio": pl.Float64, "label": pl.String}
    frames, errors = [], []
    for reader in READERS:
        read = tables(late_values, reader, monkeypatch)
        for rows in (1000, 2000):  # a batch all null, then one typed late; one batch typed late
            frames.append(pl.concat(read.batches("T", wanted, rows=rows)))
        with pytest.raises(SchemaMismatch) as error:
            read.read("T", {**wanted, "id": None})
        errors.append((error.value.table, error.value.columns))
    assert all(frame.equals(frames[0]) for frame in frames)
    assert frames[0].height == 1801 and frames[0]["ratio"].null_count() == 1500
    assert frames[0]["label"][1500] == "name 1500" and frames[0]["ratio"][1507] == pytest.approx(1507 / 7)
    assert errors[0] == errors[1] == ("T", {"id": "text"})


@pytest.mark.parametrize("export", fanned(EXPORTS))  # every fixture: make test-all
def test_a_table_copied_to_disk_in_slices_read_side_by_side_is_the_table(export: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A large capture's tables are copied to Parquet in up to SPILL_READERS slices of rowid at once, each through a
    connection of its own (trace/spill.py): the copy holds every row, in the table's order, as read whole. Slices of
    at least FEW rows here, so every table of a few hundred rows is cut into several."""
    monkeypatch.setattr(tables_module, "SQLITE_BATCH_ROWS", FEW)
    monkeypatch.setattr(spill_module.pl, "thread_pool_size", lambda: 4)
    whole = SqliteTables(export)
    spilled = SpilledTables(SqliteTables(export),
                            ExportChoice(kind="sqlite", streamed=True, reason="large", trace_bytes=0))
    sliced = 0
    for table, wanted in declared(export).items():
        copy = spilled.scan(table, wanted)
        assert copy is not None and copy.collect().equals(whole.read(table, wanted)), table
        parts = {path.name.partition("-")[0] for path in spilled.folder.glob(f"{table}-0/*.parquet")}
        sliced += len(parts) > 1
        assert len(parts) <= spill_module.SPILL_READERS
    assert sliced, "no table was cut into slices"
    # The standard library's reader cuts no slices, and reads one it is given as the driver does.
    monkeypatch.setenv(ENV_SQLITE_READER, "sqlite3")
    stdlib = SqliteTables(export)
    for table, wanted in declared(export).items():
        assert stdlib.rowid_slices(table, 4) is None
        for rowids in whole.rowid_slices(table, 4) or []:
            slices = (pl.concat([pl.DataFrame(schema={}), *reader.batches(table, wanted, rowids=rowids)],
                                how="diagonal") for reader in (stdlib, whole))
            assert next(slices).equals(next(slices)), table


class _WithoutDbstat:
    """A connection of an SQLite built without the dbstat table (some distributions' builds)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def execute(self, query: str, *args: Any) -> sqlite3.Cursor:
        if "dbstat" in query:
            raise sqlite3.OperationalError("no such table: dbstat")
        return self._connection.execute(query, *args)


def test_an_exports_bytes_are_its_tables_pages_asked_once_or_the_file_without_dbstat() -> None:
    """The memory guard's estimate of an export's event tables (SQLITE_TO_ARROW bytes a byte of their pages): the same
    however often and in whatever groups it is asked (it is counted once), and the whole file's where SQLite has no
    dbstat, every time (a first answer kept as nothing would let a later summary through unguarded)."""
    export = FIXTURES / "h200-fix-pairs-2025" / "host_load-problem.sqlite"
    tables = SqliteTables(export)
    events = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "NO_SUCH_TABLE"]
    whole = tables.arrow_bytes(events)
    each = [tables.arrow_bytes([table]) for table in events]
    assert whole > 0 and each[-1] == 0 and abs(sum(each) - whole) <= len(events)  # each rounded down
    assert tables.arrow_bytes(events) == whole and tables.arrow_bytes([]) == 0

    without = SqliteTables(export)
    without._connection = _WithoutDbstat(without._connection)  # type: ignore[assignment]
    file_bytes = int(export.stat().st_size * tables_module.SQLITE_TO_ARROW)
    assert without.arrow_bytes(events) == file_bytes and without.arrow_bytes(events[:1]) == file_bytes
    assert without.arrow_bytes(events) == file_bytes


def test_reading_an_export_leaves_no_file_open_once_its_trace_is_gone() -> None:
    """Each export read through ADBC's SQLite driver opened a database and a connection that collection did not
    close: a process that reads many captures (a test run, a service) ran out of file descriptors."""
    import gc
    import os

    from nsight_core.profile import build_profile

    exports = sorted(unpacked("h200-fix-pairs-v2-2025").glob("*.sqlite"))[:2]
    build_profile(exports[0])  # imports and caches made once
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    for export in exports:
        build_profile(export)
        gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before
