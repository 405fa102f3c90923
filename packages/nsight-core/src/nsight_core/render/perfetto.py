"""A capture's whole timeline as Chrome Trace Event JSON, the format ui.perfetto.dev and chrome://tracing open: a
process per GPU with a thread per stream (kernels, graph launches traced whole, copies, memsets), the traced processes
with their threads (NVTX ranges, CUDA API and OS-runtime calls, NVTX marks as instants), each named by a metadata event.
Times are µs with ns as decimals. Streamed: each slice of CHUNK_ROWS events becomes its JSON text in Polars
(``struct.json_encode``, which escapes names) and is written before the next is made, no Python object per event."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from nsight_core.trace.model import Trace
from nsight_core.trace.schema import in_domain, os_tid, pid_of

CHUNK_ROWS = 10_000
GPU_PID_BASE = 1 << 24
"""GPUs are processes GPU_PID_BASE + device: above every OS pid (nsys keeps pids in 24 bits)."""

_US = 1000.0


Part = tuple[pl.DataFrame, list[pl.Expr]]
"""Events to write: a frame and the fields of each row's event, encoded a slice at a time."""


def write_perfetto(trace: Trace, output: Path) -> dict[str, int]:
    """Write TRACE's timeline to OUTPUT (gzip-compressed when it ends in ``.gz``); the events written per category
    (metadata under ``__metadata``). The file is replaced only once it is whole."""
    partial = output.with_name(f".{output.name}.partial")
    counts: dict[str, int] = {}
    try:
        # gzip level 6 (zlib's default), not gzip.open's 9: this JSON is large and 9 is slow on it.
        with gzip.open(partial, "wb", compresslevel=6) if output.suffix == ".gz" else partial.open("wb") as stream:
            stream.write(b'{"displayTimeUnit":"ns","traceEvents":[\n')
            separator = b""
            for category, parts in _events(trace):
                for frame, fields in parts:
                    for chunk in frame.iter_slices(CHUNK_ROWS):
                        text = chunk.select(pl.struct(*fields).struct.json_encode().str.join(",\n")).item()
                        stream.write(separator + text.encode())
                        separator = b",\n"
                    counts[category] = counts.get(category, 0) + frame.height
            stream.write(b"\n]}\n")
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
    return counts


def _slice(category: str, name: pl.Expr, pid: pl.Expr, tid: pl.Expr, args: pl.Expr | None = None) -> list[pl.Expr]:
    """The fields of a complete ("X") event from ``start_ns`` and ``end_ns``."""
    fields = [name.alias("name"), pl.lit(category).alias("cat"), pl.lit("X").alias("ph"),
              (pl.col("start_ns") / _US).alias("ts"), ((pl.col("end_ns") - pl.col("start_ns")) / _US).alias("dur"),
              pid.alias("pid"), tid.alias("tid")]
    return fields if args is None else [*fields, args.alias("args")]


THREAD = pl.col("thread")
GPU_PID, STREAM = pl.col("device") + GPU_PID_BASE, pl.col("stream")
PID, TID = pid_of(THREAD), os_tid(THREAD)


def _events(trace: Trace) -> Iterator[tuple[str, list[Part]]]:
    """(category, its parts), each made as its turn comes, then the metadata naming their processes and threads."""
    gpu, host, ids = (GPU_PID, STREAM), (PID, TID), ("device", "stream", "correlation_id")
    kernel = pl.when(pl.col("short_name") != "").then("short_name").otherwise("name")
    yield "kernel", [(trace.kernels, _slice("kernel", kernel, *gpu, pl.struct(pl.col("name").alias("kernel"), *ids)))]
    # CUDA-graph launches nsys traced whole (their kernels are not listed one by one).
    yield "graph", [(trace.graphs, _slice("graph", pl.format("CUDA graph {}", "graph_id"), *gpu,
                                          pl.struct("graph_id", *ids)))]
    yield "memcpy", [(trace.memcpy, _slice("memcpy", pl.format("Memcpy {}", "direction"), *gpu,
                                           pl.struct("bytes", "direction", "src_kind", "dst_kind", *ids)))]
    yield "memset", [(trace.memset, _slice("memset", pl.lit("Memset"), *gpu, pl.struct("bytes", *ids)))]
    yield "cuda_api", [(trace.cuda_api, _slice("cuda_api", pl.col("name"), *host, pl.struct("correlation_id")))]
    yield "nvtx", _nvtx(trace)
    yield "osrt", [(trace.osrt, _slice("osrt", pl.col("name"), *host))]
    yield "nvtx_mark", [(trace.nvtx_marks, [in_domain().alias("name"), pl.lit("nvtx_mark").alias("cat"),
                                            pl.lit("i").alias("ph"), pl.lit("t").alias("s"),
                                            (pl.col("time_ns") / _US).alias("ts"), PID.alias("pid"), TID.alias("tid")])]
    yield "__metadata", _metadata(trace)


