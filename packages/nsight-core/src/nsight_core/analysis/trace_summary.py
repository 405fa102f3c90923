"""What the capture looked like over time: GPU busy fraction per time bucket and the NVTX ranges that explain it,
reduced to a size a page can carry. What needs the events in order (busy time, NVTX nesting) folds over windows of start
time (:func:`windows.start_windows`: one for a capture read whole); the rest are streamed queries."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.fold import fold, row_counts, scan
from nsight_core.analysis.intervals import bucket_edges, busy_over
from nsight_core.analysis.user_window import capture_window, users_calls
from nsight_core.analysis.windows import start_windows
from nsight_core.trace.depth import depth_read, with_depth
from nsight_core.trace.model import Trace
from nsight_core.trace.streamed import WINDOW_ROWS, events

TIMELINE_BUCKETS = 120
MAX_TIMELINE_RANGES = 1000
TOP_CALLS = 20


class TimelineBucket(BaseModel):
    """One slice of the capture: the share of it the GPUs ran kernels (or CUDA graphs), and ran copies or memsets."""

    start_ns: int = Field(description="Slice start, relative to the first traced event")
    end_ns: int
    kernel_fraction: float = Field(description="0..1: union of kernel and CUDA-graph time in a slice / (width x GPUs)")
    copy_fraction: float = Field(description="0..1: the same for memory copies and memsets")


class NvtxInstance(BaseModel):
    """One NVTX range instance on the timeline (times relative to the first traced event)."""

    name: str
    start_ns: int
    end_ns: int
    depth: int = Field(description="Nesting level on its thread: 0 for outermost ranges")
    thread: int = Field(default=0, description="nsys' thread id (the Trace's ``thread``)")


class NvtxBucket(BaseModel):
    """One thread's outermost NVTX ranges in a slice of the capture, where they are too many to draw one by one."""

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

    first_event_ns: int | None = Field(description="The user window's start (capture clock); None: nothing traced")
    span_ns: int = Field(description="The user's window: first to last CUDA/NVTX event (or the region's marks), "
                         "the profiler's own start-up and stop left out")
    recorded_ns: int | None = Field(description="How long collection ran (nsys start to stop), if the export says")
    profiler_ns: int = Field(default=0, description="Collection time outside the user's window (the profiler's)")
    gpu_traced: bool = Field(default=True, description="Any kernel, copy, memset or CUDA API call was traced")
    devices: int = Field(description="GPUs that ran kernels or CUDA graphs")
    kernel_count: int
    graph_count: int = Field(default=0, description="CUDA-graph launches traced whole (kernels not in kernel_count)")
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
        return self.kernel_busy_ns / (self.span_ns * max(self.devices, 1)) if self.span_ns else None


def summarize_trace(trace: Trace, buckets: int = TIMELINE_BUCKETS, window_rows: int | None = None) -> TraceSummary:
    """Reduce a capture's events to the user's window, busy time, timeline, NVTX ranges and OS calls. WINDOW_ROWS:
    events per window (by default ``WINDOW_ROWS`` for a streamed capture, the frames whole for one read whole)."""
    frames = events(trace)
    rows = window_rows if window_rows is not None else WINDOW_ROWS if frames.streamed else None
    # Kernels and the CUDA-graph launches traced whole (``graphs`` leaves out those whose nodes are kernels).
    compute = _on_gpus(frames.kernels, frames.graphs)
    counts = row_counts(frames.kernels, frames.graphs, frames.memcpy, frames.memset, frames.cuda_api, frames.nvtx,
                        frames.nvtx_marks, frames.osrt, frames.samples)
    kernels, graphs, memcpy, memset, cuda_api, nvtx = counts[:6]
    traced = any(counts)
    window = capture_window(trace, frames)
    first, span = (window.start_ns, window.span_ns) if traced else (None, 0)
    edges = bucket_edges(first, first + span, buckets) if first is not None else []
    devices, kernel_sum = compute.select(pl.col("device").n_unique(), (pl.col("end_ns") - pl.col("start_ns")).sum()) \
        .collect(engine="streaming").row(0)
    busy = busy_over(start_windows(compute, rows), edges)
    copies = busy_over(start_windows(_on_gpus(frames.memcpy, frames.memset), rows), edges) if edges else busy
    osrt, osrt_calls = call_totals(users_calls(part, window) for part in start_windows(frames.osrt, rows))
    instances, nvtx_buckets = nvtx_views(nvtx_windows(frames.nvtx, rows), first or 0,
                                         edges if nvtx > MAX_TIMELINE_RANGES else [])
    threads = frames.nvtx.select(pl.col("thread").unique()).collect(engine="streaming").to_series()
    in_window = (pl.col("time_ns") >= window.start_ns) & (pl.col("time_ns") < window.end_ns)
    return TraceSummary(
        first_event_ns=first, span_ns=span, recorded_ns=(trace.window.end_ns - trace.window.start_ns) or None,
        profiler_ns=window.profiler_ns if traced else 0, devices=devices if kernels or graphs else 0,
        gpu_traced=bool(kernels or graphs or memcpy or memset or cuda_api), kernel_count=kernels, graph_count=graphs,
        kernel_sum_ns=int(kernel_sum or 0), kernel_busy_ns=busy.busy_ns, copy_count=memcpy + memset,
        timeline=[TimelineBucket(start_ns=low - edges[0], end_ns=high - edges[0], kernel_fraction=kernel,
                                 copy_fraction=copy)
                  for low, high, kernel, copy in zip(edges, edges[1:], busy.fractions, copies.fractions, strict=False)],
        nvtx=instances, nvtx_total=nvtx, nvtx_buckets=nvtx_buckets,
        thread_names=dict(trace.threads.filter(pl.col("thread").is_in(threads.implode()))
                          .select("thread", "name").iter_rows()),
        osrt=osrt, osrt_calls=osrt_calls,
        samples=frames.samples.filter(in_window).select(pl.len()).collect(engine="streaming").item())


