"""The events the five default reports read, as lazy frames that Polars' streaming engine runs batch by batch.

For a capture read whole they are the Trace's frames made lazy. For one whose export was spilled to Parquet
(:class:`~nsight_core.trace.spill.SpilledTables`, a large capture) they are scans of those files, named the way the
Trace names its frames (the same string table, enum labels, NVTX domains), so that the reports run one query for
either and never hold a whole event table. Only the columns the reports read are made: start_ns, end_ns and the
grouping name, plus bytes (memory), name_id (CUDA API), graph_id (graphs).

A table whose columns differ from the ones nsight-core reads is read through the Trace, whose notes say what was
left out: the same numbers and the same notes as a capture read whole.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from nsight_core.trace.model import (
    COPY_DIRECTIONS,
    I64,
    NVTX_DOMAIN_CREATE,
    NVTX_PUSH_POP_TYPES,
    STR,
    Trace,
    _pid,
)
from nsight_core.trace.spill import SpilledTables
from nsight_core.trace.tables import SchemaMismatch, Wanted

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


def is_streamed(trace: Trace) -> bool:
    """TRACE's tables were spilled to disk for streaming (a large capture): its reports scan them."""
    return isinstance(trace.tables, SpilledTables)


def _scan(trace: Trace, table: str, wanted: Wanted) -> pl.LazyFrame | None:
    """TABLE's WANTED columns scanned from disk; None where TRACE is read whole, or TABLE lacks one of them (the
    Trace then reads it and notes why)."""
    tables = trace.tables
    if not isinstance(tables, SpilledTables) or not set(wanted) <= tables.columns(table):
        return None
    try:
        return tables.scan(table, wanted)
    except SchemaMismatch:  # a column of another type: the Trace reads what it can, and notes the rest
        return None


def _named(frame: pl.LazyFrame, id_column: str, names: pl.DataFrame, alias: str) -> pl.LazyFrame:
    """FRAME with ALIAS: ID_COLUMN's value in NAMES (id and one text column; null where it has none), by a join with
    that small table. Not ``replace_strict`` as the Trace does: in the streaming engine that held every row (3 M NVTX
    ranges: 291 MB, where the join takes 130)."""
    text = next(column for column in names.columns if column != "id")
    return frame.join(names.lazy().select(pl.col("id").alias(id_column), pl.col(text).alias(alias)),
                      on=id_column, how="left")


def _named_events(trace: Trace, table: str, id_column: str, names: pl.DataFrame, kept: Mapping[str, str],
                  frame: str, name: str = "name", unnamed: str = "") -> pl.LazyFrame:
    """TABLE's start_ns, end_ns, NAME (ID_COLUMN's value in NAMES, else UNNAMED) and KEPT columns (export name ->
    frame name), scanned from disk; the Trace's FRAME where it is read whole."""
    raw = _scan(trace, table, {"start": I64, "end": I64, id_column: I64, **dict.fromkeys(kept, I64)})
    if raw is None:
        return getattr(trace, frame).lazy().select("start_ns", "end_ns", name, *kept.values())
    return _named(raw, id_column, names, name).select(
        pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"), pl.col(name).fill_null(unnamed),
        *(pl.col(column).alias(alias) for column, alias in kept.items()))


def kernels(trace: Trace) -> pl.LazyFrame:
    """start_ns, end_ns, name (demangled), correlation_id."""
    return _named_events(trace, KERNEL, "demangledName", trace.strings, {"correlationId": "correlation_id"}, "kernels")


def graphs(trace: Trace) -> pl.LazyFrame:
    """start_ns, end_ns, graph_id: graph launches whose nodes are not kernels (as ``Trace.graphs``)."""
    raw = _scan(trace, "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
                {"start": I64, "end": I64, "graphId": I64, "correlationId": I64})
    if raw is None:
        return trace.graphs.lazy().select("start_ns", "end_ns", "graph_id")
    launched = raw.select(pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"),
                          pl.col("graphId").alias("graph_id"), pl.col("correlationId").alias("correlation_id"))
    nodes = kernels(trace).select("correlation_id").unique()
    return launched.join(nodes, on="correlation_id", how="anti").drop("correlation_id")


def cuda_api(trace: Trace) -> pl.LazyFrame:
    """start_ns, end_ns, name (no version suffix), name_id."""
    return _named_events(trace, "CUPTI_ACTIVITY_KIND_RUNTIME", "nameId", trace.api_names, {"nameId": "name_id"},
                         "cuda_api")


def memcpy(trace: Trace) -> pl.LazyFrame:
    """start_ns, end_ns, direction, bytes."""
    return _named_events(trace, "CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind",
                         trace._enum("ENUM_CUDA_MEMCPY_OPER", COPY_DIRECTIONS), {"bytes": "bytes"}, "memcpy",
                         name="direction", unnamed="Unknown")


def memset(trace: Trace) -> pl.LazyFrame:
    """start_ns, end_ns, bytes."""
    raw = _scan(trace, "CUPTI_ACTIVITY_KIND_MEMSET", {"start": I64, "end": I64, "bytes": I64})
    if raw is None:
        return trace.memset.lazy().select("start_ns", "end_ns", "bytes")
    return raw.select(pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"), "bytes")


def nvtx_push_pop(trace: Trace) -> pl.LazyFrame:
    """Push/pop ranges: start_ns, end_ns, name, domain ('' = default), as ``Trace.nvtx`` names them.

    A range that never ended ends at the table's last timestamp (one streamed pass); domains are the few
    domain-creation events, looked up by (domain id, process).
    """
    raw = _scan(trace, "NVTX_EVENTS", {"start": I64, "end": I64, "eventType": I64, "textId": I64, "text": STR,
                                       "globalTid": I64, "domainId": I64})
    if raw is None:
        return trace.nvtx.lazy().filter(pl.col("kind") == "push_pop").select("start_ns", "end_ns", "name", "domain")
    last = raw.select(pl.max_horizontal(pl.col("start").max(), pl.col("end").max())).collect(engine="streaming").item()
    domains = (raw.filter(pl.col("eventType") == NVTX_DOMAIN_CREATE)
               .group_by("domainId", _pid(pl.col("globalTid")).alias("_pid"))
               .agg(pl.col("text").sort_by("start").first().alias("domain"))
               .collect(engine="streaming"))
    return (raw.filter(pl.col("eventType").is_in(NVTX_PUSH_POP_TYPES))
            .with_columns(_pid(pl.col("globalTid")).alias("_pid"))
            .join(domains.lazy(), on=["domainId", "_pid"], how="left")
            .pipe(_named, "textId", trace.strings, "_registered")
            .select(pl.col("start").alias("start_ns"), pl.col("end").fill_null(last).alias("end_ns"),
                    pl.coalesce("_registered", "text", pl.lit("")).alias("name"),
                    pl.col("domain").fill_null("")))
