"""What the capture looked like over time: GPU busy fraction per time bucket and the NVTX ranges
that explain it, reduced to a size a page can carry whatever the capture's length."""

from __future__ import annotations

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.intervals import bucket_edges, busy_fractions, busy_ns
from nsight_core.stats.trace import TraceFrames

TIMELINE_BUCKETS = 120
MAX_TIMELINE_RANGES = 1000


class TimelineBucket(BaseModel):
    """One slice of the capture: the share of it the GPUs ran kernels, and ran copies or memsets."""

    start_ns: int = Field(description="Slice start, relative to the first traced event")
    end_ns: int
    kernel_fraction: float = Field(description="0..1: union of kernel time in the slice / (width x GPUs)")
    copy_fraction: float = Field(description="0..1: the same for memory copies and memsets")


class NvtxInstance(BaseModel):
    """One NVTX range instance on the timeline (times relative to the first traced event)."""

    name: str
    start_ns: int
    end_ns: int
    depth: int = Field(description="Nesting level on its thread: 0 for outermost ranges")


class TraceSummary(BaseModel):
    """The event-level facts of a capture that `nsys stats` totals cannot give."""

    first_event_ns: int | None = Field(description="Session clock of the first traced event; None if none")
    span_ns: int = Field(description="First to last traced event")
    recorded_ns: int | None = Field(description="How long collection ran (nsys start to stop), if the export says")
    devices: int = Field(description="GPUs that ran kernels")
    kernel_count: int
    kernel_sum_ns: int = Field(description="Summed kernel durations; overlapping kernels counted twice")
    kernel_busy_ns: int = Field(description="Union of kernel intervals per GPU; overlap counted once")
    copy_count: int = Field(description="Memory copies and memsets")
    timeline: list[TimelineBucket]
    nvtx: list[NvtxInstance] = Field(description="The longest MAX_TIMELINE_RANGES range instances")
    nvtx_total: int = Field(description="All closed NVTX range instances in the trace")

    @property
    def busy_fraction(self) -> float | None:
        """Kernel busy time over the span (per GPU); None when the span is empty."""
        if not self.span_ns:
            return None
        return self.kernel_busy_ns / (self.span_ns * max(self.devices, 1))


def summarize_trace(frames: TraceFrames, buckets: int = TIMELINE_BUCKETS) -> TraceSummary:
    """Reduce an export's events to span, busy time, timeline and the NVTX ranges to draw."""
    kernels = frames.kernels
    first = frames.first_event_ns
    span = (frames.last_event_ns - first) if first is not None and frames.last_event_ns is not None else 0
    devices = kernels["device"].n_unique() if kernels.height else 0
    return TraceSummary(
        first_event_ns=first,
        span_ns=span,
        recorded_ns=frames.recorded_ns,
        devices=devices,
        kernel_count=kernels.height,
        kernel_sum_ns=int((kernels["end_ns"] - kernels["start_ns"]).sum()) if kernels.height else 0,
        kernel_busy_ns=busy_ns(kernels),
        copy_count=frames.memcpy.height + frames.memset.height,
        timeline=busy_timeline(frames, first, first + span, buckets) if first is not None else [],
        nvtx=nvtx_instances(frames.nvtx, first or 0),
        nvtx_total=frames.nvtx.height,
    )


def busy_timeline(frames: TraceFrames, start_ns: int, end_ns: int, buckets: int) -> list[TimelineBucket]:
    """Kernel and copy busy fractions of BUCKETS equal slices of [start_ns, end_ns]."""
    edges = bucket_edges(start_ns, end_ns, buckets)
    if not edges:
        return []
    columns = ["device", "start_ns", "end_ns"]
    copies = pl.concat([frames.memcpy.select(columns), frames.memset.select(columns)])
    return [
        TimelineBucket(start_ns=edges[i] - start_ns, end_ns=edges[i + 1] - start_ns, kernel_fraction=kernel,
                       copy_fraction=copy)
        for i, (kernel, copy) in enumerate(zip(busy_fractions(frames.kernels, edges), busy_fractions(copies, edges),
                                               strict=True))
    ]


def nvtx_instances(nvtx: pl.DataFrame, origin_ns: int, limit: int = MAX_TIMELINE_RANGES) -> list[NvtxInstance]:
    """Range instances with their nesting depth per thread, the longest LIMIT of them, by start time."""
    depths: list[int] = []
    open_ends: dict[int, list[int]] = {}
    ordered = nvtx.sort("start_ns", pl.col("end_ns"), descending=[False, True])
    for start, end, thread in ordered.select("start_ns", "end_ns", "thread").iter_rows():
        stack = open_ends.setdefault(thread or 0, [])
        while stack and stack[-1] <= start:
            stack.pop()
        depths.append(len(stack))
        stack.append(end)
    kept = (
        ordered.with_columns(pl.Series("depth", depths, dtype=pl.Int64))
        .top_k(limit, by=pl.col("end_ns") - pl.col("start_ns"))
        .sort("start_ns")
    )
    return [
        NvtxInstance(name=name, start_ns=start - origin_ns, end_ns=end - origin_ns, depth=depth)
        for start, end, name, depth in kept.select("start_ns", "end_ns", "name", "depth").iter_rows()
    ]
