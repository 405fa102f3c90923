"""What the steps' thread was in while the GPU idled, for the budget on the GPU's clock (analysis/gpu_budget.py):
user ranges, CUDA and OS-runtime calls, the framework's dispatch before a call, else untraced time, each an interval
set whose coverage of any span is two as-of lookups."""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from nsight_core.analysis.gpu_budget import QUERY_CALLS
from nsight_core.analysis.ranges import by_start

DISPATCH_GAP_NS = 500_000
"""Host time between two CUDA calls shorter than this (0.5 ms) is dispatch: the framework's own Python and C++
between launches; a longer stretch is the user's host work, untraced unless a range marks it."""
TOP_RANGES = 8
"""Host ranges named in the budget; the others are summed as OTHER_RANGES."""
OTHER_RANGES = "(other ranges)"


@dataclass(frozen=True, kw_only=True)
class Host:
    """What the steps' thread was in: its user RANGES (start_ns, end_ns, _code: by start, disjoint), each coded by its
    name in NAMES, and its time outside them named by its CALLS (read by batch: :meth:`at`)."""

    names: list[str]
    ranges: pl.DataFrame
    calls: HostCalls
    tiling: pl.DataFrame | None = None
    """The batch's calls and the time before them (:meth:`HostCalls.tiling`), where :meth:`at` made it."""

    @classmethod
    def of(cls, user: pl.DataFrame, calls: HostCalls) -> Host:
        """The USER ranges (:func:`outermost_user_ranges`) by TOP_RANGES names, and the thread's CALLS."""
        top = (user.group_by("name").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("t"))
               .sort(["t", "name"], descending=[True, False]).head(TOP_RANGES)["name"])
        named = user.with_columns(pl.when(pl.col("name").is_in(top.implode())).then(pl.col("name"))
                                  .otherwise(pl.lit(OTHER_RANGES)).alias("name"))
        names = [name for (name,), _ in named.group_by("name")]
        code = pl.col("name").replace_strict(names, range(len(names)), return_dtype=pl.UInt32).alias("_code")
        return cls(names=names, ranges=named.select("start_ns", "end_ns", code).sort("start_ns"), calls=calls)

    def at(self, lo: int, hi: int) -> Host:
        """This host with the calls of the time from LO to HI read (what :meth:`split` of spans in it names)."""
        mask = self.ranges.filter((pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)).select("start_ns", "end_ns")
        return replace(self, tiling=self.calls.tiling(lo, hi, mask))

    def activities(self) -> list[tuple[str, str, str]]:
        """What the host can have done in a span, in :meth:`split`'s order: cpu_kind, cpu_name and the part where no
        sync caused it (user ranges, OS calls and untraced time idle the GPU; CUDA calls and dispatch: launch gaps)."""
        ranges = [("nvtx", name, "gpu_idle") for name in self.names]
        return [*ranges, *self.calls.labels(), ("untraced", "", "gpu_idle")]

    def split(self, q0: pl.Series, q1: pl.Series) -> list[pl.Series]:
        """How much of each span from Q0 to Q1 the host spent in each of :meth:`activities`."""
        zero = pl.zeros(q0.len(), pl.Int64, eager=True)
        covered = _coded_cover(self.ranges, len(self.names), q0, q1)
        named = _coded_cover(self.tiling, len(self.calls.labels()), q0, q1)
        return [*covered, *named, (q1 - q0 - sum(covered, zero) - sum(named, zero)).clip(lower_bound=0)]


TOP_CALLS = 8
"""The steps' thread's CUDA (and OS-runtime) calls the budget names, by time over the capture; others: OTHER_CALLS."""
OTHER_CALLS = "(other calls)"


