"""Where each step's wall time went on the CPU's clock: a partition of the step, so the parts add up to it.

The step is cut at every boundary of GPU work and of what its CPU thread was doing (CUDA API and OS-runtime calls, NVTX
ranges). Each piece is in one part, first match wins: ``compute`` (a kernel other than NCCL ran), ``exposed_comm`` (only
NCCL kernels), ``exposed_copy`` (only copies or memsets); else the GPU idled: ``sync_wait`` while the thread sat in a
synchronising call, and the refill after it where the GPU gets work again within LAUNCH_GAP_NS; other idle stretches
shorter than LAUNCH_GAP_NS are ``launch_gap`` (what CUDA graphs remove), longer ones ``gpu_idle``. Idle time keeps what
the thread was in: the CUDA API or OS-runtime call, else the innermost NVTX range (by family), else nothing traced."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import polars as pl

from nsight_core.analysis.budget import PARTS, is_thread
from nsight_core.analysis.codes import distinct_codes, joint_code, joint_parts
from nsight_core.analysis.ranges import Nesting, by_start, in_parent_order, nest, self_pieces, self_time, with_parents

LAUNCH_GAP_NS = 100_000
"""GPU idle stretches shorter than this (100 µs) are launch overhead between queued work."""
BATCH_EDGES = 200_000
"""Interval edges (cut points) per batch of steps, about: bounds the sweep's memory (an event per edge)."""
BATCH_WORKERS = 2
"""Batches of the budget computed at once (threads)."""
_LAYERS = ("compute", "comm", "copy", "in_step")
_LOOKUP = 2 * len(_LAYERS)
"""Event kinds of the budget's sweep: a layer's starts 2 * i and ends 2 * i + 1, then the lookups' starts."""
_EDGE = _LOOKUP + 4
"""The event kind of a lookup's end: a cut point, nothing else."""


def _decode(codes: pl.Expr, values: pl.Series) -> pl.Expr:
    return codes.replace_strict(pl.int_range(values.len(), eager=True), values, default=None, return_dtype=pl.String)


