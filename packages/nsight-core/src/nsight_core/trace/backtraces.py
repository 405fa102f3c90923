"""The Python line behind each CUDA call, and behind each sample of the host's Python stack, from the Python
backtraces nsys took (read only where the capture's META_DATA_CAPTURE says it collected them).

With ``--python-backtrace=cuda`` (and ``--cudabacktrace``), nsys writes each sampled CUDA call's Python stack as an NVTX
mark of schema 'Python Backtrace on CUDA' whose binary payload lists the frames; the mark starts when the call does,
on its thread. With ``--python-sampling=true`` it writes the stack of each Python thread SAMPLING_RATE times a second
as marks of the domain 'Python Periodic Sampling', in the same layout. nsys 2025.3 keeps the payload in its SQLite
export's NVTX_EVENTS.binaryData with ``--include-blobs=true`` (NULL without it); nsys 2023.4.4's SQLite export has no
such column, so its captures give no lines here. The payload (NVTX_PAYLOAD_SCHEMA_ENTRIES): a header of 32 bytes whose
u64 at 24 is where the schema's data starts; there a u64 thread-state id, u32 state, u32 frame count, then per frame a
u64 function and a u64 file (StringIds ids) and an i32 line, 24 bytes each, innermost first."""

from __future__ import annotations

import polars as pl

from nsight_core.trace.model import Trace
from nsight_core.trace.parquet import SlicedParquetTables
from nsight_core.trace.sliced import SlicedSqliteTables
from nsight_core.trace.spill import SpilledTables
from nsight_core.trace.tables import SqliteTables

LIBRARY_FILE = r"/(site|dist)-packages/|/lib/python3\.\d+/|^<"
"""Frames of installed libraries and the standard library: the user's line is the innermost frame outside them."""
LINE_COLUMNS = {"start_ns": pl.Int64, "thread": pl.Int64, "file": pl.String, "line": pl.Int64, "function": pl.String,
                "sample_ns": pl.Float64}
SAMPLING_DOMAIN = "Python Periodic Sampling"
"""The NVTX domain of the periodic samples (the CUDA calls' stacks have a domain of their own)."""
_HEADER = 24
_FRAMES = 16
_FRAME = 24


def python_lines(trace: Trace) -> pl.DataFrame:
    """Each CUDA call with a Python backtrace and each sample of the Python stack: its start and thread, the innermost
    frame of the user's code (file, line, function) in its stack, and the host time a sample stands for (``sample_ns``:
    the sampling period; 0 for a CUDA call's stack); empty where the export holds no backtraces."""
    tables = trace.tables
    asked = any(name.endswith((":COLLECT_PYTHON_BACKTRACES", "PYTHON_BACKTRACE_SAMPLING_OPTIONS:COLLECT_SAMPLES"))
                and value == "true" for name, value in trace.meta.items())
    if not asked or "binaryData" not in tables.columns("NVTX_EVENTS"):  # no scan of the ranges of other captures
        return pl.DataFrame(schema=LINE_COLUMNS)
    wanted = {"start": pl.Int64, "globalTid": pl.Int64, "domainId": pl.Int64, "eventType": pl.Int64,
              "text": pl.String, "binaryData": pl.Binary}
    data = pl.col("binaryData")
    sql = tables.export if isinstance(tables, SpilledTables) else tables  # the marks alone, not every range
    if isinstance(sql, SqliteTables | SlicedSqliteTables):
        raw = sql.read("NVTX_EVENTS", wanted, where="binaryData IS NOT NULL OR eventType = 75")
    elif isinstance(sql, SlicedParquetTables) and (scanned := sql.scan("NVTX_EVENTS", wanted)) is not None:
        raw = scanned.filter(data.is_not_null() | (pl.col("eventType") == 75)).collect(engine="streaming")
    else:
        raw = sql.read("NVTX_EVENTS", wanted)
    if raw is None or (marks := raw.filter(data.is_not_null())).is_empty():
        return pl.DataFrame(schema=LINE_COLUMNS)
    rate = float(trace.meta.get("PYTHON_BACKTRACE_SAMPLING_OPTIONS:SAMPLING_RATE") or 0)
    sampling = raw.filter((pl.col("eventType") == 75) & (pl.col("text") == SAMPLING_DOMAIN))["domainId"]
    marks = marks.with_columns(pl.when(pl.col("domainId").is_in(sampling.implode()))
                               .then(1e9 / rate if rate else 0.0).otherwise(0.0).alias("sample_ns"))

    def number(offset: pl.Expr, size: int, dtype: type[pl.DataType]) -> pl.Expr:
        return data.bin.slice(offset, size).bin.reinterpret(dtype=dtype)

    marks = marks.with_columns(number(pl.lit(_HEADER), 8, pl.UInt64).cast(pl.Int64).alias("_at")).with_columns(
        number(pl.col("_at") + 12, 4, pl.UInt32).alias("_count"))
    frame = pl.col("_at") + _FRAMES + pl.col("_depth") * _FRAME
    frames = (marks.with_columns(pl.int_ranges(0, "_count").alias("_depth")).explode("_depth").drop_nulls("_depth")
              .select(pl.col("start").alias("start_ns"), pl.col("globalTid").alias("thread"), "sample_ns", "_depth",
                      number(frame, 8, pl.UInt64).cast(pl.Int64).alias("_function"),
                      number(frame + 8, 8, pl.UInt64).cast(pl.Int64).alias("_file"),
                      number(frame + 16, 4, pl.Int32).cast(pl.Int64).alias("line")))
    strings = trace.strings.select(pl.col("id").cast(pl.Int64), pl.col("value"))
    named = (frames.join(strings.rename({"id": "_file", "value": "file"}), on="_file", how="left")
             .join(strings.rename({"id": "_function", "value": "function"}), on="_function", how="left"))
    return (named.filter(pl.col("file").is_not_null() & ~pl.col("file").str.contains(LIBRARY_FILE))
            .sort("start_ns", "thread", "_depth").unique(["start_ns", "thread"], keep="first", maintain_order=True)
            .select(*LINE_COLUMNS).cast(LINE_COLUMNS))  # type: ignore[arg-type]
