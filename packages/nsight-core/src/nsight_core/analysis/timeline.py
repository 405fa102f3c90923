"""What the capture looked like over time: GPU busy fraction per time bucket and the NVTX ranges
that explain it, reduced to a size a page can carry whatever the capture's length."""

from __future__ import annotations

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.analyze import EventTables
from nsight_core.analysis.intervals import bucket_edges, busy_fractions, busy_ns

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


def event_bounds(trace: EventTables) -> tuple[int, int] | None:
    """First and last traced event within the collection window, or None when nothing was traced.

    The user's CUDA and NVTX activity bounds it; OS-runtime calls only when there is nothing else, as
    they include the profiler's own waits. A blocking call that began before `nsys start` (seen: -4.5 s
    for a 0.3 s region) or an NVTX domain registered before it is clipped to the window.
    """
    window = trace.window
    for frames in ([trace.kernels, trace.memcpy, trace.memset, trace.cuda_api, trace.nvtx,
                    trace.nvtx_marks.select(pl.col("time_ns").alias("start_ns"), pl.col("time_ns").alias("end_ns"))],
                   [trace.osrt]):
        events = pl.concat([frame.select("start_ns", "end_ns") for frame in frames])
        if events.height:
            first, last = events.select(pl.col("start_ns").min().alias("first"),
                                        pl.max_horizontal("start_ns", "end_ns").max().alias("last")).row(0)
            if window.end_ns > window.start_ns and max(first, window.start_ns) < min(last, window.end_ns):
                return max(first, window.start_ns), min(last, window.end_ns)
            return int(first), int(last)
    return None


def summarize_trace(trace: EventTables, buckets: int = TIMELINE_BUCKETS) -> TraceSummary:
    """Reduce a capture's events to span, busy time, timeline and the NVTX ranges to draw."""
    kernels = trace.kernels
    bounds = event_bounds(trace)
    first, span = (bounds[0], bounds[1] - bounds[0]) if bounds else (None, 0)
    recorded = trace.window.end_ns - trace.window.start_ns
    return TraceSummary(
        first_event_ns=first,
        span_ns=span,
        recorded_ns=recorded or None,
        devices=kernels["device"].n_unique() if kernels.height else 0,
        kernel_count=kernels.height,
        kernel_sum_ns=int((kernels["end_ns"] - kernels["start_ns"]).sum()) if kernels.height else 0,
        kernel_busy_ns=busy_ns(kernels),
        copy_count=trace.memcpy.height + trace.memset.height,
        timeline=busy_timeline(trace, first, first + span, buckets) if first is not None else [],
        nvtx=nvtx_instances(trace.nvtx, first or 0),
        nvtx_total=trace.nvtx.height,
    )


def busy_timeline(trace: EventTables, start_ns: int, end_ns: int, buckets: int) -> list[TimelineBucket]:
    """Kernel and copy busy fractions of BUCKETS equal slices of [start_ns, end_ns]."""
    edges = bucket_edges(start_ns, end_ns, buckets)
    if not edges:
        return []
    columns = ["device", "start_ns", "end_ns"]
    copies = pl.concat([trace.memcpy.select(columns), trace.memset.select(columns)])
    return [
        TimelineBucket(start_ns=edges[i] - start_ns, end_ns=edges[i + 1] - start_ns, kernel_fraction=kernel,
                       copy_fraction=copy)
        for i, (kernel, copy) in enumerate(zip(busy_fractions(trace.kernels, edges), busy_fractions(copies, edges),
                                               strict=True))
    ]


def nvtx_instances(nvtx: pl.DataFrame, origin_ns: int, limit: int = MAX_TIMELINE_RANGES) -> list[NvtxInstance]:
    """The longest LIMIT range instances with their nesting depth, by start time."""
    kept = nvtx.top_k(limit, by=pl.col("end_ns") - pl.col("start_ns")).sort("start_ns")
    return [NvtxInstance(**row) for row in kept.select(
        "name", pl.col("start_ns") - origin_ns, pl.col("end_ns") - origin_ns, "depth").to_dicts()]
