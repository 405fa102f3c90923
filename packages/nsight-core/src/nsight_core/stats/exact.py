"""Exact per-group statistics of a lazy frame in bounded memory: sums and standard deviations from integer sums,
medians by selection, never by sketches.

Why: one name may hold every event of a capture, and Polars' median keeps all its values. Selection finds the two
middle values instead, in a few streamed passes that count values per bucket, finer each pass down to one nanosecond
or byte: memory grows with the number of groups, never with the events, and the result is Polars' exact median.
Mean and sample standard deviation come from the integer sums of the values and of their squares (Int128), so they do
not depend on the order in which the streaming engine adds its batches, as a float sum would in its last bits."""

from __future__ import annotations

import math
from fractions import Fraction

import polars as pl

from nsight_core.trace.streamed import WINDOW_ROWS

BUCKET_BITS = 16
"""Each pass after the first splits its bucket into 2**16: values up to 2**43 (2.4 hours in ns) take at most three
passes, up to 2**27 (134 ms) two."""
_BUCKETS = 1 << BUCKET_BITS


def sums(value: pl.Expr) -> list[pl.Expr]:
    """The aggregations :func:`finish` turns into statistics: ``_n``, ``_sum``, ``_sum2`` (min, max: the caller's)."""
    return [*counts(value), (value.cast(pl.Int128) ** 2).sum().alias("_sum2")]


def counts(value: pl.Expr) -> list[pl.Expr]:
    """``_n`` and ``_sum`` of :func:`sums`: what a mean needs, without the costlier Int128 sum of squares."""
    return [pl.len().cast(pl.Int64).alias("_n"), value.sum().alias("_sum")]


def mean(n: int, total: int) -> float:
    """TOTAL / N as the nearest double (Polars' mean of an integer column whose sum a double holds exactly)."""
    return float(Fraction(total, n))


def stddev(n: int, total: int, total2: int) -> float:
    """The sample standard deviation of N values summing to TOTAL, their squares to TOTAL2; 0 for one value."""
    return 0.0 if n < 2 else math.sqrt(float(Fraction(n * total2 - total * total, n * (n - 1))))


def finish(summary: pl.DataFrame, mean_name: str, stddev_name: str) -> pl.DataFrame:
    """SUMMARY (``_n``, ``_sum``, ``_sum2`` per group: a report's rows) with the mean and the standard deviation,
    computed with exact integers per row (a report is small)."""
    rows = summary.select("_n", "_sum", "_sum2").rows()
    return summary.with_columns(
        pl.Series(mean_name, [mean(n, total) for n, total, _ in rows], dtype=pl.Float64),
        pl.Series(stddev_name, [stddev(n, total, total2) for n, total, total2 in rows], dtype=pl.Float64)).drop("_sum2")


PASS_FILTERS = 64
"""A pass after the first reads only the values in the buckets it narrows to, where they are at most this many (one
condition each; more: every value)."""
MANTISSA_BITS = 10
"""The first pass's buckets: a value's distance from its group's minimum to the nearest 2**-10 of its power of two
(exact below 2**11), at most 2**11 + 53 * 2**10 buckets a group."""


