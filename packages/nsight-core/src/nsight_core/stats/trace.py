"""Event-level data of a capture, read from its SQLite export.

`nsys stats` only gives per-name totals, and totals cannot say how busy the GPU was: kernels on
different streams overlap, so their summed time can exceed the wall time. The export keeps every
kernel, copy, memset and NVTX range with its start and end, which is what the interval union, the
timeline and the capture span need. Tables are read with Python's sqlite3 straight into Polars
frames; a table nsys did not write (a CPU-only capture has no CUPTI tables) becomes an empty frame,
because "nothing of this kind was traced" is data, not an error.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from nsight_core.errors import StatsError

KERNEL_SCHEMA: dict[str, type[pl.DataType]] = {
    "start_ns": pl.Int64, "end_ns": pl.Int64, "device": pl.Int64, "stream": pl.Int64,
    "short_name": pl.String, "name": pl.String,
}
MEMCPY_SCHEMA: dict[str, type[pl.DataType]] = {
    "start_ns": pl.Int64, "end_ns": pl.Int64, "device": pl.Int64, "bytes": pl.Int64, "direction": pl.String,
}
MEMSET_SCHEMA: dict[str, type[pl.DataType]] = {
    "start_ns": pl.Int64, "end_ns": pl.Int64, "device": pl.Int64, "bytes": pl.Int64,
}
NVTX_SCHEMA: dict[str, type[pl.DataType]] = {
    "start_ns": pl.Int64, "end_ns": pl.Int64, "name": pl.String, "thread": pl.Int64,
}

# NVTX_EVENTS.eventType of push/pop (59) and start/end (60) ranges; marks and others are not ranges.
NVTX_RANGE_EVENT_TYPES = (59, 60)

# CUPTI copyKind -> the direction label the report shows (the labels nsys uses in its own reports).
COPY_DIRECTIONS: dict[int, str] = {
    1: "Host-to-Device",
    2: "Device-to-Host",
    8: "Device-to-Device",
    9: "Host-to-Host",
    10: "Peer-to-Peer",
    11: "Unified Host-to-Device",
    12: "Unified Device-to-Host",
    13: "Unified Device-to-Device",
}

# Tables whose events bound the traced activity: the user's CUDA and NVTX work. OS-runtime calls
# bound it only when there is nothing else, because they include the profiler's own waiting (the
# settle sleep after `nsys start`, thread polls) that would stretch the span and dilute GPU busy %.
_SPAN_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
)
_FALLBACK_SPAN_TABLES = ("OSRT_API",)


@dataclass(frozen=True)
class TraceFrames:
    """Every event the report needs from one export, on the export's own (session-relative) clock.

    ``first_event_ns``/``last_event_ns`` bound all traced activity and are None when nothing was
    traced; ``recorded_ns`` is how long collection ran (nsys start to stop), which includes nsys'
    own start-up before the first event.
    """

    kernels: pl.DataFrame
    memcpy: pl.DataFrame
    memset: pl.DataFrame
    nvtx: pl.DataFrame
    first_event_ns: int | None
    last_event_ns: int | None
    recorded_ns: int | None


def read_trace(sqlite: Path) -> TraceFrames:
    """Read the kernels, copies, memsets, NVTX ranges and span of an nsys SQLite export."""
    if not sqlite.is_file():
        raise StatsError(f"{sqlite} does not exist; export the report first (nsys export --type sqlite).")
    try:
        connection = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise StatsError(f"{sqlite} cannot be opened as SQLite: {error}") from error
    try:
        tables = frozenset(row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'"))
        recorded = _recorded(connection, tables)
        first, last = _event_bounds(connection, tables, recorded)
        return TraceFrames(
            kernels=_kernels(connection, tables),
            memcpy=_memcpy(connection, tables),
            memset=_memset(connection, tables),
            nvtx=_nvtx(connection, tables),
            first_event_ns=first,
            last_event_ns=last,
            recorded_ns=recorded,
        )
    except sqlite3.DatabaseError as error:
        raise StatsError(f"{sqlite} is not a readable nsys export: {error}") from error
    finally:
        connection.close()


def _frame(connection: sqlite3.Connection, query: str, schema: dict[str, type[pl.DataType]]) -> pl.DataFrame:
    rows = connection.execute(query).fetchall()
    return pl.DataFrame(rows, schema=schema, orient="row")


def _kernels(connection: sqlite3.Connection, tables: frozenset[str]) -> pl.DataFrame:
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        return pl.DataFrame(schema=KERNEL_SCHEMA)
    return _frame(
        connection,
        "SELECT k.start, k.end, k.deviceId, k.streamId, s.value, d.value "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
        "LEFT JOIN StringIds AS s ON s.id = k.shortName LEFT JOIN StringIds AS d ON d.id = k.demangledName "
        "ORDER BY k.start",
        KERNEL_SCHEMA,
    )


def _memcpy(connection: sqlite3.Connection, tables: frozenset[str]) -> pl.DataFrame:
    if "CUPTI_ACTIVITY_KIND_MEMCPY" not in tables:
        return pl.DataFrame(schema=MEMCPY_SCHEMA)
    frame = _frame(
        connection,
        "SELECT start, end, deviceId, bytes, copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start",
        {**MEMCPY_SCHEMA, "direction": pl.Int64},
    )
    return frame.with_columns(
        pl.col("direction").replace_strict(COPY_DIRECTIONS, default="Other", return_dtype=pl.String)
    )


def _memset(connection: sqlite3.Connection, tables: frozenset[str]) -> pl.DataFrame:
    if "CUPTI_ACTIVITY_KIND_MEMSET" not in tables:
        return pl.DataFrame(schema=MEMSET_SCHEMA)
    return _frame(
        connection, "SELECT start, end, deviceId, bytes FROM CUPTI_ACTIVITY_KIND_MEMSET ORDER BY start", MEMSET_SCHEMA
    )


def _nvtx(connection: sqlite3.Connection, tables: frozenset[str]) -> pl.DataFrame:
    """Closed push/pop and start/end ranges; the name is the inline text or the registered string."""
    if "NVTX_EVENTS" not in tables:
        return pl.DataFrame(schema=NVTX_SCHEMA)
    types = ",".join(str(t) for t in NVTX_RANGE_EVENT_TYPES)
    registered = "s.value" if "StringIds" in tables else "NULL"
    join = "LEFT JOIN StringIds AS s ON s.id = n.textId" if "StringIds" in tables else ""
    return _frame(
        connection,
        f"SELECT n.start, n.end, COALESCE(n.text, {registered}, ''), n.globalTid FROM NVTX_EVENTS AS n {join} "
        f"WHERE n.eventType IN ({types}) AND n.end IS NOT NULL ORDER BY n.start",
        NVTX_SCHEMA,
    )


def _event_bounds(
    connection: sqlite3.Connection, tables: frozenset[str], recorded: int | None
) -> tuple[int | None, int | None]:
    """First and last event time, within the collection window [0, RECORDED] when the export has one.

    A blocking OS call that began before `nsys start` is exported with a negative start (seen: -4.5 s
    for a 0.3 s region); the capture's span is what was collected, not when such a call began.
    """
    starts: list[int] = []
    ends: list[int] = []
    for group in (_SPAN_TABLES, _FALLBACK_SPAN_TABLES):
        for table in group:
            if table not in tables:
                continue
            query = f"SELECT MIN(start), MAX(start), MAX(end) FROM {table}"
            first, last_start, last_end = connection.execute(query).fetchone()
            if first is not None:
                starts.append(first)
                ends.append(max(value for value in (last_start, last_end) if value is not None))
        if starts:
            break
    if not starts:
        return None, None
    first, last = min(starts), max(ends)
    if recorded is not None and max(first, 0) < min(last, recorded):
        return max(first, 0), min(last, recorded)
    return first, last


def _recorded(connection: sqlite3.Connection, tables: frozenset[str]) -> int | None:
    if "ANALYSIS_DETAILS" not in tables:
        return None
    row = connection.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchone()
    return int(row[0]) if row and row[0] is not None else None
