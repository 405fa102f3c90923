"""Interval arithmetic on event frames (columns start_ns, end_ns and optionally device), whole or in windows of time.

GPU busy time is the length of the UNION of kernel intervals: two kernels running at once on two
streams keep the GPU busy once, not twice. Summing per-kernel times (what `nsys stats` totals are)
double-counts that overlap and can exceed the wall time.

A large capture's events do not fit in memory at once: they come in windows of start time
(:func:`start_windows`), each holding a bounded number of events, and the union is built window by window
(:func:`busy_over`), exactly: see there.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

import polars as pl

HISTOGRAM_BUCKETS = 1 << 16
"""The windows are cut between buckets of a histogram of start times this fine: a window holds at most
WINDOW_ROWS plus one bucket's events."""


def start_windows(frame: pl.LazyFrame, rows: int | None) -> Iterator[pl.DataFrame]:
    """FRAME's events (a start_ns column) in consecutive windows of start time, each of about ROWS events: every
    event of a window starts no earlier than every event of the windows before it, and each event is in one window.

    ROWS None, or FRAME no larger: FRAME whole, one window. Else the cuts come from a histogram of the starts (one
    streamed pass, :func:`start_cuts`), and each window is a streamed query of its own (a Parquet scan skips the files
    whose starts lie outside it: the spilled tables are in the export's order, which is mostly by start).
    """
    if rows is None:
        yield frame.collect()
        return
    for inside in window_filters(start_cuts(frame, rows), pl.col("start_ns")):
        yield frame.filter(inside).collect(engine="streaming")