@dataclass(frozen=True, kw_only=True)
class HostCalls:
    """The steps' THREAD's calls as the budget names them, each a code: the TOP_CALLS CUDA calls (NAMES, the rest
    OTHER_CALLS) and OS-runtime calls (OSRT), chosen once so every batch of time names its time alike."""

    names: list[str]
    osrt: list[str]
    cuda_api: pl.LazyFrame
    osrt_calls: pl.LazyFrame
    thread: int

    @classmethod
    def of(cls, names: list[str], osrt: list[str], *, cuda_api: pl.LazyFrame, osrt_calls: pl.LazyFrame,
           thread: int) -> HostCalls:
        """THREAD's calls named by the TOP_CALLS CUDA call NAMES and OS-runtime call names OSRT (by their time)."""
        return cls(names=[*names, OTHER_CALLS], osrt=[*osrt, OTHER_CALLS] if osrt else [], cuda_api=cuda_api,
                   osrt_calls=osrt_calls, thread=thread)

    def labels(self) -> list[tuple[str, str, str]]:
        """cpu_kind, cpu_name and part of each code: in a CUDA call, before one (the framework's), in an OS call."""
        return [*(("cuda_api", name, "launch_gap") for name in self.names),
                *(("dispatch", name, "launch_gap") for name in self.names),
                *(("osrt", name, "gpu_idle") for name in self.osrt)]

    def _code(self, names: pl.Expr, known: list[str], offset: int) -> pl.Expr:
        other = len(known) - 1
        return (names.replace_strict(known[:-1], range(offset, offset + other), default=offset + other)
                .cast(pl.UInt32).alias("_code"))

    def tiling(self, lo: int, hi: int, mask: pl.DataFrame) -> pl.DataFrame:
        """The thread's time from LO to HI cut into pieces, one code of :meth:`labels` each (start_ns, end_ns, _code, by
        start): a CUDA call, else an OS-runtime call, else the time before a CUDA call within DISPATCH_GAP_NS of the one
        before; none inside MASK (the user ranges). Queries (QUERY_CALLS) count as time before the call they lead to."""
        meets = ((pl.col("thread") == self.thread) & (pl.col("end_ns") > lo - DISPATCH_GAP_NS)
                 & (pl.col("start_ns") < hi + DISPATCH_GAP_NS))
        cuda, osrt = pl.collect_all([calls.filter(meets).select("start_ns", "end_ns", "name")
                                     for calls in (self.cuda_api, self.osrt_calls)], engine="streaming")
        name, span = pl.col("name"), ("start_ns", "end_ns")
        chain = (pl.col("start_ns") - pl.col("end_ns").shift(1) >= DISPATCH_GAP_NS).fill_null(True).cum_sum()
        query = name.str.contains(QUERY_CALLS)
        # The call each leads to: the next one that is no query, in its chain of calls (else itself).
        lead = pl.when(~query).then(name).backward_fill().over(chain).fill_null(name)
        cuda = _unnested(cuda).with_columns(query.alias("_query"), lead.alias("_lead"))
        leading = self._code(pl.col("_lead"), self.names, len(self.names))
        before = pl.concat([
            cuda.select(pl.col("end_ns").shift(1).alias("start_ns"), pl.col("start_ns").alias("end_ns"), leading)
            .filter(pl.col("end_ns") - pl.col("start_ns") > 0, pl.col("end_ns") - pl.col("start_ns") < DISPATCH_GAP_NS),
            cuda.filter(pl.col("_query")).select(*span, leading)]).sort("start_ns")
        masked = _unnested(mask).select(*span, pl.lit(MASKED, pl.UInt32).alias("_code"))
        calls = cuda.filter(~pl.col("_query")).select(*span, self._code(name, self.names, 0))
        in_osrt = [_unnested(osrt).select(*span, self._code(name, self.osrt, 2 * len(self.names)))] if self.osrt else []
        return _painted([masked, calls, *in_osrt, before], lo, hi).filter(pl.col("_code") != MASKED)


MASKED = 2**32 - 1
"""The code of time a higher layer (a user range) names: left out of the calls' tiling."""


