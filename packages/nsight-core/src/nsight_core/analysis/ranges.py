"""NVTX ranges by family with self time: a range's duration less its direct children's, which of one thread never
overlap (`nsys stats` totals nest, counting a child's time again in its parent). Shares are of the capture span; summed
(inclusive) time is kept, named as such."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.analysis.codes import distinct_codes, family_codes
from nsight_core.trace.streamed import Events


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
    gpu_ops: int = Field(default=0, description="GPU work (kernels, copies, memsets, graphs) the ranges launched")
    gpu_span_ns: int | None = Field(default=None, description="Summed GPU spans of the ranges: each from the start of "
                                    "its first GPU work to the end of its last (None: they launched none)")


def with_parents(nvtx: pl.DataFrame, parents: pl.Series | None = None) -> pl.DataFrame:
    """NVTX ranges by start with an ``id`` (the row's position) and the ``parent`` they are nested in (null: outermost):
    the latest range one depth up on the same thread that started no later. PARENTS: those, where the caller has any."""
    ranges = by_start(nvtx).select(pl.int_range(pl.len(), dtype=pl.Int64).alias("id"), pl.all())
    if parents is not None:
        return ranges.with_columns(parents)
    # (thread, depth) as one 32-bit integer: a join by two columns, or by 64-bit ones, takes far more memory.
    keys = ranges.select(pl.col("id").cast(pl.UInt32), _thread_level(ranges).alias("_level"), "start_ns")
    levels = keys["_level"].unique()
    if levels.len() <= FILLED_LEVELS:
        return ranges.with_columns(keys.select(_filled_parents(levels)).to_series().cast(pl.Int64))
    above = keys.select(pl.col("id").alias("parent"), pl.col("_level") + 1, pl.col("start_ns").alias("_parent_start"))
    found = keys.join_asof(above, left_on="start_ns", right_on="_parent_start", by="_level", strategy="backward",
                           check_sortedness=False)
    return ranges.with_columns(found["parent"].cast(pl.Int64))


FILLED_LEVELS = 32
"""Levels (thread and depth pairs) up to which :func:`with_parents` fills each level's latest range forward, a pass
per level, rather than joining by level: at a few levels the passes are the faster."""


def _filled_parents(levels: pl.Series) -> pl.Expr:
    """Each row's parent (id, _level and start_ns of :func:`with_parents`' keys) as its as-of join finds it: per level,
    the latest row so far, read at the last row starting with this one (a parent may start at the same time, later)."""
    ids, level, start = pl.col("id"), pl.col("_level"), pl.col("start_ns")
    last_with_start = pl.when((start != start.shift(-1)).fill_null(True)).then(ids).backward_fill()
    present = set(levels.to_list())
    return pl.coalesce(pl.repeat(None, pl.len(), dtype=pl.UInt32), *(
        pl.when(level == value + 1).then(pl.when(level == value).then(ids).forward_fill().gather(last_with_start))
        for value in sorted(present) if value + 1 in present)).alias("parent")


def by_start(frame: pl.DataFrame) -> pl.DataFrame:
    """FRAME by start_ns, ties in their order; FRAME itself where it is so already (a sort copies)."""
    return frame if frame["start_ns"].is_sorted() else frame.sort("start_ns", maintain_order=True)


def _thread_level(ranges: pl.DataFrame) -> pl.Expr:
    """(thread, depth) of each range as one integer (UInt32 where it fits): depth + 1 is the next level's."""
    codes, threads = distinct_codes(ranges, "thread")
    if threads.len() == 1:
        return pl.col("depth").cast(pl.UInt32)
    span = (ranges.select(pl.col("depth").max()).item() or 0) + 2
    dtype = pl.UInt32 if threads.len() * span < 2**32 else pl.Int64
    return pl.lit(codes).cast(dtype) * span + pl.col("depth").cast(dtype)


@dataclass(frozen=True, kw_only=True)
class CodedRanges:
    """The first NVTX RANGES of FRAMES by start (WHOLE: all, with the loader's depth), whose families and nesting are
    made once, on first use: the range table's thread asks for the nesting first, while the steps' search codes."""

    ranges: pl.DataFrame
    frames: Events
    whole: bool

    @functools.cached_property
    def codes(self) -> tuple[pl.Series, pl.Series]:
        """Each range's family as a code into the families (:func:`family_codes`) of the capture's distinct names."""
        return family_codes(self.ranges, "name", self.frames.nvtx_names["name"])

    @functools.cached_property
    def nested(self) -> pl.DataFrame:
        """The ranges with their parents (:func:`with_parents`) and self times (:func:`self_time`)."""
        return self_time(with_parents(self.ranges))

    def nesting(self, keep: pl.Expr, *columns: str) -> Nesting:
        """The :class:`Nesting` of the ranges KEEP selects (their COLUMNS), with their codes."""
        kept = self.ranges.select(keep.fill_null(False)).to_series()
        nested = self.nested if kept.all() else self_time(with_parents(self.ranges.filter(kept)))
        family, families = self.codes
        return Nesting(ranges=nested.select("id", *columns, "parent", "self_ns"), family=family.filter(kept),
                       families=families)


