"""How deep each NVTX range is nested on its thread: what ranges' self time, parents and step families read."""

from __future__ import annotations

import polars as pl

from nsight_core.trace.schema import I64


def with_depth(ranges: pl.DataFrame) -> pl.DataFrame:
    """RANGES (start_ns, end_ns, thread) with ``depth``: how many ranges of its thread enclose it, by start time.

    Ordered by start (outer ranges, the longer, first among ranges starting together), a range's depth is the number of
    its thread's ranges before it (all started no later) less those that ended by its start: an end at the instant of a
    start counts as before it, except a zero-length range's own end, which counts just after (so a range starting where
    another ends is not inside it, and one starting where a zero-length range sits is). RANGES that have a depth keep it
    (the loader counted it over every range of the thread): ranges chosen by time hold every range that encloses one
    of them, so counting again gives the same number."""
    if "depth" in ranges.columns:
        return ranges
    start, end = pl.col("start_ns"), pl.col("end_ns")
    keys = ranges.select("start_ns", "end_ns", "thread")
    # Already in order, with no two ranges alike (where any sort keeps the order): no need to sort.
    ahead = (start.diff() > 0) | ((start.diff() == 0) & (end.diff() < 0))
    if keys.height > 1 and not keys.select(ahead.slice(1).all()).item():
        order = keys.select(pl.arg_sort_by(["start_ns", "end_ns"], descending=[False, True])).to_series()
        ranges, keys = ranges[order], keys[order]
    # A zero-length range's own end sorts one nanosecond later (see above), so "ended by the start" is the last of the
    # sorted ends at or before it: an as-of join per thread, one merge of two sorted columns.
    ended_at = (end + (end <= start).cast(I64)).alias("_end")
    before, ended_count = pl.int_range(pl.len(), dtype=I64), pl.int_range(1, pl.len() + 1, dtype=I64)
    by = None if keys["thread"].n_unique() == 1 else "thread"  # one thread (the usual case): nothing to group
    ended = keys.lazy().select("thread", ended_at).sort("_end").with_columns(
        (ended_count if by is None else ended_count.over(by)).alias("_ended"))
    depth = (keys.lazy().select("thread", "start_ns", (before if by is None else before.over(by)).alias("_before"))
             .join_asof(ended, left_on="start_ns", right_on="_end", by=by, strategy="backward",
                        check_sortedness=False)
             .select((pl.col("_before") - pl.col("_ended").fill_null(0)).alias("depth")).collect())
    return ranges.with_columns(depth.to_series())


def depth_read(nvtx: pl.LazyFrame) -> list[str]:
    """``["depth"]`` where the NVTX frame has its ranges' depth (a capture read whole), else none: the columns to read
    with the ranges for :func:`with_depth` to keep it."""
    return ["depth"] if "depth" in nvtx.collect_schema().names() else []
