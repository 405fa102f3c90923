"""Compares what bench/gpu/parquet_slices.sh made: for each <name>.sqlite beside its <name>.parquetdir, every table
of the SQLite export against the Parquet slices (SlicedParquetTables), then the Trace's frames, the five reports and the
analysis read both ways. Prints one line per difference and 'equal' where none; exit 1 where any differs. Flags that
nsys writes as integers in SQLite and as Booleans in Parquet (isDiscrete, kernelMode, ...) are not compared: nsight
reads none of them.

    .venv/bin/python bench/gpu/parquet_slices_compare.py DIR
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import polars as pl

import nsight_core
from nsight_core.stats.load import stats_of_trace
from nsight_core.trace.export import ExportChoice
from nsight_core.trace.model import Trace
from nsight_core.trace.parquet import SlicedParquetTables
from nsight_core.trace.spill import SpilledTables
from nsight_core.trace.tables import SqliteTables

FRAMES = ("strings", "kernels", "graphs", "memcpy", "memset", "sync", "cuda_api", "api_names", "osrt", "samples",
          "nvtx", "nvtx_marks", "diagnostics", "cuda_contexts", "gpus", "processes", "threads")
TYPES = {"TEXT": pl.String, "REAL": pl.Float64, "BLOB": pl.Binary}


def declared(path: Path) -> dict[str, dict[str, pl.DataType]]:
    """Every table of the SQLite export with its columns as Polars reads them."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        names = [name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {name: {column: TYPES.get(kind.upper(), pl.Int64)
                       for _, column, kind, *_ in connection.execute(f'PRAGMA table_info("{name}")')}
                for name in names}


def differences(sqlite: Path, parquet: Path) -> list[str]:
    whole, sliced = SqliteTables(sqlite), SlicedParquetTables(parquet)
    found = []
    for table, wanted in declared(sqlite).items():
        if table.startswith("META_DATA_EXPORT"):
            continue  # what the export itself says: differs by kind
        if not sliced.columns(table):
            rows = whole.read(table, wanted)
            if rows is not None and rows.height:
                found.append(f"{table}: not in the Parquet slices ({rows.height} rows)")
            continue
        if lost := set(wanted) - sliced.columns(table):
            found.append(f"{table}: no column {', '.join(sorted(lost))}")
        try:
            files = sorted(parquet.glob(f"part-*/{table}.parquet"))  # none: the probe's table (capture.sqlite)
            flags = pl.read_parquet_schema(files[0]) if files else {}
            for column, dtype in wanted.items():
                if column not in sliced.columns(table) or flags.get(column) == pl.Boolean:
                    continue
                a, b = (tables.read(table, {column: dtype}) for tables in (whole, sliced))
                if a is None or b is None or not a.sort(column).equals(b.sort(column)):
                    found.append(f"{table}.{column}: values differ")
        except Exception as error:  # a difference to report, whatever it is
            found.append(f"{table}: {_said(error)}")
    choice = ExportChoice(kind="parquetdir", streamed=True, reason="large", trace_bytes=0, slices=3)
    traces = Trace(whole), Trace(SpilledTables(sliced, choice))
    for frame in FRAMES:
        try:
            a, b = (getattr(trace, frame) for trace in traces)
            if not a.sort(pl.all(), nulls_last=True).equals(b.sort(pl.all(), nulls_last=True)):
                found.append(f"Trace.{frame}: differs")
        except Exception as error:
            found.append(f"Trace.{frame}: {_said(error)}")
    for what, of in (("stats", lambda trace: stats_of_trace(trace).model_dump(exclude={"export", "notes"})),
                     ("analysis", nsight_core.analyze)):
        try:
            if of(traces[0]) != of(traces[1]):
                found.append(f"{what}: differs")
        except Exception as error:
            found.append(f"{what}: {_said(error)}")
    return found


def _said(error: Exception) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]


def main(folder: Path) -> int:
    failed = False
    for sqlite in sorted(folder.glob("*.sqlite")):
        found = differences(sqlite, sqlite.with_suffix(".parquetdir"))
        print(f"{sqlite.stem}: {'equal' if not found else ''}")
        for line in found:
            print(f"  {line}")
        failed |= bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
