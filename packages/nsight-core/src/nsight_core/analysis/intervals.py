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
    """
    frame = events if "device" in events.columns else events.with_columns(pl.lit(0, pl.Int64).alias("device"))
    frame = frame.select("device", "start_ns", "end_ns").sort("device", "start_ns")
    reach = pl.col("end_ns").cum_max().over("device")
    new_group = (pl.col("start_ns") > reach.shift(1).over("device")).fill_null(True)
    return (
        frame.with_columns(new_group.cast(pl.Int64).cum_sum().over("device").alias("group"))
        .group_by("device", "group", maintain_order=True)
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("group")
    )


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
    covered = [0] * len(edges)
    merged = union_intervals(events)
    devices = merged["device"].n_unique() if merged.height else 1
    for device_frame in merged.partition_by("device"):
        for index, value in enumerate(_covered_before(device_frame, edges)):
            covered[index] += value
    fractions = []
    for i in range(len(edges) - 1):
        width = (edges[i + 1] - edges[i]) * devices
        fractions.append(min(1.0, (covered[i + 1] - covered[i]) / width) if width else 0.0)
    return fractions


def _covered_before(merged: pl.DataFrame, edges: list[int]) -> list[int]:
    """For each edge t: how much of the (disjoint, sorted) intervals lies before t."""
    starts = merged["start_ns"]
    ends = merged["end_ns"].to_list()
    cumulative = (merged["end_ns"] - merged["start_ns"]).cum_sum().to_list()
    positions = starts.search_sorted(pl.Series(edges, dtype=pl.Int64), side="right").to_list()
    result = []
    for edge, position in zip(edges, positions, strict=True):
        if position == 0:
            result.append(0)
            continue
        result.append(cumulative[position - 1] - max(0, ends[position - 1] - edge))
    return result
