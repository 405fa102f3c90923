"""The NVTX range table (:class:`ranges.RangeFamily` rows) of a capture, in windows of start time.

Per family (name pattern and domain): count, summed time, minimum and maximum are streamed group-bys; the median is
exact in streamed passes (stats/exact.py); the mean is exact from the integer sum. Self time and the GPU work a range
launched on its thread need each range's nesting, which is local in time but for the ranges still open: so the ranges
come in windows of start time, and those still open at a window's start (as many as the nesting is deep) are carried
into it with what they launched so far, so depths and parents are the capture's."""

from __future__ import annotations

import weakref
from concurrent.futures import Executor, Future

import polars as pl

from nsight_core.analysis.codes import family_codes, joint_code, pattern_of, text_code
from nsight_core.analysis.every_step import gpu_work_of, launched_by_id
from nsight_core.analysis.projection import range_gpu_spans
from nsight_core.analysis.ranges import CodedRanges, RangeFamily, by_start, with_parents
from nsight_core.analysis.windows import start_cuts, window_filters
from nsight_core.marks import is_calibration_range
from nsight_core.stats import exact
from nsight_core.trace.depth import depth_read, with_depth
from nsight_core.trace.streamed import WINDOW_ROWS, Events

KEY = "_key"
CARRIED = {"start_ns": pl.Int64, "end_ns": pl.Int64, "thread": pl.Int64, KEY: pl.Int64, "gpu_ops": pl.Int64,
           "gpu_start_ns": pl.Int64, "gpu_end_ns": pl.Int64}


_STARTED: weakref.WeakKeyDictionary[Events, dict[tuple[int, int | None], Future[list[RangeFamily]]]] = \
    weakref.WeakKeyDictionary()
"""Per capture's frames, the range tables :func:`start_range_table` started, by user window and window size."""


def start_range_table(pool: Executor, frames: Events, span_ns: int, window_rows: int | None = WINDOW_ROWS,
                      coded: CodedRanges | None = None) -> None:
    """Start :func:`range_table` of FRAMES in POOL, for the next call with the same arguments to take: it reads only
    the events, so it runs beside what finds the steps and budgets them (Polars computes without the GIL). CODED: all
    of FRAMES' ranges, whose families and nesting the steps and the CPU budget read too (made once for all)."""
    _STARTED.setdefault(frames, {})[(span_ns, window_rows)] = pool.submit(_range_table, frames, span_ns, window_rows,
                                                                          coded)


def range_table(frames: Events, span_ns: int, window_rows: int | None = WINDOW_ROWS) -> list[RangeFamily]:
    """The range families of every NVTX range in FRAMES (SPAN_NS: its user window), with their GPU work, streamed in
    windows of about WINDOW_ROWS ranges (None: one window); the one :func:`start_range_table` started, where it did."""
    started = _STARTED.get(frames, {}).pop((span_ns, window_rows), None)
    return started.result() if started is not None else _range_table(frames, span_ns, window_rows)