@dataclass(frozen=True, kw_only=True)
class Nesting:
    """NVTX ranges with their parents (:func:`with_parents`) and self times (:func:`self_time`), and each one's family
    as a code into FAMILIES (:func:`family_codes`): made once for the families and the budget, which both read them."""

    ranges: pl.DataFrame
    family: pl.Series
    families: pl.Series

    @classmethod
    def of(cls, nvtx: pl.DataFrame) -> Nesting:
        """The nesting of NVTX."""
        ranges = self_time(with_parents(nvtx))
        family, codes = family_codes(ranges, "name")
        return cls(ranges=ranges, family=family, families=codes)


def self_time(ranges: pl.DataFrame) -> pl.DataFrame:
    """RANGES (:func:`with_parents`' frame) with self_ns: the duration less the direct children's durations."""
    duration = pl.col("end_ns") - pl.col("start_ns")
    # A lazy query: Polars' default engine groups by parent faster than an eager group-by.
    children = ranges.lazy().group_by("parent").agg(duration.sum()).drop_nulls("parent").collect()
    # A range's id is its row: the children's sums go to their parents' rows, no join of every range needed.
    summed = pl.zeros(ranges.height, pl.Int64, eager=True).scatter(children["parent"], children["end_ns"])
    return ranges.with_columns((duration - summed).alias("self_ns"))


def self_pieces(ranges: pl.DataFrame, of: pl.Series | None = None) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The pieces of each of RANGES (:func:`with_parents`' frame) not covered by a child (start_ns, end_ns, ``id``: the
    innermost range), per thread disjoint, as three frames: the gap before each child (by start), the rest of each
    parent after its last child (by parent), and the ranges without children (by start); where ranges nest, each is by
    start time. OF (a mask of RANGES): only those ranges' pieces."""
    children = ranges.select("parent", "start_ns", "end_ns").filter(pl.col("parent").is_not_null())
    parent = children["parent"]
    if of is not None:  # a range's pieces need all its children, and only those
        children = children.filter(pl.lit(of).gather(pl.col("parent")))
    # A piece from the previous sibling's end (the parent's start for the first child) to the child's start.
    before_child = children.select(
        pl.col("end_ns").shift(1).over("parent").fill_null(ranges["start_ns"].gather(children["parent"]))
        .alias("start_ns"), pl.col("start_ns").alias("end_ns"), pl.col("parent").alias("id"))
    after_last = children.group_by("parent", maintain_order=True).agg(pl.col("end_ns").max().alias("start_ns"))
    del children
    after_last = after_last.select("start_ns", ranges["end_ns"].gather(after_last["parent"]).alias("end_ns"),
                                   pl.col("parent").alias("id"))
    leaf = ~pl.col("id").is_in(parent.unique().implode())
    leaves = ranges.select("start_ns", "end_ns", "id").filter(leaf if of is None else leaf & pl.lit(of))
    positive = pl.col("end_ns") > pl.col("start_ns")
    return before_child.filter(positive), after_last.filter(positive), leaves.filter(positive)


def nest(ranges: pl.DataFrame) -> bool:
    """Whether RANGES (:func:`with_parents`' frame, one thread) nest: each inside its parent, after its parent's
    previous range (or the previous outermost one), so their self pieces do not overlap. At a few depths the range
    before one at its depth stands in for its previous sibling: where all lie in their parents, it is that or in one."""
    depth, start, end = pl.col("depth"), pl.col("start_ns"), pl.col("end_ns")
    depths = ranges["depth"].unique()
    tests = ([start.filter(depth == value) >= end.filter(depth == value).shift(1) for value in depths]
             if depths.len() <= FILLED_LEVELS else [start >= end.shift(1).over("parent")])  # after the sibling
    tests.append(end <= end.gather(pl.col("parent")))  # inside the parent
    return bool(ranges.select(pl.all_horizontal(*(test.fill_null(True).all() for test in tests))).item())


def in_parent_order(pieces: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]) -> pl.DataFrame:
    """:func:`self_pieces` as one frame in the order that decides which of two pieces starting together (of ranges
    that cross) comes first: the gaps before children by parent (then start), the rests by parent, the leaves."""
    before_child, after_last, leaves = pieces
    return pl.concat([before_child.sort("id", maintain_order=True), after_last.sort("id"), leaves])


