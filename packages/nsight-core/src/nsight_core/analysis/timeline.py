"""What the capture looked like over time: GPU busy fraction per time bucket and the NVTX ranges
that explain it, reduced to a size a page can carry whatever the capture's length."""

from __future__ import annotations

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.events import EventTables
from nsight_core.analysis.footprint import capture_window, users_calls
from nsight_core.analysis.intervals import bucket_edges, busy_fractions, busy_ns
from nsight_core.trace.model import Trace

TIMELINE_BUCKETS = 120
MAX_TIMELINE_RANGES = 1000
TOP_CALLS = 20


class TimelineBucket(BaseModel):
    """One slice of the capture: the share of it the GPUs ran kernels (or CUDA graphs), and ran copies or memsets."""

    start_ns: int = Field(description="Slice start, relative to the first traced event")
    end_ns: int
    kernel_fraction: float = Field(description="0..1: union of kernel and CUDA-graph time in the slice / "
                                   "(width x GPUs)")
    copy_fraction: float = Field(description="0..1: the same for memory copies and memsets")


class NvtxInstance(BaseModel):
    """One NVTX range instance on the timeline (times relative to the first traced event)."""

    name: str
    start_ns: int
    end_ns: int
    depth: int = Field(description="Nesting level on its thread: 0 for outermost ranges")
    thread: int = Field(default=0, description="nsys' thread id (the Trace's ``thread``)")


class NvtxBucket(BaseModel):
    """One thread's outermost NVTX ranges in one slice of the capture (a long capture's timeline: its ranges are
    too many and too short to draw one by one)."""

    thread: int
    start_ns: int = Field(description="Slice start, relative to the first traced event")
    end_ns: int
    name: str = Field(description="The range that covers most of the slice")
    fraction: float = Field(description="0..1: the slice's share inside the thread's outermost ranges")


class CallTotal(BaseModel):
    """OS-runtime calls of one name in the user's window."""

    name: str
    calls: int
    total_ns: int = Field(description="Summed call time (calls of several threads may overlap)")
    max_ns: int


class TraceSummary(BaseModel):
    """The event-level facts of a capture that `nsys stats` totals cannot give."""

    first_event_ns: int | None = Field(description="Capture clock where the user's window starts; None if nothing "
                                       "was traced")
    span_ns: int = Field(description="The user's window: first to last CUDA/NVTX event (or the region's marks), "
                         "the profiler's own start-up and stop left out")
    recorded_ns: int | None = Field(description="How long collection ran (nsys start to stop), if the export says")
    profiler_ns: int = Field(default=0, description="Collection time outside the user's window (the profiler's)")
    gpu_traced: bool = Field(default=True, description="Any kernel, copy, memset or CUDA API call was traced")
    devices: int = Field(description="GPUs that ran kernels or CUDA graphs")
    kernel_count: int
    graph_count: int = Field(default=0, description="CUDA-graph launches traced whole (their kernels are not in "
                             "kernel_count)")
    kernel_sum_ns: int = Field(description="Summed kernel and CUDA-graph durations; overlapping ones counted twice")
    kernel_busy_ns: int = Field(description="Union of kernel and CUDA-graph intervals per GPU; overlap counted once")
    copy_count: int = Field(description="Memory copies and memsets")
    timeline: list[TimelineBucket]
    nvtx: list[NvtxInstance] = Field(description="The longest MAX_TIMELINE_RANGES range instances")
    nvtx_total: int = Field(description="All NVTX range instances in the trace")
    nvtx_buckets: list[NvtxBucket] = Field(default_factory=list, description="Over MAX_TIMELINE_RANGES ranges: each "
                                           "thread's outermost ranges per slice, which the timeline draws instead")
    thread_names: dict[int, str] = Field(default_factory=dict, description="NVTX threads' names by nsys thread id")
    osrt: list[CallTotal] = Field(default_factory=list, description=f"Top {TOP_CALLS} OS-runtime calls by total "
                                  "time in the user's window (the profiler's settle wait left out)")
    osrt_calls: int = Field(default=0, description="OS-runtime calls in the user's window")
    samples: int = Field(default=0, description="CPU samples in the user's window")

    @property
    def busy_fraction(self) -> float | None:
        """Kernel (and CUDA-graph) busy time over the span (per GPU); None when the span is empty."""
        if not self.span_ns:
            return None
        return self.kernel_busy_ns / (self.span_ns * max(self.devices, 1))


