"""How every pass over a capture's events is cut: windows of start time (or of correlation id) holding about WINDOW_ROWS
events each, and batches of steps inside them; the answers do not depend on where the cuts fall."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

HISTOGRAM_BUCKETS = 1 << 16
"""The windows are cut between buckets of a start-time histogram this fine: at most WINDOW_ROWS plus one bucket each."""


def start_windows(frame: pl.LazyFrame, rows: int | None) -> Iterator[pl.DataFrame]:
    """FRAME's events in consecutive windows of start time (:func:`start_cuts`), each a streamed query: a Parquet scan
    skips the files whose starts lie outside it (spilled tables are in the export's order, mostly by start)."""
    if rows is None:
        yield frame.collect()
        return
    for inside in window_filters(start_cuts(frame, rows), pl.col("start_ns")):
        yield frame.filter(inside).collect(engine="streaming")


def start_cuts(frame: pl.LazyFrame, rows: int | None) -> list[int]:
    """Ascending start times cutting FRAME's events into windows of about ROWS (none: ROWS None or FRAME no larger)."""
    if rows is None:
        return []
    start = pl.col("start_ns")
    count, low, high = (frame.select(pl.len(), start.min().alias("_low"), start.max().alias("_high"))
                        .collect(engine="streaming").row(0))
    if count <= rows:
        return []
    width = max(1, -(-(high - low + 1) // HISTOGRAM_BUCKETS))
    histogram = (frame.select(((start - low) // width).alias("_bucket")).group_by("_bucket")
                 .agg(pl.len().alias("_count")).collect(engine="streaming").sort("_bucket"))
    before = pl.col("_count").cum_sum() - pl.col("_count")
    firsts = (histogram.group_by((before // rows).alias("_window")).agg(pl.col("_bucket").min())
              .sort("_window")["_bucket"].to_list())
    return [low + bucket * width for bucket in firsts[1:]]


def window_filters(cuts: list[int], position: pl.Expr) -> Iterator[pl.Expr]:
    """Per window that CUTS make, in order, the condition on POSITION that selects its rows."""
    for lower, upper in zip([None, *cuts], [*cuts, None], strict=True):
        inside = pl.lit(True) if lower is None else position >= lower
        yield inside if upper is None else inside & (position < upper)


def step_batches(starts: pl.Series, cuts: list[int]) -> list[tuple[int, int]]:
    """Consecutive batches of steps (STARTS, sorted) by CUTS (:func:`start_cuts`), as (first, end) rows: each begins at
    the step a cut falls in, so no step is split and a window's events lie in one batch or the one before."""
    firsts = sorted({0, *(max(int(starts.search_sorted(cut, side="right")) - 1, 0) for cut in cuts)})
    return list(zip(firsts, [*firsts[1:], starts.len()], strict=True))


def in_steps(events: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """EVENTS that start inside one of STEPS (step, start_ns, end_ns, by start), with its step, by start."""
    located = events.sort("start_ns").join_asof(
        steps.select("step", pl.col("start_ns").alias("_step_start"), pl.col("end_ns").alias("_step_end")),
        left_on="start_ns", right_on="_step_start", strategy="backward")
    return located.filter(pl.col("start_ns") < pl.col("_step_end")).drop("_step_start", "_step_end")


def batches(firsts: pl.Series, work: int | None) -> list[tuple[int, int]]:
    """Batches of about WORK pieces of GPU work (first window, windows; None: one); FIRSTS: work before each window."""
    if work is None:
        return [(0, firsts.len())] if firsts.len() else []
    cuts, begin = [], 0
    while begin < firsts.len():
        end = max(int(firsts.search_sorted(int(firsts[begin]) + work, side="left")), begin + 1)
        cuts.append((begin, end - begin))
        begin = end
    return cuts