def call_totals(windows: Iterable[pl.DataFrame], top: int = TOP_CALLS) -> tuple[list[CallTotal], int]:
    """WINDOWS' calls (start_ns, end_ns, name) by name, per window then added up: the TOP longest, and the count."""
    duration = pl.col("end_ns") - pl.col("start_ns")
    parts = [calls.group_by("name").agg(pl.len().alias("calls"), duration.sum().alias("total_ns"),
                                        duration.max().alias("max_ns")) for calls in windows]
    if not parts:
        return [], 0
    totals = (pl.concat(parts).group_by("name").agg(pl.col("calls").sum().cast(pl.Int64), pl.col("total_ns").sum(),
                                                      pl.col("max_ns").max())
              .sort(["total_ns", "name"], descending=[True, False]))
    return [CallTotal(**row) for row in totals.head(top).to_dicts()], int(totals["calls"].sum())


def _on_gpus(*frames: pl.LazyFrame) -> pl.LazyFrame:
    """FRAMES' GPU work as one frame: device, start_ns, end_ns."""
    return pl.concat([frame.select("device", "start_ns", "end_ns") for frame in frames])


def nvtx_windows(nvtx: pl.LazyFrame, rows: int | None) -> Iterator[pl.DataFrame]:
    """NVTX ranges with their ``depth`` (as ``Trace.nvtx``) in windows of start time; where the frame has none (scanned
    from disk), each window's is counted with the ranges of earlier windows open at its start (:func:`_with_depth`)."""
    depth = depth_read(nvtx)
    windows = start_windows(nvtx.select("start_ns", "end_ns", "name", "thread", *depth), rows)  # what the views read
    return windows if depth else scan(windows, None, _with_depth)


