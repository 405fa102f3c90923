"""Interval arithmetic on event frames (columns start_ns, end_ns and optionally device), whole or in windows of time.

GPU busy time is the length of the UNION of kernel intervals: two kernels running at once keep the GPU busy once (a sum
of kernel times, as `nsys stats` totals, can exceed the wall time). The union is built exactly, window by window of
start time (:func:`busy_over`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import polars as pl


def union_intervals(events: pl.DataFrame) -> pl.DataFrame:
    """Merge overlapping or touching [start_ns, end_ns) intervals, per device when there is one (device, start_ns,
    end_ns, sorted): by start, one that starts after every earlier one ended begins a new merged interval."""
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
    return flagged.filter("_new").select("device", "start_ns").with_columns(
        flagged.filter(pl.col("_new").shift(-1).fill_null(True))["_reach"].alias("end_ns"))


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

    Exact window by window: per device the union so far covers [s, R] for the latest start s and the largest end R
    seen, so a window's events, cut to start at R and merged, are disjoint from all earlier ones and add their length
    and their time before each edge. Only R per device and a number per edge are kept."""
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
        for part in merged.partition_by("device") if edges else []:
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


def _covered_before(merged: pl.DataFrame, edges: list[int]) -> pl.Series:
    """For each edge t: how much of one device's (disjoint, sorted) intervals lies before t: the running sum of lengths
    up to the last interval starting before t (a binary search), less the part of it past t."""
    at = pl.Series("edge", edges, dtype=pl.Int64)
    position = merged["start_ns"].search_sorted(at, side="right").cast(pl.Int64) - 1
    cumulative = (merged["end_ns"] - merged["start_ns"]).cum_sum()
    last = position.clip(lower_bound=0)
    before = (cumulative.gather(last) - (merged["end_ns"].gather(last) - at).clip(lower_bound=0))
    return pl.Series(before).zip_with(position >= 0, pl.Series([0] * len(edges), dtype=pl.Int64))