def summarize_trace(trace: Trace, buckets: int = TIMELINE_BUCKETS) -> TraceSummary:
    """Reduce a capture's events to the user's window, busy time, timeline, NVTX ranges and OS calls."""
    kernels = compute(trace)
    window = capture_window(trace)
    traced = any(frame.height for frame in (kernels, trace.memcpy, trace.memset, trace.cuda_api, trace.nvtx,
                                              trace.nvtx_marks, trace.osrt, trace.samples))
    first, span = (window.start_ns, window.span_ns) if traced else (None, 0)
    calls = users_calls(trace.osrt, window)
    in_window = (pl.col("time_ns") >= window.start_ns) & (pl.col("time_ns") < window.end_ns)
    return TraceSummary(
        first_event_ns=first,
        span_ns=span,
        recorded_ns=(trace.window.end_ns - trace.window.start_ns) or None,
        profiler_ns=window.profiler_ns if traced else 0,
        gpu_traced=bool(kernels.height or trace.memcpy.height or trace.memset.height or trace.cuda_api.height),
        devices=kernels["device"].n_unique() if kernels.height else 0,
        kernel_count=trace.kernels.height,
        graph_count=trace.graphs.height,
        kernel_sum_ns=int((kernels["end_ns"] - kernels["start_ns"]).sum()) if kernels.height else 0,
        kernel_busy_ns=busy_ns(kernels),
        copy_count=trace.memcpy.height + trace.memset.height,
        timeline=busy_timeline(trace, first, first + span, buckets) if first is not None else [],
        nvtx=nvtx_instances(trace.nvtx, first or 0),
        nvtx_total=trace.nvtx.height,
        nvtx_buckets=nvtx_buckets(trace.nvtx, bucket_edges(first, first + span, buckets))
        if first is not None and trace.nvtx.height > MAX_TIMELINE_RANGES else [],
        thread_names=dict(trace.threads.filter(pl.col("thread").is_in(trace.nvtx["thread"].unique().implode()))
                          .select("thread", "name").iter_rows()),
        osrt=call_totals(calls),
        osrt_calls=calls.height,
        samples=trace.samples.filter(in_window).height,
    )


def call_totals(calls: pl.DataFrame, top: int = TOP_CALLS) -> list[CallTotal]:
    """CALLS (start_ns, end_ns, name) by name, the TOP longest in total."""
    duration = pl.col("end_ns") - pl.col("start_ns")
    totals = (calls.group_by("name").agg(pl.len().alias("calls"), duration.sum().alias("total_ns"),
                                         duration.max().alias("max_ns"))
              .sort(["total_ns", "name"], descending=[True, False]).head(top))
    return [CallTotal(**row) for row in totals.to_dicts()]


def compute(trace: EventTables) -> pl.DataFrame:
    """The GPU's compute (device, start_ns, end_ns): kernels and the CUDA-graph launches traced whole, each piece of
    work once (the Trace's ``graphs`` leaves out launches whose nodes are kernels); frames without ``graphs``
    (built by hand) have kernels alone."""
    columns = ["device", "start_ns", "end_ns"]
    graphs: pl.DataFrame | None = getattr(trace, "graphs", None)
    if graphs is None or not graphs.height:
        return trace.kernels.select(columns)
    return pl.concat([trace.kernels.select(columns), graphs.select(columns)]).sort("start_ns")


