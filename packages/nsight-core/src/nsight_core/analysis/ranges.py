"""NVTX ranges by family with self time: what a range did itself, not what its children did.

`nsys stats` totals nest: a `train` range holding `forward` and `backward` counts their time again,
so shares of summed range time mean little (a range that took 90 % of the capture can show 43 %).
Here each range's self time is its duration minus its direct children's, self times of one thread
never overlap, and shares are of the capture span. Summed (inclusive) time is kept, named as such.
"""

from __future__ import annotations

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.steps import family_pattern

SELF_COLUMNS = {"start_ns": pl.Int64, "end_ns": pl.Int64, "thread": pl.Int64, "name": pl.String}


class RangeFamily(BaseModel):
    """One NVTX name pattern (numbered names are one family): counts, inclusive and self time."""

    pattern: str = Field(description="Range name with digit runs replaced by {n}")
    domain: str
    count: int
    summed_ns: int = Field(description="Summed range durations, nested ranges included (what nsys totals)")
    self_ns: int = Field(description="Summed durations minus the time spent in direct child ranges")
    self_fraction: float = Field(description="self_ns / capture span (0..1 per thread)")
    p50_ns: float
    mean_ns: float
    min_ns: int
    max_ns: int


def with_parents(nvtx: pl.DataFrame) -> pl.DataFrame:
    """NVTX ranges with an id and the id of the range they are nested in on their thread (null: outermost).

    The parent of a range at depth d is the latest range at depth d-1 on the same thread that started
    no later than it did (ranges of one thread nest, so that one encloses it).
    """
    ranges = nvtx.sort("start_ns").with_row_index("id").with_columns(pl.col("id").cast(pl.Int64))
    parents = ranges.select(
        pl.col("id").alias("parent"), "thread", (pl.col("depth") + 1).alias("depth"),
        pl.col("start_ns").alias("parent_start_ns"),
    ).sort("parent_start_ns")
    return ranges.join_asof(parents, left_on="start_ns", right_on="parent_start_ns", by=["thread", "depth"],
                            strategy="backward", check_sortedness=False).drop("parent_start_ns")


def self_time(nvtx: pl.DataFrame) -> pl.DataFrame:
    """Per range (columns of NVTX plus id, parent): self_ns = duration minus direct children's durations."""
    ranges = with_parents(nvtx)
    children = ranges.group_by("parent").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("children_ns"))
    return ranges.join(children, left_on="id", right_on="parent", how="left").with_columns(
        (pl.col("end_ns") - pl.col("start_ns") - pl.col("children_ns").fill_null(0)).alias("self_ns"))


def self_intervals(nvtx: pl.DataFrame) -> pl.DataFrame:
    """The pieces of each range not covered by a child: (start_ns, end_ns, thread, name), per thread disjoint.

    Each time of a thread inside some range lies in exactly one piece, that of its innermost range:
    which range the CPU was in at a moment is a lookup, not a search through the nesting.
    """
    if not nvtx.height:
        return pl.DataFrame(schema=SELF_COLUMNS)
    ranges = with_parents(nvtx)
    owner = ranges.select(pl.col("id").alias("parent"), pl.col("start_ns").alias("parent_start"),
                          pl.col("end_ns").alias("parent_end"), pl.col("name").alias("parent_name"))
    children = ranges.filter(pl.col("parent").is_not_null()).sort("parent", "start_ns").join(owner, on="parent")
    before_child = children.select(
        pl.col("end_ns").shift(1).over("parent").fill_null(pl.col("parent_start")).alias("start_ns"),
        pl.col("start_ns").alias("end_ns"), "thread", pl.col("parent_name").alias("name"))
    after_last = children.group_by("parent").agg(
        pl.col("end_ns").max().alias("start_ns"), pl.col("parent_end").first().alias("end_ns"),
        pl.col("thread").first(), pl.col("parent_name").first().alias("name")).drop("parent")
    with_children = children["parent"].unique()
    leaves = ranges.filter(~pl.col("id").is_in(with_children.implode())).select("start_ns", "end_ns", "thread", "name")
    return (pl.concat([before_child, after_last.select(list(SELF_COLUMNS)), leaves])
            .filter(pl.col("end_ns") > pl.col("start_ns")).sort("thread", "start_ns"))


def range_families(nvtx: pl.DataFrame, span_ns: int) -> list[RangeFamily]:
    """NVTX ranges grouped by family, longest self time first, shares of the capture span SPAN_NS."""
    if not nvtx.height:
        return []
    duration = pl.col("end_ns") - pl.col("start_ns")
    grouped = (
        self_time(nvtx).with_columns(family_pattern(pl.col("name")).alias("pattern"))
        .group_by("pattern", "domain")
        .agg(pl.len().alias("count"), duration.sum().alias("summed_ns"), pl.col("self_ns").sum(),
             duration.median().alias("p50_ns"), duration.mean().alias("mean_ns"), duration.min().alias("min_ns"),
             duration.max().alias("max_ns"))
        .with_columns((pl.col("self_ns") / span_ns if span_ns else pl.lit(0.0)).alias("self_fraction"))
        .sort(["self_ns", "pattern"], descending=[True, False])
    )
    return [RangeFamily(**row) for row in grouped.to_dicts()]