def _unnested(intervals: pl.DataFrame) -> pl.DataFrame:
    """INTERVALS by start, each starting no earlier than every one before it ended (a call inside another, as the
    driver's inside the runtime's, keeps only what lies after it), none empty: one layer of :func:`_painted`."""
    reach = pl.col("end_ns").cum_max().shift(1)
    return by_start(intervals).with_columns(pl.max_horizontal("start_ns", reach).alias("start_ns")).filter(
        pl.col("end_ns") > pl.col("start_ns"))


def _painted(layers: list[pl.DataFrame], lo: int, hi: int) -> pl.DataFrame:
    """LAYERS (start_ns, end_ns, _code; disjoint within a layer) painted over each other from LO to HI, the first on
    top: the pieces between consecutive edges, each with the code of the first layer covering it (uncovered: none)."""
    edges = pl.concat([frame.select(pl.col(column).clip(lo, hi).alias("t")) for frame in layers
                       for column in ("start_ns", "end_ns")]).unique().sort("t")
    pieces = edges.select(pl.col("t").alias("start_ns"), pl.col("t").shift(-1).alias("end_ns")).drop_nulls()
    codes = []
    for index, layer in enumerate(layers):
        found = pieces.join_asof(layer.select(pl.col("start_ns").alias("_s"), pl.col("end_ns").alias(f"_e{index}"),
                                              pl.col("_code").alias(f"_k{index}")),
                                 left_on="start_ns", right_on="_s", strategy="backward")
        codes.append(pl.when(pl.col("start_ns") < found[f"_e{index}"]).then(found[f"_k{index}"]))
    return pieces.with_columns(pl.coalesce(codes).alias("_code")).drop_nulls("_code")


def _coded_cover(tiling: pl.DataFrame | None, count: int, q0: pl.Series, q1: pl.Series) -> list[pl.Series]:
    """How much of each span from Q0 to Q1 (each in order: no sort) TILING's pieces (disjoint, by start) of each of
    COUNT codes cover: a column per code holds the length of its pieces before each, read by two as-of lookups."""
    if tiling is None or not tiling.height:
        return [pl.zeros(q0.len(), pl.Int64, eager=True) for _ in range(count)]
    length = pl.col("end_ns") - pl.col("start_ns")
    mine = [pl.when(pl.col("_code") == code).then(length).otherwise(0) for code in range(count)]
    cumulative = tiling.select("start_ns", "end_ns", "_code",
                               *((value.cum_sum() - value).alias(f"_b{code}") for code, value in enumerate(mine)))
    inside = pl.min_horizontal("t", "end_ns") - pl.col("start_ns")

    def before(points: pl.Series) -> pl.DataFrame:
        found = pl.DataFrame({"t": points}).join_asof(cumulative, left_on="t", right_on="start_ns", strategy="backward")
        return found.select((pl.col(f"_b{code}") + pl.when(pl.col("_code") == code).then(inside).otherwise(0))
                            .fill_null(0).alias(f"_b{code}") for code in range(count))

    ends, starts = before(q1), before(q0)
    return [ends[f"_b{code}"] - starts[f"_b{code}"] for code in range(count)]


def outermost_user_ranges(windows: pl.DataFrame, reach: int, ranges: pl.DataFrame) -> tuple[int, pl.DataFrame]:
    """The latest end of the user ranges so far (REACH before RANGES: a fold step over windows of start time), and the
    user ranges among RANGES (the steps' thread's other NVTX ranges): those holding no step of WINDOWS, outermost."""
    starts = windows["cpu_start_ns"]
    holds_step = (pl.lit(starts).search_sorted(pl.col("end_ns"), side="left")
                  > pl.lit(starts).search_sorted(pl.col("start_ns"), side="left"))
    user = ranges.sort("start_ns").filter(~holds_step)
    before = pl.max_horizontal(pl.col("end_ns").cum_max().shift(1).fill_null(-1), pl.lit(reach))
    latest = user.select(pl.col("end_ns").max()).item()
    return max(reach, latest if latest is not None else -1), user.filter(pl.col("start_ns") >= before)