def start_cuts(frame: pl.LazyFrame, rows: int | None) -> list[int]:
    """Start times that cut FRAME's events (a start_ns column) into windows of about ROWS events each, ascending; none
    where ROWS is None or FRAME no larger. A window holds at most ROWS plus one histogram bucket's events."""
    if rows is None:
        return []
    start = pl.col("start_ns")
    count, low, high = (frame.select(pl.len(), start.min().alias("_low"), start.max().alias("_high"))
                        .collect(engine="streaming").row(0))
    if count <= rows:
        return []
    histogram, width = _histogram(frame, low, high)
    before = pl.col("_count").cum_sum() - pl.col("_count")
    firsts = (histogram.group_by((before // rows).alias("_window")).agg(pl.col("_bucket").min())
              .sort("_window")["_bucket"].to_list())
    return [low + bucket * width for bucket in firsts[1:]]


def window_filters(cuts: list[int], position: pl.Expr) -> Iterator[pl.Expr]:
    """Per window that CUTS make, in order, the condition on POSITION that selects its rows: every row in one window."""
    for lower, upper in zip([None, *cuts], [*cuts, None], strict=True):
        inside = pl.lit(True) if lower is None else position >= lower
        yield inside if upper is None else inside & (position < upper)


def step_batches(starts: pl.Series, cuts: list[int]) -> list[tuple[int, int]]:
    """Consecutive batches of steps (their STARTS, sorted) that CUTS (start times, :func:`start_cuts`) make, as row
    positions (first, end): each batch begins at the step a cut falls in (the first step at least), so a step is never
    split and the events of one window of start time lie in one batch or the batch before."""
    firsts = sorted({0, *(max(int(starts.search_sorted(cut, side="right")) - 1, 0) for cut in cuts)})
    return list(zip(firsts, [*firsts[1:], starts.len()], strict=True))


def _histogram(frame: pl.LazyFrame, low: int, high: int) -> tuple[pl.DataFrame, int]:
    """How many of FRAME's events start in each of HISTOGRAM_BUCKETS buckets from LOW to HIGH (``_bucket``,
    ``_count``, by bucket; empty ones left out; one streamed pass), and the buckets' width."""
    width = max(1, -(-(high - low + 1) // HISTOGRAM_BUCKETS))
    histogram = (frame.select(((pl.col("start_ns") - low) // width).alias("_bucket")).group_by("_bucket")
                 .agg(pl.len().alias("_count")).collect(engine="streaming").sort("_bucket"))
    return histogram, width


def union_intervals(events: pl.DataFrame) -> pl.DataFrame:
    """Merge overlapping or touching [start_ns, end_ns) intervals, per device when there is one.

    Returns columns (device, start_ns, end_ns), sorted, with no two intervals of one device overlapping.
    By start time, an interval starts a new merged one when it starts after every earlier one ended
    (the running maximum of their ends); a merged interval ends at that maximum at its last member.
    """
    frame = _with_device(events)
    if frame.select(pl.col("device").n_unique()).item() <= 1:  # one GPU: no per-device windows, and no sort
        ordered = frame if frame["start_ns"].is_sorted() else frame.sort("start_ns")
        reach = pl.col("end_ns").cum_max()
        new_group = (pl.col("start_ns") > reach.shift(1)).fill_null(True)
    else:
        ordered = frame.sort("device", "start_ns")
        reach = pl.col("end_ns").cum_max().over("device")
        new_group = (pl.col("start_ns") > reach.shift(1).over("device")).fill_null(True)
    flagged = ordered.with_columns(reach.alias("_reach"), new_group.alias("_new"))
    last = pl.col("_new").shift(-1).fill_null(True)
    return flagged.filter("_new").select("device", "start_ns").with_columns(
        flagged.filter(last)["_reach"].alias("end_ns"))


def _with_device(events: pl.DataFrame) -> pl.DataFrame:
    frame = events if "device" in events.columns else events.with_columns(pl.lit(0, pl.Int64).alias("device"))
    return frame.select("device", "start_ns", "end_ns")


class Busy(NamedTuple):
    """The union of some events' intervals: its length (each device counted separately) and, per slice between
    consecutive edges, covered time / (slice width x devices with events)."""

    busy_ns: int
    fractions: list[float]


def busy_over(windows: Iterable[pl.DataFrame], edges: list[int]) -> Busy:
    """The union of the intervals in WINDOWS (:func:`start_windows`: each window's events start no earlier than
    those of the windows before), measured whole and per slice between consecutive EDGES.

    Window by window, exactly: by the time a window comes, the union so far ends, per device, at the largest end
    seen (R), and covers [s, R] for the latest start s seen; every event of the window starts at or after s, so
    its part before R is covered already. Each window's events are cut to start at R, merged, and their merged
    intervals (disjoint from all earlier ones) add their length and their time before each edge. Nothing of a
    window is kept but R per device and a number per edge.
    """
    reach: dict[int, int] = {}
    devices: set[int] = set()
    busy = 0
    covered = pl.Series("covered", [0] * len(edges), dtype=pl.Int64)
    for window in windows:
        frame = _with_device(window)
        if reach:
            floor = pl.col("device").replace_strict(reach, default=None, return_dtype=pl.Int64)
            frame = frame.with_columns(pl.max_horizontal("start_ns", floor), pl.max_horizontal("end_ns", floor))
        merged = union_intervals(frame)
        if not merged.height:
            continue
        busy += int((merged["end_ns"] - merged["start_ns"]).sum())
        if edges:
            for part in merged.partition_by("device"):
                covered += _covered_before(part, edges)
        reach.update(merged.group_by("device").agg(pl.col("end_ns").max()).iter_rows())
        devices.update(merged["device"].unique().to_list())
        del window, frame, merged  # not alive while the next window is read
    if not devices or not edges:
        return Busy(busy, [0.0] * max(len(edges) - 1, 0))
    width = (pl.col("edge").shift(-1) - pl.col("edge")) * len(devices)
    fractions = pl.DataFrame({"edge": pl.Series(edges, dtype=pl.Int64), "covered": covered}).select(
        pl.when(width > 0).then(((pl.col("covered").shift(-1) - pl.col("covered")) / width).clip(upper_bound=1.0))
        .otherwise(0.0).head(len(edges) - 1))
    return Busy(busy, [float(value) for value in fractions.to_series()])


def busy_ns(events: pl.DataFrame) -> int:
    """Total time covered by EVENTS, each device counted separately (ns)."""
    return busy_over([events], []).busy_ns


def bucket_edges(start_ns: int, end_ns: int, buckets: int) -> list[int]:
    """BUCKETS + 1 edges cutting [start_ns, end_ns] into equal slices (none when the range is empty)."""
    if end_ns <= start_ns or buckets < 1:
        return []
    width = (end_ns - start_ns) / buckets
    return [start_ns + round(i * width) for i in range(buckets + 1)]


def busy_fractions(events: pl.DataFrame, edges: list[int]) -> list[float]:
    """For each slice between consecutive EDGES: covered time / (slice width x devices with events)."""
    return busy_over([events], edges).fractions


def _covered_before(merged: pl.DataFrame, edges: list[int]) -> pl.Series:
    """For each edge t: how much of one device's (disjoint, sorted) intervals lies before t.

    A binary search finds the last interval starting before each edge; the running sum of lengths up to
    it, less the part of it past the edge, is the covered time. Columnar: no Python loop over intervals.
    """
    at = pl.Series("edge", edges, dtype=pl.Int64)
    position = merged["start_ns"].search_sorted(at, side="right").cast(pl.Int64) - 1
    cumulative = (merged["end_ns"] - merged["start_ns"]).cum_sum()
    last = position.clip(lower_bound=0)
    before = (cumulative.gather(last) - (merged["end_ns"].gather(last) - at).clip(lower_bound=0))
    return pl.Series(before).zip_with(position >= 0, pl.Series([0] * len(edges), dtype=pl.Int64))
