"""Exact per-group statistics of a lazy frame in bounded memory: sums and standard deviations from integer sums,
medians by selection, never by sketches.

Why: a report's median per name needs every value of that name, and one name may hold every event of a capture
(a million `step` ranges); Polars' median keeps them all (30 M values: 1 GB). Selection finds the two middle
values instead, each in a few streamed passes that count values per bucket (65,536 buckets over the group's
range of values, then over the one bucket holding the middle value, and so on down to a bucket one nanosecond
or byte wide): memory grows with the number of groups, never with the events, and the result is the exact
median, the mean of the two middle values as Polars gives it.

Mean and sample standard deviation come from the integer sums of the values and of their squares (Int128),
so they are the same whatever the order or batching of the rows: the streaming engine adds partial sums of
batches in an order of its own, and a float sum there would differ in its last bits from run to run.
"""

from __future__ import annotations

import math
from fractions import Fraction

import polars as pl

from nsight_core.trace.streamed import WINDOW_ROWS

BUCKET_BITS = 16
"""Each pass splits a value range into 2**16 buckets: values up to 2**48 (3 days in ns) take at most three passes."""
_BUCKETS = 1 << BUCKET_BITS


def sums(value: pl.Expr) -> list[pl.Expr]:
    """The aggregations :func:`finish` turns into statistics: ``_n``, ``_sum``, ``_sum2``, ``min``-``max`` named
    by the caller."""
    return [pl.len().cast(pl.Int64).alias("_n"), value.sum().alias("_sum"),
            (value.cast(pl.Int128) ** 2).sum().alias("_sum2")]


def mean(n: int, total: int) -> float:
    """TOTAL / N as the nearest double (Polars' mean of an integer column whose sum a double holds exactly)."""
    return float(Fraction(total, n))


def stddev(n: int, total: int, total2: int) -> float:
    """The sample standard deviation of N values summing to TOTAL, their squares to TOTAL2; 0 for one value."""
    if n < 2:
        return 0.0
    return math.sqrt(float(Fraction(n * total2 - total * total, n * (n - 1))))


def finish(summary: pl.DataFrame, mean_name: str, stddev_name: str) -> pl.DataFrame:
    """SUMMARY (``_n``, ``_sum``, ``_sum2`` per group: a report's rows) with the mean and the standard deviation,
    computed with exact integers per row (a report is small)."""
    rows = summary.select("_n", "_sum", "_sum2").rows()
    return summary.with_columns(
        pl.Series(mean_name, [mean(n, total) for n, total, _ in rows], dtype=pl.Float64),
        pl.Series(stddev_name, [stddev(n, total, total2) for n, total, total2 in rows], dtype=pl.Float64),
    ).drop("_sum2")


def medians(frame: pl.LazyFrame, key: str, value: str, groups: pl.DataFrame) -> pl.DataFrame:
    """KEY, ``_median``: the exact median of VALUE (an integer column of FRAME) per KEY, by selection in streamed
    passes over FRAME. GROUPS: KEY, ``_n``, ``_min``, ``_max`` of VALUE per KEY (the report's first pass). Values
    that fit one window (WINDOW_ROWS) are held at once: Polars' median of them, the same number, in one pass."""
    if int(groups["_n"].sum() or 0) <= WINDOW_ROWS:
        return (frame.group_by(key).agg(pl.col(value).median().alias("_median")).collect(engine="streaming")
                .join(groups.select(key), on=key, how="semi"))
    ranks = pl.concat([groups.select(key, pl.lit(which).alias("_which"), rank.alias("_rank"), "_min", "_max")
                       for which, rank in ((0, (pl.col("_n") - 1) // 2), (1, pl.col("_n") // 2))])
    width = [1 << max(0, (high - low).bit_length() - BUCKET_BITS) for low, high in ranks.select("_min", "_max").rows()]
    targets = ranks.select(key, "_which", "_rank", pl.col("_min").alias("_lo"),
                           pl.Series("_width", width, dtype=pl.Int64))
    found = []
    values = frame.select(key, pl.col(value).alias("_value"))
    while targets.height:
        bucket = (pl.col("_value") - pl.col("_lo")) // pl.col("_width")
        # Each distinct bucketing counted once: the two middle values of a group share theirs in the first pass, and
        # in every pass where they lie in one bucket (always, of an odd count), so that pass reads each value once.
        probes = targets.select(key, "_lo", "_width").unique()
        counts = (values.join(probes.lazy(), on=key)
                  .filter((pl.col("_value") >= pl.col("_lo")) & (bucket < _BUCKETS))
                  .group_by(key, "_lo", "_width", bucket.alias("_bucket"))
                  .agg(pl.len().cast(pl.Int64).alias("_count"))
                  .collect(engine="streaming"))
        before = pl.col("_cum") - pl.col("_count")
        picked = (counts.join(targets.select(key, "_which", "_lo", "_width"), on=[key, "_lo", "_width"])
                  .sort(key, "_which", "_bucket")
                  .with_columns(pl.col("_count").cum_sum().over(key, "_which").alias("_cum"))
                  .drop("_lo", "_width")
                  .join(targets, on=[key, "_which"])
                  .filter((pl.col("_cum") > pl.col("_rank")) & (before <= pl.col("_rank")))
                  .select(key, "_which", (pl.col("_rank") - before).alias("_rank"),
                          (pl.col("_lo") + pl.col("_bucket") * pl.col("_width")).alias("_lo"),
                          (pl.col("_width") // _BUCKETS).clip(lower_bound=1).alias("_next"),
                          (pl.col("_width") == 1).alias("_done")))
        found.append(picked.filter("_done").select(key, "_which", "_lo"))
        targets = picked.filter(~pl.col("_done")).select(key, "_which", "_rank", "_lo", pl.col("_next").alias("_width"))
    middle = pl.concat(found) if found else pl.DataFrame(schema={key: groups.schema[key], "_which": pl.Int32,
                                                                 "_lo": pl.Int64})
    return middle.group_by(key).agg(pl.col("_lo").cast(pl.Float64).mean().alias("_median"))
