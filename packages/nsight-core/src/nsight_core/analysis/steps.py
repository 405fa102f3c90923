"""Which repeated unit of work is "a step", and how long each one took.

A loop marks its steps with NVTX (`step_0` … `step_19`, `iter 12`, or one name pushed every iteration): numbered names
are one family, whose pattern has each digit run replaced by ``{n}``. Without NVTX the kernel sequence's period cuts
the steps; without either, the result says why. Each way of finding steps is a model of its own (:data:`StepStats`)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, TypeVar

import polars as pl
from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from nsight_core.analysis.codes import distinct_codes, family_codes, joint_code, joint_parts
from nsight_core.analysis.ranges import by_start

STEP_WORDS = r"(?i)(step|iter|iteration|batch|microbatch)"
WARMUP_RATIO = 1.5
"""A first step this many times the median of the others is a warm-up outlier."""
TREND_THRESHOLD = 0.10
"""A fitted change over the run above this share of the median is a trend, not noise."""
MIN_PERIOD_REPEATS = 3
PERIOD_MATCH = 0.9
"""Share of kernels that must equal the kernel one period later for the period to count."""
STEP_COLUMNS = {"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "name": pl.String, "thread": pl.Int64}

Trend = Literal["flat", "rising", "falling", "unknown"]
Clock = Literal["gpu", "cpu"]
Bound = Literal["host", "device", "unknown"]
Mode = Literal["nvtx-gpu", "nvtx-cpu", "kernel-period", "capture-as-one-step"]
"""How a capture's steps were found: NVTX ranges on the GPU's or the CPU's clock, kernel-sequence periods, or none."""


class StepFamily(BaseModel):
    """Repeated NVTX ranges of one name pattern on one thread, with duration statistics."""

    pattern: str = Field(description="The range name with each digit run replaced by {n}")
    domain: str = Field(description="NVTX domain; '' for the default domain")
    thread: int | None = Field(description="nsys thread id the ranges ran on; None for kernel periods")
    depth: int = Field(description="Nesting depth of the ranges on their thread (0 = outermost)")
    count: int
    total_ns: int = Field(description="Summed range durations (nested families overlap their parents)")
    p50_ns: float
    p95_ns: float
    min_ns: int
    max_ns: int
    first_ns: int = Field(description="Duration of the first instance")
    sequential: bool = Field(description="No two instances overlap: a loop's iterations, not concurrent work")