def medians(frame: pl.LazyFrame, key: str, value: str | pl.Expr, groups: pl.DataFrame) -> pl.DataFrame:
    """KEY, ``_median``: the exact median of VALUE (an integer column of FRAME, or an expression of its columns) per
    KEY, by selection in streamed passes over FRAME. GROUPS: KEY, ``_n``, ``_min``, ``_max`` of VALUE per KEY (the
    report's first pass). Values that fit one window (WINDOW_ROWS) are held at once: Polars' median of them, the same
    number, in one pass. Else the first pass's buckets grow with the distance from the group's minimum, as a float's
    precision does (durations cluster near their minimum with a few far outliers), so the middle value is usually found
    in that one pass; each later pass reads only the rows whose VALUE lies in the bucket found: where VALUE is an
    expression of the scan's own columns, that condition reaches the Parquet scan."""
    value = pl.col(value) if isinstance(value, str) else value
    if int(groups["_n"].sum() or 0) <= WINDOW_ROWS:
        return (frame.group_by(key).agg(value.median().alias("_median")).collect(engine="streaming")
                .join(groups.select(key), on=key, how="semi"))
    ranks = pl.concat([groups.select(key, pl.lit(which).alias("_which"), rank.alias("_rank"), "_min")
                       for which, rank in ((0, (pl.col("_n") - 1) // 2), (1, pl.col("_n") // 2))])
    offset = pl.col("_value") - pl.col("_min")
    exponent = (64 - offset.bitwise_leading_zeros().cast(pl.Int64) - (MANTISSA_BITS + 1)).clip(lower_bound=0)
    width = pl.lit(2.0).pow(exponent).cast(pl.Int64)
    counts = (frame.select(key, value.alias("_value")).join(groups.lazy().select(key, "_min"), on=key)
              .group_by(key, ((offset // width) * width + pl.col("_min")).alias("_lo"), width.alias("_width"))
              .agg(pl.len().cast(pl.Int64).alias("_count")).collect(engine="streaming"))
    picked = _picked(counts.join(ranks.select(key, "_which"), on=key), ranks, key)
    found = [picked.filter("_done").select(key, "_which", "_lo")]
    targets = picked.filter(~pl.col("_done")).select(key, "_which", "_rank", "_lo", "_width")
    while targets.height:
        # Each bucket counted once: the two middle values of a group share theirs where they lie in one (always, of
        # an odd count), and then that pass reads each value once.
        probes = targets.select(key, "_lo", "_width").unique()
        spans = probes.select("_lo", (pl.col("_lo") + pl.col("_width")).alias("_hi")).unique().rows()
        inside = pl.any_horizontal([(value >= low) & (value < high) for low, high in spans])
        step = (pl.col("_width") // _BUCKETS).clip(lower_bound=1)
        counts = ((frame.filter(inside) if len(spans) <= PASS_FILTERS else frame).select(key, value.alias("_value"))
                  .join(probes.lazy(), on=key)
                  .filter((pl.col("_value") >= pl.col("_lo")) & (pl.col("_value") < pl.col("_lo") + pl.col("_width")))
                  .group_by(key, pl.col("_lo").alias("_from"), "_width",
                            (pl.col("_lo") + (pl.col("_value") - pl.col("_lo")) // step * step).alias("_bucket"))
                  .agg(pl.len().cast(pl.Int64).alias("_count")).collect(engine="streaming"))
        within = counts.join(targets.select(key, "_which", pl.col("_lo").alias("_from"), "_width"),
                             on=[key, "_from", "_width"])
        picked = _picked(within.select(key, "_which", pl.col("_bucket").alias("_lo"), step.alias("_width"), "_count"),
                         targets, key)
        found.append(picked.filter("_done").select(key, "_which", "_lo"))
        targets = picked.filter(~pl.col("_done")).select(key, "_which", "_rank", "_lo", "_width")
    return pl.concat(found).group_by(key).agg(pl.col("_lo").cast(pl.Float64).mean().alias("_median"))


def _picked(counts: pl.DataFrame, targets: pl.DataFrame, key: str) -> pl.DataFrame:
    """Per target (KEY, ``_which``, ``_rank``: the rank of the value sought among those its buckets hold), the bucket
    of COUNTS (KEY, ``_which``, ``_lo``, ``_width``, ``_count``: every non-empty bucket of the target's, disjoint) that
    holds that rank: its ``_lo`` and ``_width``, the rank within it, ``_done`` where it is one value wide."""
    before = pl.col("_cum") - pl.col("_count")
    return (counts.sort(key, "_which", "_lo")
            .with_columns(pl.col("_count").cum_sum().over(key, "_which").alias("_cum"))
            .join(targets.select(key, "_which", "_rank"), on=[key, "_which"])
            .filter((pl.col("_cum") > pl.col("_rank")) & (before <= pl.col("_rank")))
            .select(key, "_which", (pl.col("_rank") - before).alias("_rank"), "_lo", "_width",
                    (pl.col("_width") == 1).alias("_done")))