def _range_table(frames: Events, span_ns: int, window_rows: int | None,
                 coded: CodedRanges | None = None) -> list[RangeFamily]:
    calls = frames.cuda_api.select("correlation_id", "start_ns", "end_ns", "name", "thread")
    work = gpu_work_of(frames)
    # Windows of about WINDOW_ROWS ranges, calls and GPU work together: a window's calls bring their work with them.
    cuts = start_cuts(pl.concat([frame.select("start_ns") for frame in (frames.nvtx, calls, work)]), window_rows)
    # The nesting first (:class:`CodedRanges`): meanwhile the steps' search codes the families, which it needs at once.
    parents = coded.nested["parent"] if coded is not None and not cuts else None
    key, families = _family_key(frames.nvtx_names, coded.codes[0] if coded is not None else None)
    # The ranges' nesting depth where the frame has it (a capture read whole): the depth of each window's ranges among
    # the carried ones is that same number, counted again.
    ranges = (frames.nvtx if coded is None else coded.ranges).select(  # the codes put in place: the ranges at hand
        "start_ns", "end_ns", "thread", key, *depth_read(frames.nvtx)).lazy()
    if not cuts:  # one window: its ranges read once, for the nesting and the medians both
        ranges = ranges.collect().lazy()
    groups, children, spans = _nested(ranges, calls, work, cuts, parents)
    if not groups.height:
        return []
    groups = groups.join(families, on=KEY)
    groups = groups.with_columns(pl.Series("mean_ns", [exact.mean(n, total) for n, total in
                                                       groups.select("_n", "_sum").rows()], dtype=pl.Float64))
    if "_median" not in groups.columns:
        groups = groups.join(exact.medians(ranges.select(KEY, "start_ns", "end_ns"), KEY,
                                           pl.col("end_ns") - pl.col("start_ns"), groups), on=KEY, how="left")
    rows = (groups.join(children, on=KEY, how="left").join(spans, on=KEY, how="left")
            .with_columns(pl.col("_children", "gpu_ops", "_spans").fill_null(0))
            .select("pattern", "domain", pl.col("_n").alias("count"), pl.col("_sum").alias("summed_ns"),
                    (pl.col("_sum") - pl.col("_children")).alias("self_ns"), pl.col("_median").alias("p50_ns"),
                    "mean_ns", pl.col("_min").alias("min_ns"), pl.col("_max").alias("max_ns"), "gpu_ops",
                    pl.when(pl.col("_spans") > 0).then(pl.col("gpu_span_ns")).alias("gpu_span_ns"))
            .with_columns((pl.col("self_ns") / span_ns if span_ns else pl.lit(0.0)).alias("self_fraction"))
            .filter(~is_calibration_range("pattern"))
            .sort(["self_ns", "pattern"], descending=[True, False]))
    return [RangeFamily(**row) for row in rows.to_dicts()]


def _family_key(names: pl.DataFrame, family: pl.Series | None = None) -> tuple[pl.Expr, pl.DataFrame]:
    """KEY of each range, one integer per family (name pattern and domain: :func:`codes.joint_code` of their codes), as
    an expression of its name (or FAMILY, its family's code among NAMES) and domain, and the families (KEY, pattern,
    domain). NAMES: the capture's distinct (name, domain) pairs, whose patterns are made once: no regex per range."""
    distinct = names.select(pl.col("name").unique().sort())
    pattern, patterns = family_codes(distinct, "name")
    domains = names.select(pl.col("domain").unique().sort()).to_series()
    # Elementwise (a lookup a batch at a time, not a gather of the whole column): a window's filter on the ranges'
    # starts then reaches the scan below it, which reads that window's rows only.
    by_name = text_code(pl.col("name"), distinct.to_series()).map_batches(
        lambda codes: pattern.gather(codes), return_dtype=pattern.dtype, is_elementwise=True)
    named, key = (joint_code((code, patterns.len()), (text_code(pl.col("domain"), domains), domains.len()))
                  .cast(pl.Int64).alias(KEY) for code in (by_name, by_name if family is None else pl.lit(family)))
    return key, names.select(named, pattern_of(pl.col("name")).alias("pattern"), "domain").unique(KEY)