def _with_depth(carried: pl.DataFrame | None, window: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The ranges still open at WINDOW's last start, and WINDOW's ranges with their depth, given CARRIED: those of the
    earlier windows still open at its first start (a thread's stack, a handful). A range that ended by then counts
    once before each of the window's ranges and once as ended, so leaving it out changes no depth."""
    ranges = window.with_columns(pl.lit(False).alias("_carried"))
    if carried is not None:
        ranges = pl.concat([carried.with_columns(pl.lit(True).alias("_carried")), ranges])
    ranged = with_depth(ranges)
    # Each end counted as with_depth counts it; the next window's ranges start no earlier than this one's last.
    ended_at = pl.col("end_ns") + (pl.col("end_ns") <= pl.col("start_ns")).cast(pl.Int64)
    return (ranged.filter(ended_at > pl.col("start_ns").max()).drop("depth", "_carried"),
            ranged.filter(~pl.col("_carried")).drop("_carried"))


def nvtx_views(windows: Iterable[pl.DataFrame], origin_ns: int, edges: list[int],
               limit: int = MAX_TIMELINE_RANGES) -> tuple[list[NvtxInstance], list[NvtxBucket]]:
    """The timeline's NVTX ranges from ranges with depth in WINDOWS: the LIMIT longest and, given EDGES, each thread's
    outermost ranges per slice (:func:`_buckets`), folded: the longest and time per (thread, slice, name) so far."""
    Views = tuple[pl.DataFrame, pl.DataFrame | None]

    def added(views: Views | None, window: pl.DataFrame) -> Views:
        longest = _longest(window, limit)
        times = _bucket_times(window, edges) if len(edges) >= 2 else None
        if views is not None:
            longest = _longest(pl.concat([views[0], longest]), limit)
            if times is not None and views[1] is not None:
                times = pl.concat([views[1], times]).group_by(*_SLICE, "name").agg(pl.col("ns").sum())
        return longest, times

    if (views := fold(windows, None, added)) is None:
        return [], []
    return nvtx_instances(views[0], origin_ns, limit), _buckets(views[1], edges) if views[1] is not None else []


def _longest(nvtx: pl.DataFrame, limit: int) -> pl.DataFrame:
    """The LIMIT longest ranges of NVTX; of equally long ones, the first. Only ranges at least as long as the LIMITth
    longest duration (found on that column alone) are ranked."""
    duration = pl.col("end_ns") - pl.col("start_ns")
    shortest = nvtx.select(duration.top_k(limit).min()).item()
    longest = nvtx.filter(duration >= shortest) if shortest is not None else nvtx
    return longest.top_k(limit, by=[duration, "start_ns"], reverse=[False, True])


def nvtx_instances(nvtx: pl.DataFrame, origin_ns: int, limit: int = MAX_TIMELINE_RANGES) -> list[NvtxInstance]:
    """The longest LIMIT range instances with their nesting depth, by start time; of equally long ones, the first."""
    return [NvtxInstance(**row) for row in _longest(nvtx, limit).sort("start_ns").select(
        "name", pl.col("start_ns") - origin_ns, pl.col("end_ns") - origin_ns, "depth", "thread").to_dicts()]


_SLICE = ["thread", "bucket", "b0", "b1"]


def _bucket_times(nvtx: pl.DataFrame, edges: list[int]) -> pl.DataFrame:
    """Per thread, slice between consecutive EDGES (equal slices) and name: the time inside the thread's outermost
    ranges (thread, bucket, b0, b1, name, ns). Columnar: each outermost range is cut at the edges it crosses."""
    origin, width, last = edges[0], (edges[-1] - edges[0]) / (len(edges) - 1), len(edges) - 2
    pieces = (nvtx.filter((pl.col("depth") == 0) & (pl.col("end_ns") > origin) & (pl.col("start_ns") < edges[-1]))
              .select("thread", "name", "start_ns", "end_ns",
                      pl.int_ranges(((pl.col("start_ns") - origin) / width).floor().clip(0, last).cast(pl.Int64),
                                    ((pl.col("end_ns") - origin) / width).ceil().clip(1, last + 1).cast(pl.Int64))
                      .alias("bucket"))
              .explode("bucket")
              .with_columns(pl.col("bucket").replace_strict(dict(enumerate(bounds)), return_dtype=pl.Int64).alias(name)
                            for name, bounds in (("b0", edges[:-1]), ("b1", edges[1:])))
              .with_columns((pl.min_horizontal("end_ns", "b1") - pl.max_horizontal("start_ns", "b0")).alias("ns")))
    return pieces.group_by(*_SLICE, "name").agg(pl.col("ns").sum())


def _buckets(times: pl.DataFrame, edges: list[int]) -> list[NvtxBucket]:
    """Per thread and slice, from TIMES (:func:`_bucket_times`, of one or more windows, summed): the share inside the
    thread's outermost ranges and the name holding most of it (of equal ones, the first by name). An outermost range
    never overlaps another of its thread, so the shares add up to at most 1."""
    origin = edges[0]
    rows = (times.sort(["ns", "name"], descending=[True, False]).group_by(_SLICE, maintain_order=True)
            .agg(pl.col("name").first(), pl.col("ns").sum()).sort("thread", "bucket"))
    return [NvtxBucket(**row) for row in rows.select(
        "thread", (pl.col("b0") - origin).alias("start_ns"), (pl.col("b1") - origin).alias("end_ns"), "name",
        (pl.col("ns") / (pl.col("b1") - pl.col("b0"))).clip(0.0, 1.0).alias("fraction")).to_dicts()]