class StepShape(BaseModel):
    """What every mode of finding steps states of them: warm-up and trend (measured without the first step when it
    is warm-up), and every repeated family seen. A mode is a subclass, so code that differs by mode matches on it."""

    mode: Mode = Field(description="How the steps were found (each subclass fixes it)")
    warmup: bool = Field(default=False, description="The first step exceeds WARMUP_RATIO x the median of the rest")
    warmup_excess_ns: float = Field(default=0.0, description="First step minus the median of the rest, if warm-up")
    trend: Trend = "unknown"
    trend_ns_per_step: float = Field(default=0.0, description="Least-squares slope of step duration over step index")
    candidates: list[StepFamily] = Field(default_factory=list, description="Every repeated family, chosen one first")
    clock: ClassVar[Clock] = "cpu"
    """What the steps' durations are read on: their GPU windows, or their ranges (or kernel periods) themselves."""

    @model_serializer(mode="wrap")
    def _candidates_last(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The candidates (often many families) last: a reader of the JSON looks for the mode's own fields first."""
        data: dict[str, Any] = handler(self)
        if "candidates" in data:
            data["candidates"] = data.pop("candidates")
        return data


class FamilySteps(StepShape):
    """Steps that are the instances of one family: NVTX ranges or periods of the kernel sequence."""

    family: StepFamily = Field(description="The chosen family, its durations the steps' on their clock")


class NvtxCpuSteps(FamilySteps):
    """An NVTX family's ranges as steps, timed by the ranges themselves: fewer than :data:`projection.MIN_PROJECTED` of
    them launched GPU work (a CPU-only loop), or the family as :func:`find_steps` chose it from the capture's start."""

    mode: Literal["nvtx-cpu"] = "nvtx-cpu"


class GpuWindowSteps(FamilySteps):
    """An NVTX family's steps timed by their GPU windows (from a step's first GPU work to the next step's), with the
    ranges' own p50 and p95, before their budget says what bounds them (:class:`NvtxGpuSteps`)."""

    mode: Literal["nvtx-gpu"] = "nvtx-gpu"
    cpu_p50_ns: float = Field(description="The ranges' own p50: the CPU's period of a step")
    cpu_p95_ns: float = Field(description="The ranges' own p95")
    clock: ClassVar[Clock] = "gpu"

    def bounded(self, bound: Bound, estimated_p50_ns: float) -> NvtxGpuSteps:
        """These steps with BOUND (their budget's :func:`budget.bound_by`) and ESTIMATED_P50_NS (p50, no profiler)."""
        return NvtxGpuSteps(**dict(self), bound=bound, estimated_p50_ns=estimated_p50_ns)


class NvtxGpuSteps(GpuWindowSteps):
    """:class:`GpuWindowSteps` with what bounds them and their p50 step without the profiler."""

    bound: Bound = Field(description="device: the GPU was busy through its steps (the host ran ahead); host: the GPU "
                         "waited on the host; unknown: the steady steps' windows have no length")
    estimated_p50_ns: float = Field(description="The p50 step without the profiler (the family's p50 less "
                                    "Analysis.overhead): the findings' step")


class KernelPeriodSteps(FamilySteps):
    """Steps without NVTX: periods of the repeating kernel sequence, each starting with its anchor kernel."""

    mode: Literal["kernel-period"] = "kernel-period"
    kernels_per_period: int = Field(description="Kernels in one period")
    anchor_kernel: str = Field(description="The kernel each step starts with (how a large capture finds every step)")


class CaptureAsStep(StepShape):
    """No steps found: the capture's user window is one step, and REASON says why."""

    mode: Literal["capture-as-one-step"] = "capture-as-one-step"
    reason: str = Field(description="Why no steps were found")


StepStats = Annotated[NvtxGpuSteps | NvtxCpuSteps | KernelPeriodSteps | CaptureAsStep, Field(discriminator="mode")]
"""The steps of a capture (Analysis.steps), one model per mode of finding them."""
ChosenSteps = NvtxCpuSteps | KernelPeriodSteps | CaptureAsStep
"""What :func:`find_steps` chooses from a capture's start."""
FoundSteps = GpuWindowSteps | NvtxCpuSteps | KernelPeriodSteps | CaptureAsStep
"""Every step of a capture as analysis/every_step.py finds them, before their budget."""
Shaped = TypeVar("Shaped", bound=StepShape)


def nvtx_families(nvtx: pl.DataFrame, family: tuple[pl.Series, pl.Series]) -> pl.DataFrame:
    """Repeated range families (FAMILY: :func:`family_codes` of the names; :class:`StepFamily`'s columns and
    step_word), best step candidate first: names that say step/iter/batch, then sequential, outermost, longest."""
    # Grouped by one code of (family, domain, thread) (:func:`joint_code`), not by the strings.
    parts = (family, distinct_codes(nvtx, "domain"), distinct_codes(nvtx, "thread"))
    keyed = by_start(nvtx.select(joint_code(*((pl.lit(codes), values.len()) for codes, values in parts)), "start_ns",
                                 "end_ns", "depth", (pl.col("end_ns") - pl.col("start_ns")).alias("_duration")))
    families = keyed.group_by("_key", maintain_order=True).agg(
        pl.len().alias("count"), pl.col("depth").min().alias("depth"), *_duration_stats(pl.col("_duration")),
        (pl.col("start_ns").slice(1) >= pl.col("end_ns").slice(0, pl.len() - 1)).all().alias("sequential"),
    ).filter(pl.col("count") >= 2)
    # Ranges without a name (frames built by hand; the loader names them '') are no family to call steps.
    (patterns, domains, threads) = (values for _, values in parts)
    pattern, domain, thread = joint_parts(families["_key"], *(values.len() for _, values in parts))
    families = families.select(
        patterns.gather(pattern).alias("pattern"), domains.gather(domain).fill_null("").alias("domain"),
        threads.gather(thread).alias("thread"), pl.exclude("_key"),
    ).filter(pl.col("pattern").is_not_null()).with_columns(pl.col("pattern").str.contains(STEP_WORDS).alias("step_word"))
    return families.sort(["step_word", "sequential", "depth", "total_ns", "pattern"],
                         descending=[True, True, False, True, False])


def find_steps(nvtx: pl.DataFrame, kernels: pl.DataFrame,
               codes: tuple[pl.Series, pl.Series] | None = None) -> tuple[ChosenSteps, pl.DataFrame]:
    """The capture's steps: statistics and one row per step (step, start_ns, end_ns, name, thread). CODES:
    :func:`family_codes` of NVTX's names, where the caller has them already."""
    codes = codes if codes is not None else family_codes(nvtx, "name")
    candidates = [StepFamily(**row) for row in nvtx_families(nvtx, codes).drop("step_word").to_dicts()]
    if (family := next((candidate for candidate in candidates if candidate.sequential), None)) is not None:
        steps = _family_instances(nvtx, codes, family)
        return _with_shape(NvtxCpuSteps(family=family, candidates=candidates), steps), steps
    steps, period, anchor, reason = kernel_period_steps(kernels)
    if steps.height < 2 or period is None or anchor is None:
        why = reason if not candidates else f"{reason}; the repeated NVTX ranges overlap each other"
        return CaptureAsStep(reason=why, candidates=candidates), steps
    return kernel_period_stats(steps, period, anchor).model_copy(update={"candidates": candidates}), steps


def kernel_period_stats(steps: pl.DataFrame, period: int, anchor: str) -> KernelPeriodSteps:
    """STEPS of the kernel sequence's PERIOD from the ANCHOR kernel as :func:`find_steps` states them, no candidates."""
    family = _family_of(steps, pattern=f"kernel period of {period}", thread=None)
    return _with_shape(KernelPeriodSteps(family=family, kernels_per_period=period, anchor_kernel=anchor), steps)


def on_gpu_clock(stats: NvtxCpuSteps, windows: pl.DataFrame) -> GpuWindowSteps:
    """STATS' steps with the family's durations, warm-up and trend read from their GPU WINDOWS (step, start_ns,
    end_ns), the ranges' own p50 and p95 kept as the CPU's period."""
    family = _family_of(windows, stats.family.pattern, stats.family.thread, stats.family.domain, stats.family.depth)
    return _with_shape(GpuWindowSteps(family=family, cpu_p50_ns=stats.family.p50_ns, cpu_p95_ns=stats.family.p95_ns,
                                      candidates=stats.candidates), windows)


def family_stats(steps: pl.DataFrame, family: StepFamily) -> NvtxCpuSteps | None:
    """STEPS, every range of FAMILY in a capture (step, start_ns, end_ns, by start), stated as :func:`find_steps`
    states a family it chose (no other candidates); None where :func:`find_steps` would not take them (fewer than two,
    or overlapping). FAMILY's depth is kept: the least of the ranges it saw."""
    sequential = steps.select((pl.col("start_ns").shift(-1) >= pl.col("end_ns")).drop_nulls().all()).item()
    if steps.height < 2 or not sequential:
        return None
    whole = _family_of(steps, family.pattern, family.thread, family.domain, family.depth)
    return _with_shape(NvtxCpuSteps(family=whole), steps)


def _family_instances(nvtx: pl.DataFrame, codes: tuple[pl.Series, pl.Series], family: StepFamily) -> pl.DataFrame:
    """FAMILY's ranges in NVTX (CODES: :func:`family_codes` of the names) as steps."""
    pattern, patterns = codes
    return (nvtx.filter(pl.lit(pattern).eq((patterns == family.pattern).arg_true()[0])
                        & (pl.col("domain") == family.domain) & (pl.col("thread") == family.thread))
            .sort("start_ns").with_row_index("step")
            .select(pl.col("step").cast(pl.Int64), "start_ns", "end_ns", "name", "thread"))


def _duration_stats(duration: pl.Expr) -> list[pl.Expr]:
    """A family's duration statistics (:class:`StepFamily`'s total_ns to first_ns) of DURATION."""
    return [duration.sum().alias("total_ns"), duration.median().alias("p50_ns"),
            duration.quantile(0.95, "linear").alias("p95_ns"), duration.min().alias("min_ns"),
            duration.max().alias("max_ns"), duration.first().alias("first_ns")]


def _family_of(steps: pl.DataFrame, pattern: str, thread: int | None, domain: str = "", depth: int = 0) -> StepFamily:
    shape = steps.select(_duration_stats(pl.col("end_ns") - pl.col("start_ns"))).row(0, named=True)
    return StepFamily(pattern=pattern, domain=domain, thread=thread, depth=depth, count=steps.height, sequential=True,
                      **shape)


def _with_shape(stats: Shaped, steps: pl.DataFrame) -> Shaped:
    """Add the warm-up outlier and the trend, both measured without the first step when it is warm-up."""
    if steps.height < 3:
        return stats
    durations = steps.select((pl.col("end_ns") - pl.col("start_ns")).cast(pl.Float64).alias("d"),
                             pl.int_range(pl.len()).alias("i"))
    first, rest_median = durations.select(pl.col("d").first().alias("first"),
                                          pl.col("d").slice(1).median().alias("rest")).row(0)
    warmup = bool(rest_median) and first > WARMUP_RATIO * rest_median
    slope, median, last = (durations.slice(1) if warmup else durations).select(
        (pl.cov("i", "d") / pl.col("i").var()).fill_nan(0.0).alias("slope"), pl.col("d").median().alias("median"),
        (pl.len() - 1).alias("last")).row(0)
    change = slope * last / median if median else 0.0
    trend: Trend = "flat" if abs(change) <= TREND_THRESHOLD else "rising" if change > 0 else "falling"
    return stats.model_copy(update={"warmup": warmup, "warmup_excess_ns": first - rest_median if warmup else 0.0,
                                    "trend": trend, "trend_ns_per_step": slope})


def kernel_period_steps(kernels: pl.DataFrame) -> tuple[pl.DataFrame, int | None, str | None, str]:
    """Steps (:func:`period_steps`) from the period of the kernel sequence (by start): the anchor is the first kernel
    name that recurs at a constant distance at least MIN_PERIOD_REPEATS times. Returns (steps, period, the anchor's
    name, why not): an empty frame and None where there is no clear period."""
    empty = pl.DataFrame(schema=STEP_COLUMNS)
    if kernels.height < 2 * MIN_PERIOD_REPEATS:
        return empty, None, None, "too few kernels to find a repeating sequence and no repeated NVTX range"
    ordered = kernels.sort("start_ns").with_row_index("position").with_columns(
        pl.col("name").rank("dense").cast(pl.Int64).alias("kind"))
    gaps = (ordered.with_columns((pl.col("position") - pl.col("position").shift(1).over("kind")).alias("gap"))
            .group_by("kind").agg(pl.len().alias("count"), pl.col("position").first().alias("first"),
                                  pl.col("gap").drop_nulls().mode().first().alias("period"),
                                  (pl.col("gap").drop_nulls().n_unique() == 1).alias("constant"))
            .filter(pl.col("constant") & (pl.col("count") >= MIN_PERIOD_REPEATS)).sort("first"))
    if not gaps.height:
        return empty, None, None, "no repeated NVTX range and no kernel recurs at a constant distance"
    anchor, period = int(gaps["kind"][0]), int(gaps["period"][0])
    if period < 2:
        return empty, None, None, ("no repeated NVTX range, and every kernel has the same name: no sequence to cut "
                                   "into steps")
    kinds = ordered["kind"]
    match = (kinds.head(kinds.len() - period) == kinds.tail(kinds.len() - period)).sum() / (kinds.len() - period)
    if match < PERIOD_MATCH:
        return empty, None, None, ("no repeated NVTX range, and the kernel sequence does not repeat closely enough "
                                   "(fewer than PERIOD_MATCH of kernels equal the kernel one period later)")
    name = str(ordered.filter(pl.col("kind") == anchor)["name"][0])
    return period_steps(kernels.lazy(), period, name), period, name, ""


def period_steps(kernels: pl.LazyFrame, period: int, anchor: str) -> pl.DataFrame:
    """The steps of KERNELS' sequence of PERIOD kernels starting with the ANCHOR kernel: each anchor starts a step that
    ends where the next begins, but one followed by fewer than PERIOD kernels (a last, partial iteration), and the last
    ends where the kernels through its period's last have all ended. Streamed, in bounded memory: the anchors' starts,
    every kernel counted by how many anchors start before or with it, and the PERIOD kernels from the last anchor on."""
    anchors = (kernels.filter(pl.col("name") == anchor).select("start_ns").collect(engine="streaming")
               .sort("start_ns")["start_ns"])
    between = (kernels.select(pl.lit(anchors).search_sorted(pl.col("start_ns"), side="right").cast(pl.Int64)
                              .alias("_after"), "end_ns")
               .group_by("_after").agg(pl.len().alias("len"), pl.col("end_ns").max()).collect(engine="streaming"))
    # Per anchor k: the kernels from it on (the groups after k + 1 .. all anchors), and the latest end before it.
    per_anchor = (pl.DataFrame({"_after": pl.int_range(anchors.len() + 1, eager=True).cast(pl.Int64)})
                  .join(between, on="_after", how="left").sort("_after")
                  .select(pl.col("len").fill_null(0).reverse().cum_sum().reverse().shift(-1).alias("from_on"),
                          pl.col("end_ns").cum_max().alias("ended_before"))
                  .head(anchors.len()))
    kept = int((per_anchor["from_on"] >= period).sum())
    if kept < 2:
        return pl.DataFrame(schema=STEP_COLUMNS)
    last = int(anchors[kept - 1])
    through = (kernels.filter(pl.col("start_ns") >= last).select("start_ns", "end_ns").bottom_k(period, by="start_ns")
               .select(pl.col("end_ns").max()).collect(engine="streaming").item())
    before = per_anchor["ended_before"][kept - 1]
    last_end = max(int(through), int(before)) if before is not None else int(through)
    return pl.DataFrame({"start_ns": anchors.head(kept)}).select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("step"), pl.col("start_ns").cast(pl.Int64),
        pl.col("start_ns").shift(-1).fill_null(last_end).cast(pl.Int64).alias("end_ns"),
        pl.lit(f"period {period}").alias("name"), pl.lit(None, pl.Int64).alias("thread"))
