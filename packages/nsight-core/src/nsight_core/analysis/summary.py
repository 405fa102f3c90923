"""The summary tiles at the top of a capture's report: each one number a user asks first ("how long, how busy, how many
kernels, how much copied"), never a made-up zero: missing data carries the reason instead."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from nsight_core.analysis.kernels import nccl_share
from nsight_core.analysis.trace_summary import TraceSummary
from nsight_core.stats.models import ProfileStats
from nsight_core.stats.reports import canonical
from nsight_core.units import BYTES_PER_NSYS_MB, duration
from nsight_core.units import size as format_size

NEEDS_TRACE = "needs the event trace: recorded CSVs have totals only; pass the .nsys-rep or .sqlite export"
_EXPORT_PATH = re.compile(r"\S+\.sqlite\b")

COPY_KINDS: tuple[tuple[str, str], ...] = (
    *((f"{kind} copies", f"[CUDA memcpy {kind}]") for kind in ("Host-to-Device", "Device-to-Host", "Device-to-Device")),
    ("Memsets", "[CUDA memset]"))
"""(tile label, the operation name nsys writes in cuda_gpu_mem_*_sum)"""


class Tile(BaseModel):
    """One summary number, formatted, with the raw value and either a detail line or why it is missing."""

    label: str
    value: str | None = Field(default=None, description="Formatted value; None when missing")
    number: float | None = Field(default=None, description="The raw value (ns, bytes, count or 0..1)")
    detail: str = ""
    missing: str | None = Field(default=None, description="Why there is no value")


def _report_missing(stats: ProfileStats, report: str) -> str:
    """Why REPORT has no rows: nsys' own reason, its export file named "the capture" (the detail table's skipped list
    keeps the full text), or that it was not requested."""
    for name, reason in stats.skipped.items():
        if canonical(name.split(":", 1)[0]) == report:
            return f"{report}: {_EXPORT_PATH.sub('the capture', reason)}"
    if not any(canonical(name.split(":", 1)[0]) == report for name in stats.reports):
        return f"{report} was not requested"
    return f"{report} has no rows"


def summary_tiles(stats: ProfileStats, trace: TraceSummary | None) -> list[Tile]:
    """All tiles of one capture, in display order; one without GPU activity shows what it did collect (span, NVTX,
    OS-runtime calls, CPU samples) instead of a wall of "no data" GPU tiles."""
    if trace is not None and not trace.gpu_traced:
        gpu = Tile(label="GPU activity", missing="no GPU activity in this capture: no kernel, copy or CUDA call "
                   "was traced (trace=cuda off, or no GPU work ran)")
        return [_trace_tiles(trace)[0], gpu, _nvtx_tile(stats, trace), *_cpu_tiles(trace)]
    return [*_trace_tiles(trace), *_kernel_tiles(stats, trace), *_memory_tiles(stats), _nvtx_tile(stats, trace),
            _api_tile(stats), *(_cpu_tiles(trace) if trace is not None and (trace.osrt_calls or trace.samples) else [])]


def _cpu_tiles(trace: TraceSummary) -> list[Tile]:
    """OS-runtime calls and CPU samples of the user's window (the profiler's own waits left out)."""
    top = trace.osrt[0] if trace.osrt else None
    tiles = [Tile(label="OS runtime calls", value=f"{trace.osrt_calls:,}", number=trace.osrt_calls,
                  detail=f"longest in total: {top.name} ({top.calls:,} calls, {duration(top.total_ns)})") if top else
             Tile(label="OS runtime calls", missing="none traced (add osrt to the trace domains)")]
    if trace.samples:
        tiles.append(Tile(label="CPU samples", value=f"{trace.samples:,}", number=trace.samples,
                          detail="taken in the user's window"))
    return tiles


def _trace_tiles(trace: TraceSummary | None) -> list[Tile]:
    if trace is None or trace.first_event_ns is None:
        missing = NEEDS_TRACE if trace is None else "the export holds no traced events"
        return [Tile(label=label, missing=missing) for label in ("Capture span", "GPU kernel time", "GPU busy")]
    recorded = f"; collection ran {duration(trace.recorded_ns)}" if trace.recorded_ns else ""
    own = f", {duration(trace.profiler_ns)} of it the profiler's start-up and stop" if trace.profiler_ns else ""
    span = Tile(label="Capture span", value=duration(trace.span_ns), number=trace.span_ns,
                detail=f"the user's activity, first to last traced event{recorded}{own}")
    if not (trace.kernel_count or trace.graph_count):
        reason = "no CUDA kernels in the trace (trace=cuda off, or no GPU work ran)"
        return [span, Tile(label="GPU kernel time", missing=reason), Tile(label="GPU busy", missing=reason)]
    gpus = f" across {trace.devices} GPUs" if trace.devices > 1 else ""
    graphs = f" and {trace.graph_count:,} CUDA-graph launches" if trace.graph_count else ""
    kernel_time = Tile(label="GPU kernel time", value=duration(trace.kernel_busy_ns), number=trace.kernel_busy_ns,
                       detail=f"union of kernel{graphs} intervals{gpus}; summed per {'piece' if graphs else 'kernel'}: "
                       f"{duration(trace.kernel_sum_ns)}")
    fraction = trace.busy_fraction or 0.0
    busy = Tile(label="GPU busy", value=f"{fraction:.1%}", number=fraction, detail=f"kernel time / capture span{gpus}")
    return [span, kernel_time, busy]


def _kernel_tiles(stats: ProfileStats, trace: TraceSummary | None) -> list[Tile]:
    if not stats.kernels:
        reason = _report_missing(stats, "cuda_gpu_kern_sum")
        if trace is not None and trace.graph_count and not trace.kernel_count:
            return [Tile(label="CUDA-graph launches", value=f"{trace.graph_count:,}", number=trace.graph_count,
                         detail="traced whole: their kernels are not listed (--cuda-graph-trace=node lists them)"),
                    Tile(label="Distinct kernels", missing=reason)]
        if trace is not None and trace.kernel_count:
            return [Tile(label="Kernel launches", value=f"{trace.kernel_count:,}", number=trace.kernel_count,
                         detail="from the event trace"), Tile(label="Distinct kernels", missing=reason)]
        return [Tile(label="Kernel launches", missing=reason), Tile(label="Distinct kernels", missing=reason)]
    launches = sum(row.instances for row in stats.kernels)
    nccl = nccl_share(stats.frame("kernels"))
    return [Tile(label="Kernel launches", value=f"{launches:,}", number=launches),
            Tile(label="Distinct kernels", value=f"{len(stats.kernels):,}", number=len(stats.kernels)),
            Tile(label="NCCL share", value=f"{nccl.share:.1%}", number=nccl.share,
                 detail=f"{nccl.nccl_kernels} NCCL kernels, {duration(nccl.nccl_time_ns)} of summed kernel time"
                 if nccl.nccl_kernels else "no NCCL kernels ran (no multi-GPU communication)")]


def _memory_tiles(stats: ProfileStats) -> list[Tile]:
    sizes = {row.name: row for row in stats.memory_size}
    times = {row.name: row for row in stats.memory_time}
    if not sizes and not times:
        reason = _report_missing(stats, "cuda_gpu_mem_size_sum")
        return [Tile(label=label, missing=reason) for label, _ in COPY_KINDS]
    known = {operation for _, operation in COPY_KINDS}
    kinds = [*COPY_KINDS, *((name.strip("[]").removeprefix("CUDA "), name)
                            for name in dict.fromkeys([*sizes, *times]) if name not in known)]
    tiles = []
    for label, operation in kinds:
        size, time = sizes.get(operation), times.get(operation)
        if (counted := size or time) is None:
            tiles.append(Tile(label=label, value="none", number=0, detail="none in this capture"))
            continue
        count = counted.instances
        value = format_size(size.total_mb * BYTES_PER_NSYS_MB) if size else "size not reported"
        took = f", {duration(time.total_time_ns)} on the GPU" if time else ""
        tiles.append(Tile(label=label, value=value, number=size.total_mb * BYTES_PER_NSYS_MB if size else None,
                          detail=f"{count:,} operation{'' if count == 1 else 's'}{took}"))
    return tiles


def _nvtx_tile(stats: ProfileStats, trace: TraceSummary | None) -> Tile:
    if stats.nvtx_ranges:
        count = sum(row.instances for row in stats.nvtx_ranges)
        return Tile(label="NVTX range instances", value=f"{count:,}", number=count,
                    detail=f"{len(stats.nvtx_ranges):,} distinct range names")
    if trace is not None and trace.nvtx_total:
        return Tile(label="NVTX range instances", value=f"{trace.nvtx_total:,}", number=trace.nvtx_total,
                    detail="from the event trace")
    return Tile(label="NVTX range instances", missing=_report_missing(stats, "nvtx_pushpop_sum"))


def _api_tile(stats: ProfileStats) -> Tile:
    if not stats.api_calls:
        return Tile(label="CUDA API time", missing=_report_missing(stats, "cuda_api_sum"))
    total = sum(row.total_time_ns for row in stats.api_calls)
    calls = sum(row.instances for row in stats.api_calls)
    return Tile(label="CUDA API time", value=duration(total), number=total,
                detail=f"{calls:,} calls of {len(stats.api_calls)} functions, CPU time in the CUDA API")
