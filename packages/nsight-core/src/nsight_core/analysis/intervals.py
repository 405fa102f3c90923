"""Interval arithmetic on event frames (columns start_ns, end_ns and optionally device).

GPU busy time is the length of the UNION of kernel intervals: two kernels running at once on two
streams keep the GPU busy once, not twice. Summing per-kernel times (what `nsys stats` totals are)
double-counts that overlap and can exceed the wall time.
"""

from __future__ import annotations

import polars as pl


def union_intervals(events: pl.DataFrame) -> pl.DataFrame:
    """Merge overlapping or touching [start_ns, end_ns) intervals, per device when there is one.

    Returns columns (device, start_ns, end_ns), sorted, with no two intervals of one device overlapping.
    By start time, an interval starts a new merged one when it starts after every earlier one ended
    (the running maximum of their ends); a merged interval ends at that maximum at its last member.
    """
    frame = events if "device" in events.columns else events.with_columns(pl.lit(0, pl.Int64).alias("device"))
    frame = frame.select("device", "start_ns", "end_ns")
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


def busy_ns(events: pl.DataFrame) -> int:
    """Total time covered by EVENTS, each device counted separately (ns)."""
    merged = union_intervals(events)
    return int((merged["end_ns"] - merged["start_ns"]).sum()) if merged.height else 0


def bucket_edges(start_ns: int, end_ns: int, buckets: int) -> list[int]:
    """BUCKETS + 1 edges cutting [start_ns, end_ns] into equal slices (none when the range is empty)."""
    if end_ns <= start_ns or buckets < 1:
        return []
    width = (end_ns - start_ns) / buckets
    return [start_ns + round(i * width) for i in range(buckets + 1)]


def busy_fractions(events: pl.DataFrame, edges: list[int]) -> list[float]:
    """For each slice between consecutive EDGES: covered time / (slice width x devices with events)."""
    merged = union_intervals(events)
    if not merged.height:
        return [0.0] * (len(edges) - 1)
    devices = merged["device"].n_unique()
    covered = (pl.concat([_covered_before(frame, edges) for frame in merged.partition_by("device")])
               .group_by("edge", maintain_order=True).agg(pl.col("covered").sum()).sort("edge"))
    width = (pl.col("edge").shift(-1) - pl.col("edge")) * devices
    fractions = covered.select(
        pl.when(width > 0).then(((pl.col("covered").shift(-1) - pl.col("covered")) / width).clip(upper_bound=1.0))
        .otherwise(0.0).head(len(edges) - 1))
    return [float(value) for value in fractions.to_series()]


def _covered_before(merged: pl.DataFrame, edges: list[int]) -> pl.DataFrame:
    """For each edge t: how much of one device's (disjoint, sorted) intervals lies before t (columns edge, covered).

    A binary search finds the last interval starting before each edge; the running sum of lengths up to
    it, less the part of it past the edge, is the covered time. Columnar: no Python loop over intervals.
    """
    at = pl.Series("edge", edges, dtype=pl.Int64)
    position = merged["start_ns"].search_sorted(at, side="right").cast(pl.Int64) - 1
    cumulative = (merged["end_ns"] - merged["start_ns"]).cum_sum()
    last = position.clip(lower_bound=0)
    before = (cumulative.gather(last) - (merged["end_ns"].gather(last) - at).clip(lower_bound=0))
    return pl.DataFrame({"edge": at, "covered": pl.Series(before).zip_with(position >= 0, pl.Series([0] * len(edges)))})
