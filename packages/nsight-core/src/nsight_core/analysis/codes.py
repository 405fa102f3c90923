"""Codes for grouping and matching by name: a name's family pattern, integer codes for the distinct values of a column,
several codes joined into one key, and tests run once per distinct value. Why: Polars groups by one integer column in a
fraction of the time and memory it takes for strings or several columns, and a regex over a handful of distinct names is
cheap where one over every event is not."""

from __future__ import annotations

import math
from collections.abc import Callable

import polars as pl

NUMBER_PLACEHOLDER = "{n}"


def family_pattern(name: pl.Expr) -> pl.Expr:
    """A range name's family: digit runs become {n} (`epoch3/step_7` -> `epoch{n}/step_{n}`), once per distinct name."""
    distinct = name.unique(maintain_order=True)
    return name.replace_strict(distinct, pattern_of(distinct))


def pattern_of(name: pl.Expr) -> pl.Expr:
    """:func:`family_pattern` name by name: for a streamed query, which cannot look at the distinct names first."""
    return name.str.replace_all(r"\d+", NUMBER_PLACEHOLDER, literal=False)


def distinct_codes(frame: pl.DataFrame, column: str, among: pl.Series | None = None) -> tuple[pl.Series, pl.Series]:
    """FRAME's COLUMN as UInt32 codes (null a value like any other) and the distinct values they index, sorted: a
    binary search in the few distinct values finds the codes with no hash table per value. AMONG: values that hold
    every one of COLUMN's, where the caller found them already (the capture's distinct names): no pass to find them."""
    distinct = (frame if among is None else among.to_frame(column)).select(pl.col(column).unique().sort())[column]
    if distinct.len() == 1:  # one value throughout (one thread, the default domain): no search per row
        return pl.zeros(frame.height, pl.UInt32, eager=True).alias(column), distinct
    if distinct.dtype == pl.String and not distinct.null_count():  # text: a hash lookup, not string comparisons
        return frame.select(text_code(pl.col(column), distinct)).to_series(), distinct
    return frame.select(pl.lit(distinct).search_sorted(pl.col(column), side="left")).to_series(), distinct


def text_code(text: pl.Expr, distinct: pl.Series) -> pl.Expr:
    """TEXT's position (UInt32) in DISTINCT, its distinct values (no null among them), by a hash lookup: an expression,
    so that a lazy frame's passes each code their rows as they read them."""
    return text.cast(pl.Enum(distinct)).to_physical().cast(pl.UInt32)


def joint_code(*parts: tuple[pl.Expr, int]) -> pl.Expr:
    """One code per row for several PARTS (code, number of codes), equal for equal tuples: the digits of one mixed-radix
    number, which Polars groups by with no row encoding of the keys (:func:`joint_parts` takes them back)."""
    varying = [(code, size) for code, size in parts if size > 1]
    if not varying:
        return pl.repeat(0, pl.len(), dtype=pl.UInt32).alias("_key")
    dtype = pl.UInt64 if math.prod(size for _, size in varying) > 2**32 else pl.UInt32
    joint = varying[0][0].cast(dtype)
    for code, size in varying[1:]:
        joint = joint * size + code.cast(dtype)
    return joint.alias("_key")


def joint_parts(joint: pl.Series, *sizes: int) -> list[pl.Series]:
    """The codes (UInt32) of each part of JOINT, a :func:`joint_code` of parts of these SIZES, in their order."""
    parts = []
    for size in reversed(sizes):
        parts.append((joint % size).cast(pl.UInt32) if size > 1 else pl.zeros(joint.len(), pl.UInt32, eager=True))
        joint = joint // size if size > 1 else joint
    return parts[::-1]


def matching(frame: pl.DataFrame | pl.LazyFrame, column: str, test: Callable[[pl.Expr], pl.Expr]) -> pl.Expr:
    """A filter of FRAME to the rows whose COLUMN passes TEST, run once per distinct value; by the values' ids where
    FRAME has them (``<column>_id``, as a loaded capture's calls have ``name_id``), found among integers, not text."""
    key = f"{column}_id" if f"{column}_id" in frame.collect_schema().names() else column
    distinct = frame.lazy().select(key, column).unique(key).collect(engine="streaming")
    return pl.col(key).is_in(distinct.filter(test(pl.col(column)))[key].implode())


def family_codes(frame: pl.DataFrame, column: str, among: pl.Series | None = None) -> tuple[pl.Series, pl.Series]:
    """The family (:func:`family_pattern`) of each name in FRAME's COLUMN as a code, and the families it indexes (of
    the names AMONG, where given: :func:`distinct_codes`)."""
    name_codes, distinct = distinct_codes(frame, column, among)
    patterns = pl.select(pattern_of(pl.lit(distinct)).alias("pattern"))
    pattern_codes, families = distinct_codes(patterns, "pattern")
    return pattern_codes.gather(name_codes), families