def budget_totals(steps: pl.DataFrame, kernels: pl.DataFrame, copies: pl.DataFrame, cuda_api: pl.DataFrame,
                  osrt: pl.DataFrame, nesting: Nesting, sync: pl.DataFrame, thread: int | None) -> pl.DataFrame:
    """The STEPS (not overlapping) cut into pieces of one part each, summed per step, part and CPU activity (step, part,
    cpu_kind, cpu_name, total_ns); only THREAD's calls and ranges are attributed. COPIES: memcpy and memset intervals;
    SYNC: :func:`every_budget.sync_calls`. Batches of steps (:func:`_batches`) on BATCH_WORKERS threads."""
    lo, hi = steps.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
    overlapping = (pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)

    def kept(frame: pl.DataFrame, keep: pl.Expr) -> pl.DataFrame:
        mask = frame.select(keep).to_series()
        return frame if mask.all() else frame.filter(mask)  # a filter copies even what it keeps

    def on_thread(frame: pl.DataFrame) -> pl.DataFrame:
        return kept(frame.select("start_ns", "end_ns", "name", "thread"), is_thread(thread) & overlapping)

    nccl = kernels.select("start_ns", "end_ns", pl.col("name").str.contains("(?i)nccl").alias("_nccl"))
    layers = {"compute": _Intervals.layer(kept(nccl.filter(~pl.col("_nccl")), overlapping).drop("_nccl")),
              "comm": _Intervals.layer(kept(nccl.filter(pl.col("_nccl")), overlapping).drop("_nccl")),
              "copy": _Intervals.layer(kept(copies.select("start_ns", "end_ns"), overlapping)),
              "in_step": _Intervals.layer(steps.select("start_ns", "end_ns"))}
    del nccl
    (api, api_names), (calls, osrt_names) = (_coded(on_thread(frame)) for frame in (cuda_api, osrt))
    blocking = on_thread(sync)  # whether a piece lies in one, not which: no names
    ordered_steps = steps.select("start_ns", "end_ns").sort("start_ns")
    gpu_idle = not any(layers[name].frame.height for name in ("compute", "comm", "copy"))
    # The thread does nothing but NVTX ranges while the GPU idles: its ranges inside one step need no pieces.
    alone = gpu_idle and not (api.height or calls.height or blocking.height)
    pieces, families, whole = _nvtx_pieces(nesting, thread, lo, hi, ordered_steps if alone else None)
    lookups = {"_in_sync": _Intervals.lookup(blocking), "_api": _Intervals.lookup(api),
               "_osrt": _Intervals.lookup(calls), "_nvtx": _Intervals.lookup(pieces)}
    names = pl.concat([api_names, osrt_names, families, pl.Series([""])])
    offsets = {"_in_sync": 0, "_api": 0, "_osrt": api_names.len(), "_nvtx": api_names.len() + osrt_names.len()}
    step_starts = ordered_steps["start_ns"]
    untraced = pl.lit(names.len() - 1, pl.UInt32)
    sources = [*layers.values(), *lookups.values()]
    start, end = pl.col("start_ns"), pl.col("end_ns")

    def idle_runs(totals: pl.DataFrame) -> pl.DataFrame:
        """TOTALS (_step, _name, total_ns) of steps idle throughout, no call waiting: one run each, by its length."""
        run_ns = pl.col("total_ns").sum().over("_step")
        return totals.select("_step", pl.when(run_ns < LAUNCH_GAP_NS).then(PARTS.index("launch_gap"))
                             .otherwise(PARTS.index("gpu_idle")).cast(pl.UInt8).alias("_part"), "_name", "total_ns")

    def overlaps(first_ns: int, last_ns: int, intervals: pl.DataFrame, offset: int,
                 whole: pl.DataFrame | None = None) -> pl.DataFrame:
        """The time of the steps in [FIRST_NS, LAST_NS] per step and name when the thread's only activity there is
        INTERVALS (start_ns, end_ns, _code less OFFSET), none overlapping: each one's overlap with each step it meets,
        the rest untraced (what the cut sums to, without it). WHOLE (_at, _code, total_ns): time summed already."""
        begin = step_starts.search_sorted(first_ns, side="left")  # the next batch's first step may start at LAST_NS
        batch = ordered_steps.slice(begin, step_starts.search_sorted(last_ns, side="left") - begin).with_columns(
            (pl.lit(step_starts).search_sorted(start, side="right").cast(pl.Int32) - 1).alias("_step"))
        at, last, starts = pl.col("_at"), pl.col("_last"), pl.lit(batch["start_ns"])
        met = intervals.select(start, end, (pl.col("_code") + offset).fill_null(untraced).alias("_name"),
                               (starts.search_sorted(start, side="right").cast(pl.Int64) - 1).clip(0).alias("_at"),
                               (starts.search_sorted(end, side="left").cast(pl.Int64) - 1).alias("_last"))
        # Most intervals lie in one step; those across steps meet each (a list per interval would cost them all).
        across = met.filter(last > at).with_columns(pl.int_ranges(at, last + 1).alias("_at")).explode("_at")
        met = pl.concat([met.filter(last == at), across]).select(
            pl.lit(batch["_step"]).gather(at).alias("_step"), "_name",
            (pl.min_horizontal(end, pl.lit(batch["end_ns"]).gather(at))
             - pl.max_horizontal(start, pl.lit(batch["start_ns"]).gather(at))).alias("total_ns"))
        if whole is not None:
            met = pl.concat([met, whole.filter(pl.col("total_ns") > 0).select(
                pl.lit(batch["_step"]).gather(at).alias("_step"),
                (pl.col("_code") + offset).fill_null(untraced).alias("_name"), "total_ns")])
        met = met.filter(pl.col("total_ns") > 0)
        walls = batch.group_by("_step").agg((end - start).sum().alias("total_ns"))
        rest = walls.join(met.group_by("_step").agg(pl.col("total_ns").sum().alias("_met")), on="_step", how="left")
        rest = rest.select("_step", untraced.alias("_name"), pl.col("total_ns") - pl.col("_met").fill_null(0))
        return pl.concat([met, rest.filter(pl.col("total_ns") > 0)]).group_by("_step", "_name").agg(
            pl.col("total_ns").sum())

    def summed(first_ns: int, last_ns: int) -> pl.DataFrame:
        """The steps in [FIRST_NS, LAST_NS] (all their cuts in it) as pieces summed: _step, _part, _name, total_ns."""
        candidates = {column: source.candidates(first_ns, last_ns) for column, source in lookups.items()}
        named = [column for column in ("_api", "_osrt", "_nvtx") if candidates[column].height]
        if gpu_idle and not candidates["_in_sync"].height and len(named) < 2:
            # Time that is one kind of interval's or untraced needs no cut where the intervals do not overlap.
            intervals = candidates[named[0]] if named else candidates["_nvtx"]
            if intervals.select((start.shift(-1) >= end).all()).item():
                return idle_runs(overlaps(first_ns, last_ns, intervals, offsets[named[0]] if named else 0))
        events = [(edges, 2 * index + side, False) for index, layer in enumerate(layers.values())
                  if layer.frame.height for side, edges in enumerate(layer.edges(first_ns, last_ns))]
        for index, (column, source) in enumerate(lookups.items()):
            if candidates[column].height:  # an empty source has no events
                events += [(candidates[column]["start_ns"].clip(first_ns), _LOOKUP + index, True),
                           (source.edges(first_ns, last_ns)[1], _EDGE, False)]
        merged = _events(events).sort("start_ns", maintain_order=True)
        del events  # the sources' slices: the sorted events hold their times now
        # The state after each time's events: a layer's coverage (starts less ends so far), a lookup's last row begun.
        kind = pl.col("_kind")

        def seen(of: int) -> pl.Expr:
            """How many events of kind OF lie at or before each row: a count of non-nulls, cheaper than a sum."""
            return pl.when(kind == of).then(True).cum_count().cast(pl.Int64)

        covered = {name: (layer.open_at(first_ns) + seen(2 * index) - seen(2 * index + 1) > 0).alias(name)
                   for index, (name, layer) in enumerate(layers.items()) if layer.frame.height}
        rows = [pl.when(kind == _LOOKUP + index).then(pl.col("_row")).forward_fill().alias(column)
                for index, (column, frame) in enumerate(candidates.items()) if frame.height]
        # The step a time lies in, the last to start at or before it: those before the batch and the batch's so far.
        step = step_starts.search_sorted(first_ns, side="left") + seen(2 * _LAYERS.index("in_step")) - 1
        segments = merged.select(start, *covered.values(), *rows, step.cast(pl.Int32).alias("_step")).filter(
            start != start.shift(-1).fill_null(-1))
        del merged
        segments = segments.with_columns(start.shift(-1).alias("end_ns")).filter(pl.col("in_step") & (end > start))

        def layer(name: str) -> pl.Expr:
            return pl.col(name) if name in covered else pl.lit(False)

        def within(column: str) -> pl.Expr:
            """Whether the interval of COLUMN's row has not ended at the piece's start (null: no interval)."""
            return pl.lit(candidates[column]["end_ns"]).gather(pl.col(column)) > start

        def found(column: str) -> pl.Expr:
            frame = candidates[column]
            if not frame.height:
                return pl.lit(None, pl.UInt32)
            return pl.when(within(column)).then(pl.lit(frame["_code"]).gather(pl.col(column))) + offsets[column]

        segments = segments.select(
            "_step", start, end,
            pl.when(layer("compute")).then(PARTS.index("compute"))
            .when(layer("comm")).then(PARTS.index("exposed_comm"))
            .when(layer("copy")).then(PARTS.index("exposed_copy")).cast(pl.UInt8).alias("_gpu"),
            # What the CPU thread was in at each piece's start: a sync call; its call or innermost range (name codes).
            (within("_in_sync").fill_null(False) if candidates["_in_sync"].height else pl.lit(False)).alias("_in_sync"),
            *(found(column).alias(column) for column in ("_api", "_osrt", "_nvtx")))
        name = pl.coalesce("_api", "_osrt", "_nvtx", untraced)
        total = (end - start).sum().alias("total_ns")
        if gpu_idle and not candidates["_in_sync"].height:
            return idle_runs(segments.group_by("_step", name.alias("_name")).agg(total))
        # Runs: consecutive idle, or busy, pieces of one step, numbered in order. The idle pieces' part is their run's:
        # its length, and after a sync call the refill (the pieces after a sync that ends within LAUNCH_GAP_NS of the
        # run's end, the first such sync's end a threshold per run). Per-run values are gathered, not filled per piece.
        idle, in_sync, run, first = pl.col("_gpu").is_null(), pl.col("_in_sync"), pl.col("_run"), pl.col("_first")
        segments = segments.with_columns(
            ((idle != idle.shift(1)) | (pl.col("_step") != pl.col("_step").shift(1))).fill_null(True).alias("_first"))
        segments = segments.with_columns((pl.when(first).then(True).cum_count() - 1).alias("_run"))
        runs = segments.select(start.filter(first).alias("_start"), end.filter(first.shift(-1).fill_null(True)))
        run_ns = runs["end_ns"] - runs["_start"]
        syncs = segments.filter(in_sync).select(run, end)
        refills = syncs.filter(end > pl.lit(runs["end_ns"]).gather(run) - LAUNCH_GAP_NS).group_by(run).agg(end.min())
        threshold = pl.repeat(None, runs.height, dtype=pl.Int64, eager=True).scatter(refills["_run"], refills["end_ns"])
        refill = (start >= pl.lit(threshold).gather(run)).fill_null(False)
        part = (pl.when(~idle).then(pl.col("_gpu"))
                .when(in_sync | refill).then(PARTS.index("sync_wait"))
                .when(pl.lit(run_ns).gather(run) < LAUNCH_GAP_NS).then(PARTS.index("launch_gap"))
                .otherwise(PARTS.index("gpu_idle")).cast(pl.UInt8))
        pieces = segments.select("_step", part.alias("_part"), pl.when(idle).then(name).alias("_name"), start, end)
        return pieces.group_by("_step", "_part", "_name").agg(total)

    def decoded(frame: pl.DataFrame) -> pl.DataFrame:
        """FRAME's codes as step, part, cpu_kind and cpu_name (both null where the GPU ran): _step indexes the steps by
        start, _part PARTS, _name NAMES (CUDA calls, then OS-runtime calls, NVTX families and '' for untraced)."""
        code, order = pl.col("_name").cast(pl.Int64), steps.select("step", "start_ns").sort("start_ns")["step"]
        kind = (pl.when(code < offsets["_osrt"]).then(pl.lit("cuda_api"))
                .when(code < offsets["_nvtx"]).then(pl.lit("osrt")).when(code < names.len() - 1).then(pl.lit("nvtx"))
                .when(code.is_not_null()).then(pl.lit("untraced")))
        return frame.select(pl.lit(order).gather(pl.col("_step")).alias("step"), pl.exclude("_step", "_part", "_name"),
                            _decode(pl.col("_part"), pl.Series(PARTS)).alias("part"), kind.alias("cpu_kind"),
                            _decode(pl.col("_name"), names).alias("cpu_name"))

    if whole is not None:  # the ranges nest: no two pieces overlap, so all steps at once, with no sweep
        return decoded(idle_runs(overlaps(lo, hi, lookups["_nvtx"].frame, offsets["_nvtx"], whole)))
    # A step lies in one batch: the batches' sums need no summing across them.
    with ThreadPoolExecutor(max_workers=BATCH_WORKERS, thread_name_prefix="nsight-budget") as pool:
        return decoded(pl.concat(pool.map(lambda span: summed(*span), _batches(steps, sources))))