def _nested(ranges: pl.LazyFrame, calls: pl.LazyFrame, work: pl.LazyFrame, cuts: list[int],
            parents: pl.Series | None = None) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Per family (KEY), window by window of start time (CUTS): its RANGES' count, sums, minimum and maximum of their
    durations (:func:`exact.counts`, ``_min``, ``_max``), the summed time of its ranges' direct children
    (``_children``), and its ranges' GPU work (gpu_ops, gpu_span_ns summed over the ranges that launched any, ``_spans``
    of them; CALLS launched WORK). RANGES' ``depth`` where they have it, else counted; PARENTS: theirs (one window)."""
    kept = {**CARRIED, **({"depth": pl.Int64} if "depth" in ranges.collect_schema().names() else {})}
    carried = pl.DataFrame(schema=kept)
    duration = pl.col("end_ns") - pl.col("start_ns")
    sums, children, spans = [], [], []
    for upper, started, launched_in in zip([*cuts, None], window_filters(cuts, pl.col("start_ns")),
                                           window_filters(cuts, pl.col("launch_ns")), strict=True):
        window = ranges.filter(started).collect(engine="streaming")
        # Lazy group-bys (these and the children's): faster than eager ones, and reading only the columns each needs.
        # One window (no cuts): its medians in the same pass, as exact.medians would find them in one of its own.
        median = [] if cuts else [duration.median().alias("_median")]
        sums.append(window.lazy().group_by(KEY).agg(*exact.counts(duration), duration.min().alias("_min"),
                                                    duration.max().alias("_max"), *median).collect())
        fresh = window.cast({name: kept[name] for name in window.columns}).with_columns(
            pl.lit(0, pl.Int64).alias("gpu_ops"), pl.lit(False).alias("_carried"))  # GPU spans null: the concat's fill
        present = pl.concat([carried.with_columns(pl.lit(True).alias("_carried")), fresh], how="diagonal")
        nested = with_parents(with_depth(by_start(present)), parents)
        # Each child's time to its parent's family (no parent: no family, a null KEY).
        children.append(nested.lazy().select(pl.col(KEY).gather(pl.col("parent")), duration.alias("_children"),
                                             "_carried")
                        .filter(~pl.col("_carried") & pl.col(KEY).is_not_null())
                        .group_by(KEY).agg(pl.col("_children").sum()).collect())
        nested = _with_launches(nested, _launches(calls, work, started, launched_in))
        # A range that ended by the next window's start launches nothing more: its span is final. The others carry on.
        still_open = pl.col("end_ns") > upper if upper is not None else pl.lit(False)
        # Only the ranges that launched any: the others add nothing to a sum (a CPU-only window has none).
        spans.append(_gpu_sums(nested.filter(~still_open & (pl.col("gpu_ops") > 0))))
        carried = nested.filter(still_open).select(list(kept))
    groups = pl.concat(sums).group_by(KEY).agg(pl.col("_n", "_sum").sum(), pl.col("_min").min(),
                                               pl.col("_max").max(), *([] if cuts else [pl.col("_median").first()]))
    child_time = pl.concat(children).group_by(KEY).agg(pl.col("_children").sum())
    return groups, child_time, pl.concat(spans).group_by(KEY).agg(pl.col("gpu_ops", "gpu_span_ns", "_spans").sum())


def _gpu_sums(ranges: pl.DataFrame) -> pl.DataFrame:
    """Per family (KEY) of ended RANGES: their GPU work, summed GPU spans and how many launched any (``_spans``)."""
    span = (pl.col("gpu_end_ns") - pl.col("gpu_start_ns")).alias("gpu_span_ns")
    return ranges.group_by(KEY).agg(pl.col("gpu_ops").sum(), span.sum(), span.count().cast(pl.Int64).alias("_spans"))


def _launches(calls: pl.LazyFrame, work: pl.LazyFrame, started: pl.Expr, launched_in: pl.Expr) -> pl.DataFrame:
    """The GPU work of one window (launch_ns, thread, start_ns, end_ns) launched by a call that STARTED in it, each
    piece's call the first of its correlation id (LAUNCHED_IN the window), as a capture read whole has it."""
    ids = calls.filter(started).select("correlation_id").collect(engine="streaming")["correlation_id"].drop_nulls()
    if not ids.len():
        return pl.DataFrame(schema=dict.fromkeys(("launch_ns", "thread", "start_ns", "end_ns"), pl.Int64))
    among = pl.col("correlation_id").is_between(ids.min(), ids.max()) & pl.col("correlation_id").is_in(ids.implode())
    return launched_by_id(work.filter(among), calls).filter(launched_in).select("launch_ns", "thread", "start_ns",
                                                                               "end_ns")


def _with_launches(nested: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """NESTED ranges with the GPU work LAUNCHES adds to each (range_gpu_spans) merged in (gpu_ops, gpu_start/end_ns)."""
    if not launches.height:  # a CPU-only window: nothing to add
        return nested
    found = range_gpu_spans(nested.drop("gpu_ops", "gpu_start_ns", "gpu_end_ns"), launches)
    return nested.with_columns(
        (pl.col("gpu_ops") + found["gpu_ops"]).alias("gpu_ops"),
        pl.min_horizontal("gpu_start_ns", found["gpu_start_ns"]).alias("gpu_start_ns"),
        pl.max_horizontal("gpu_end_ns", found["gpu_end_ns"]).alias("gpu_end_ns"))