def busy_timeline(trace: EventTables, start_ns: int, end_ns: int, buckets: int) -> list[TimelineBucket]:
    """Compute (kernels, CUDA graphs) and copy busy fractions of BUCKETS equal slices of [start_ns, end_ns]."""
    edges = bucket_edges(start_ns, end_ns, buckets)
    if not edges:
        return []
    columns = ["device", "start_ns", "end_ns"]
    copies = pl.concat([trace.memcpy.select(columns), trace.memset.select(columns)])
    return [
        TimelineBucket(start_ns=edges[i] - start_ns, end_ns=edges[i + 1] - start_ns, kernel_fraction=kernel,
                       copy_fraction=copy)
        for i, (kernel, copy) in enumerate(zip(busy_fractions(compute(trace), edges), busy_fractions(copies, edges),
                                               strict=True))
    ]


def nvtx_instances(nvtx: pl.DataFrame, origin_ns: int, limit: int = MAX_TIMELINE_RANGES) -> list[NvtxInstance]:
    """The longest LIMIT range instances with their nesting depth, by start time; of equally long ones, the first.

    The LIMITth longest duration is found on that column alone; only ranges at least as long are ranked (a
    third of the time of ranking a million ranges with their names).
    """
    duration = pl.col("end_ns") - pl.col("start_ns")
    shortest = nvtx.select(duration.top_k(limit).min()).item()
    longest = nvtx.filter(duration >= shortest) if shortest is not None else nvtx
    kept = longest.top_k(limit, by=[duration, "start_ns"], reverse=[False, True]).sort("start_ns")
    return [NvtxInstance(**row) for row in kept.select(
        "name", pl.col("start_ns") - origin_ns, pl.col("end_ns") - origin_ns, "depth", "thread").to_dicts()]


def nvtx_buckets(nvtx: pl.DataFrame, edges: list[int]) -> list[NvtxBucket]:
    """Per thread and slice between consecutive EDGES (equal slices), the share inside the thread's outermost ranges
    and the range name holding most of it. Columnar: each outermost range is cut at the edges it crosses (an
    outermost range never overlaps another of its thread, so the shares add up to at most 1)."""
    if len(edges) < 2:
        return []
    origin, width, last = edges[0], (edges[-1] - edges[0]) / (len(edges) - 1), len(edges) - 2
    pieces = (nvtx.filter((pl.col("depth") == 0) & (pl.col("end_ns") > origin) & (pl.col("start_ns") < edges[-1]))
              .select("thread", "name", "start_ns", "end_ns",
                      pl.int_ranges(((pl.col("start_ns") - origin) / width).floor().clip(0, last).cast(pl.Int64),
                                    ((pl.col("end_ns") - origin) / width).ceil().clip(1, last + 1).cast(pl.Int64))
                      .alias("bucket"))
              .explode("bucket")
              .with_columns(pl.col("bucket").replace_strict(dict(enumerate(edges[:-1])), return_dtype=pl.Int64)
                            .alias("b0"),
                            pl.col("bucket").replace_strict(dict(enumerate(edges[1:])), return_dtype=pl.Int64)
                            .alias("b1"))
              .with_columns((pl.min_horizontal("end_ns", "b1") - pl.max_horizontal("start_ns", "b0")).alias("ns")))
    by_name = pieces.group_by("thread", "bucket", "b0", "b1", "name").agg(pl.col("ns").sum())
    rows = (by_name.sort("ns", descending=True).group_by("thread", "bucket", "b0", "b1", maintain_order=True)
            .agg(pl.col("name").first(), pl.col("ns").sum()).sort("thread", "bucket"))
    return [NvtxBucket(**row) for row in rows.select(
        "thread", (pl.col("b0") - origin).alias("start_ns"), (pl.col("b1") - origin).alias("end_ns"), "name",
        (pl.col("ns") / (pl.col("b1") - pl.col("b0"))).clip(0.0, 1.0).alias("fraction")).to_dicts()]