def _batches(steps: pl.DataFrame, sources: list[_Intervals]) -> list[tuple[int, int]]:
    """STEPS grouped into consecutive batches of about BATCH_EDGES edges of SOURCES: (first start, last end) each."""
    ordered = steps.select("start_ns", "end_ns").sort("start_ns")
    edges_before = sum((source.edges_before(pl.col("start_ns")) for source in sources), pl.lit(0, pl.Int64))
    return [(int(first), int(last)) for first, last in ordered.group_by(
        (edges_before // BATCH_EDGES).alias("_batch"), maintain_order=True).agg(
        pl.col("start_ns").min(), pl.col("end_ns").max()).select("start_ns", "end_ns").iter_rows()]


@dataclass(frozen=True)
class _Intervals:
    """Intervals by start (start_ns, end_ns and, for lookups, _code) and their ends that cut, sorted: a layer's all, a
    lookup's those where its next interval does not start (that start cuts)."""

    frame: pl.DataFrame
    ends: pl.Series

    @classmethod
    def layer(cls, frame: pl.DataFrame) -> _Intervals:
        ordered = by_start(frame)
        return cls(ordered, _sorted(ordered["end_ns"]))

    @classmethod
    def lookup(cls, frame: pl.DataFrame) -> _Intervals:
        ordered = by_start(frame)
        # One thread's calls and self pieces mostly follow each other without a gap: most ends are a next start.
        ends = ordered.select(pl.col("end_ns").filter(pl.col("end_ns").ne_missing(pl.col("start_ns").shift(-1))))
        return cls(ordered, _sorted(ends.to_series()))

    def edges_before(self, at: pl.Expr) -> pl.Expr:
        """How many starts and ends that cut lie before each time AT (binary searches per time: for a few times)."""
        return sum((pl.lit(edges).search_sorted(at, side="left").cast(pl.Int64)
                    for edges in (self.frame["start_ns"], self.ends)), pl.lit(0, pl.Int64))

    def open_at(self, at: int) -> int:
        """How many intervals started before AT and did not end before it."""
        return self.frame["start_ns"].search_sorted(at, side="left") - self.ends.search_sorted(at, side="left")

    def edges(self, first_ns: int, last_ns: int) -> tuple[pl.Series, pl.Series]:
        """The starts and the ends that cut in [FIRST_NS, LAST_NS]."""
        return _within(self.frame["start_ns"], first_ns, last_ns), _within(self.ends, first_ns, last_ns)

    def candidates(self, first_ns: int, last_ns: int) -> pl.DataFrame:
        """The intervals that can contain a time in [FIRST_NS, LAST_NS] (start_ns, end_ns, _code) by start: those
        starting in it and the last to start before it (the intervals of one thread do not overlap)."""
        starts = self.frame["start_ns"]
        begin = max(starts.search_sorted(first_ns, side="right") - 1, 0)
        return self.frame.slice(begin, starts.search_sorted(last_ns, side="right") - begin)


def _sorted(values: pl.Series) -> pl.Series:
    return values if values.is_sorted() else values.sort()


def _events(sources: list[tuple[pl.Series, int, bool]]) -> pl.DataFrame:
    """Each source's TIMES as events of its KIND: start_ns, _kind and _row (where ROWS, the position in TIMES, else
    null); three columns concatenated, not a frame per source, whose set-up costs more."""
    def constant(value: int | None, length: int) -> pl.Series:
        return pl.Series([value], dtype=pl.UInt32 if value is None else pl.UInt8).new_from_index(0, length)

    return pl.DataFrame([
        pl.concat([times for times, _, _ in sources]).alias("start_ns"),
        pl.concat([constant(kind, times.len()) for times, kind, _ in sources]).alias("_kind"),
        pl.concat([pl.int_range(times.len(), dtype=pl.UInt32, eager=True) if rows else constant(None, times.len())
                   for times, _, rows in sources]).alias("_row")])


def _within(ordered: pl.Series, first: int, last: int) -> pl.Series:
    """The values of ORDERED (sorted) in [FIRST, LAST], a slice."""
    begin = ordered.search_sorted(first, side="left")
    return ordered.slice(begin, ordered.search_sorted(last, side="right") - begin)


def _coded(calls: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    """CALLS by start as start_ns, end_ns, _code (into the distinct names, returned too; none for a null name)."""
    ordered = by_start(calls)
    codes, names = distinct_codes(ordered, "name")
    return ordered.select("start_ns", "end_ns", pl.when(pl.col("name").is_not_null()).then(codes).alias("_code")), names


def _nvtx_pieces(nesting: Nesting, thread: int | None, lo: int, hi: int,
                 steps: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.Series, pl.DataFrame | None]:
    """THREAD's NVTX self pieces in [LO, HI) (start_ns, end_ns, _code) by start, the range families the codes index,
    and None; with STEPS (by start, not overlapping), where the ranges nest, a range inside one step is no pieces but
    its self time, summed per step and family in the third frame: _at (the step's position), _code, total_ns."""
    ranges, family = nesting.ranges, nesting.family
    inside = ranges.select(is_thread(thread) & (pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)).to_series()
    if not inside.all():
        # Parents among the kept ranges only: where ranges cross, one whose parent ends before LO takes another.
        ranges = with_parents(ranges.filter(inside).select("start_ns", "end_ns", "thread", "depth", "name"))
        family = family.filter(inside)
    if not ranges.height:
        return pl.DataFrame(schema={"start_ns": pl.Int64, "end_ns": pl.Int64, "_code": pl.UInt32}), pl.Series(
            [], dtype=pl.String), None
    if nesting.families.null_count():  # a range without a name names nothing: the time is a call's, or untraced
        family = family.scatter(ranges["name"].is_null().arg_true(), None)
    whole, of = None, None
    if steps is not None and nest(ranges):
        located = (ranges if "self_ns" in ranges.columns else self_time(ranges)).select(
            "start_ns", "end_ns", "self_ns", pl.lit(family).alias("_code")).join_asof(
            steps.select(pl.col("start_ns").alias("_start"), pl.col("end_ns").alias("_end"),
                         pl.int_range(pl.len(), dtype=pl.Int64).alias("_at")),
            left_on="start_ns", right_on="_start", strategy="backward", check_sortedness=False)
        timed = located.select("_at", "_code", pl.col("self_ns").alias("total_ns"),
                               (pl.col("end_ns") <= pl.col("_end")).fill_null(False).alias("_whole"))
        del located
        # Summed per step and family by one code of the two (:func:`joint_code`), which only whole ranges have (the
        # others' null group is dropped): no copy of the whole ranges, no key of two columns.
        codes = nesting.families.len() + 1  # and one for no family (a range without a name)
        key = joint_code((pl.col("_at"), steps.height), (pl.col("_code").fill_null(codes - 1), codes))
        summed = timed.group_by(pl.when("_whole").then(key).alias("_key")).agg(pl.col("total_ns").sum()) \
            .drop_nulls("_key")
        at, code = joint_parts(summed["_key"], steps.height, codes)
        whole = summed.select(pl.lit(at).cast(pl.Int64).alias("_at"),
                              pl.when(pl.lit(code) < codes - 1).then(pl.lit(code)).alias("_code"), "total_ns")
        del summed
        of = ~timed["_whole"]
        del timed
        if not of.any():  # every range inside one step: no pieces at all
            ranges, of = ranges.clear(), None
    pieces = self_pieces(ranges, of)
    del ranges
    # Where ranges nest, no two pieces start together: by start time, whatever their order. Else by (thread, start) from
    # the pieces' old order, which decides which of two pieces starting together names the time. A column at a time,
    # each let go once in order, the ids as codes: a sort of the frames would hold them twice.
    order = pl.concat([frame["start_ns"] for frame in pieces]).arg_sort()
    frames: tuple[pl.DataFrame, ...] = pieces
    starts = pl.concat([frame["start_ns"] for frame in frames]).gather(order)
    if starts.len() > 1 and (starts.slice(1) == starts.slice(0, starts.len() - 1)).any():
        frames = (in_parent_order(pieces),)
        order = frames[0].select(pl.arg_sort_by(pl.lit(thread, pl.Int64), "start_ns")).to_series()
        starts = frames[0]["start_ns"].gather(order)
    column = {"end_ns": pl.concat([frame["end_ns"] for frame in frames]),
              "_code": pl.concat([family.gather(frame["id"]) for frame in frames])}
    del pieces, frames
    return pl.DataFrame([starts, *(column.pop(name).gather(order).alias(name) for name in ("end_ns", "_code"))]), \
        nesting.families, whole