def _nvtx(trace: Trace) -> list[Part]:
    """Push/pop ranges as "X" slices (they nest); start/end ranges as async begin/end pairs (they may overlap)."""
    name, args = in_domain(), pl.struct("domain", "depth", "closed")
    push_pop = pl.col("kind") == "push_pop"
    crossing = trace.nvtx.with_row_index("_id").filter(~push_pop)
    return [(trace.nvtx.filter(push_pop), _slice("nvtx", name, PID, TID, args)),
            *((crossing, [name.alias("name"), pl.lit("nvtx").alias("cat"), pl.lit(phase).alias("ph"),
                          (pl.col(time) / _US).alias("ts"), PID.alias("pid"), TID.alias("tid"),
                          pl.col("_id").alias("id"), args.alias("args")])
              for phase, time in (("b", "start_ns"), ("e", "end_ns")))]


def _metadata(trace: Trace) -> list[Part]:
    """process_name and thread_name events for every process and thread with an event: recorded names, else ids."""
    streams = pl.concat([frame.select("device", "stream")
                         for frame in (trace.kernels, trace.graphs, trace.memcpy, trace.memset)])
    streams = streams.unique().sort("device", "stream")
    gpus = streams.select("device").unique().join(trace.gpus.select("device", "name"), on="device", how="left")
    threads = pl.concat([frame.select("thread") for frame in (trace.cuda_api, trace.nvtx, trace.osrt,
                                                               trace.nvtx_marks)]).unique().sort("thread")
    threads = threads.join(trace.threads.select("thread", "name").unique("thread"), on="thread", how="left") \
        .with_columns(PID.alias("pid"), TID.alias("tid"))
    processes = threads.select("pid").unique().sort("pid").join(trace.processes.unique("pid"), on="pid", how="left")

    def named(kind: str, pid: pl.Expr, tid: pl.Expr, name: pl.Expr) -> list[pl.Expr]:
        return [pl.lit(kind).alias("name"), pl.lit("M").alias("ph"), pid.alias("pid"), tid.alias("tid"),
                pl.struct(name.alias("name")).alias("args")]

    def labelled(label: str, number: str, unnamed: str) -> pl.Expr:
        """``<recorded name> (<label> <number>)``, or ``<unnamed> <number>`` without a recorded name."""
        return pl.when(pl.col("name").fill_null("") != "").then(pl.format(f"{{}} ({label} {{}})", "name", number)) \
            .otherwise(pl.format(f"{unnamed} {{}}", number))

    return [
        (gpus, named("process_name", GPU_PID, pl.lit(0), pl.when(pl.col("name").is_not_null())
                     .then(pl.format("GPU {} ({})", "device", "name")).otherwise(pl.format("GPU {}", "device")))),
        (streams, named("thread_name", GPU_PID, STREAM, pl.format("Stream {}", "stream"))),
        (processes, named("process_name", pl.col("pid"), pl.lit(0), labelled("pid", "pid", "Process"))),
        (threads, named("thread_name", pl.col("pid"), pl.col("tid"), labelled("tid", "tid", "Thread"))),
    ]
