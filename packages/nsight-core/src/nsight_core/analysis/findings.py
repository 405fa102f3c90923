"""What to fix, and how much each fix would save: every saving is time the step budget measured (for copies, achieved
against achievable bandwidth), and the budget's parts are disjoint, so no two findings save the same time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

import polars as pl

from nsight_core.analysis import precision
from nsight_core.analysis.budget import PAGEABLE, CpuActivity
from nsight_core.analysis.finding_model import (
    REPORT_SHARE,
    WARNING_SHARE,
    Context,
    Evidence,
    Finding,
    FindingKind,
    Where,
    ordered,
    per_step_of,
    reported,
    saving_of,
    severity_of,
    share_of,
)
from nsight_core.analysis.steps import FamilySteps, NvtxGpuSteps

if TYPE_CHECKING:
    from nsight_core.analysis.causes import CauseInputs

MANY_KERNELS = 100
"""Kernels per step from which kernels shorter than their launches are reported whatever the gaps cost."""
MIN_STEPS = 5
"""Fewer steps than this: percentiles and the trend say little."""
PAGEABLE_MIN_BYTES = 1 << 20
SMALL_COPY_BYTES = 4096
"""A device-to-host copy this small in a step is a scalar read back (`.item()`, `float(loss)`)."""
TOP_KERNELS = 5
PAGEABLE_COPY_CALL = r"^cu(da)?Memcpy\w*Async"
"""An asynchronous copy among the blocking calls: there only because it moved pageable memory (a sync_wait of
subject ``pageable_transfer``); a synchronous cudaMemcpy blocks whatever its memory."""
Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)
FP32_GEMM = r"(?i)(sgemm|gemm.*(_ffma_|f32f32_f32f32_f32))"
"""cuBLAS kernels that multiply FP32 matrices on the FP32 pipes (`sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_...`)."""
TENSOR_CORE_GEMM = r"(?i)(tf32|tensorop|hmma|bf16|f16)"
NOMINAL_PINNED_BYTES_PER_S = 25e9
"""What a pinned host copy achieves over PCIe 4.0 x16: the reference where the capture has no pinned copy of that
direction (and its GPU is older than Hopper), so the saving errs low."""
NOMINAL_PINNED_PCIE5_BYTES_PER_S = 50e9
"""The same over PCIe 5.0 x16, which Hopper and later GPUs have."""
PCIE5_COMPUTE_CAPABILITY = 9.0
KERNEL_TOTAL_COLUMNS = {"short_name": pl.String, "name": pl.String, "total_ns": pl.Int64}
OTHER_THREADS_METRIC = "gpu_idle_while_other_threads_call_per_step"
"""The GPU's idle time before work another thread of the process launched, per call (budget kind other_threads)."""
_ACTIVITY_PREFIX = {"untraced": "untraced_cpu", "dispatch": "dispatch"}
"""CPU activities named by their metric alone (no call or range to point at)."""
_ACTIVITY_WHERE = {"cuda_api": "api", "other_threads": "api", "osrt": "osrt", "nvtx": "range"}
"""Where the other CPU activities' time was: the call (another thread's too) or the range that names them."""


def _where(activity: CpuActivity) -> Where | None:
    """The call or range ACTIVITY's time was in; None for those _ACTIVITY_PREFIX names."""
    kind = _ACTIVITY_WHERE.get(activity.kind)
    return Where(kind=kind, name=activity.name) if kind else None  # type: ignore[arg-type]


def _budget_finding(context: Context, part: Literal["sync_wait", "exposed_copy", "exposed_comm", "stream_wait"],
                    extra: list[Evidence] | None = None, seen: bool = False, subject: str = "") -> Finding | None:
    """A finding of the kind named as the budget PART, whose saving is the part's mean per step. SEEN: the cause is
    there in every step (a sync call, an NCCL kernel), so the finding is made even below REPORT_SHARE (then as info)."""
    if context.budget is None:
        return None
    measured = context.budget.part(part)
    saving = saving_of(context, per_step_of(context, measured.per_step_mean_ns), measured.total_ns)
    evidence = [Evidence(metric=f"{part}_per_step_mean", value=measured.per_step_mean_ns, unit="ns"),
                Evidence(metric=f"{part}_per_step_p50", value=measured.per_step_p50_ns, unit="ns"),
                Evidence(metric=f"{part}_fraction_of_step_time", value=measured.fraction, unit="fraction"),
                *(Evidence(metric=f"{_ACTIVITY_PREFIX.get(activity.kind, 'cpu')}_during_{part}_per_step",
                           value=activity.per_step_mean_ns, unit="ns", where=_where(activity))
                  for activity in context.budget.idle_activities if activity.part == part),
                *(extra or [])]
    return reported(part, saving, evidence, subject, seen)


def _activity_finding(context: Context, kinds: tuple[str, ...], kind: FindingKind, metric: str) -> Finding | None:
    """A finding whose saving is the GPU idle time the host's CPU activities of KINDS held up (their mean per step);
    the steps' own range is none (a CPU-clock budget names it)."""
    if context.budget is None:
        return None
    steps = context.steps.family.pattern if isinstance(context.steps, FamilySteps) else None
    activities = [a for a in context.budget.idle_activities
                  if a.part == "gpu_idle" and a.kind in kinds and not (a.kind == "nvtx" and a.name == steps)]
    if not activities:
        return None
    total = sum(a.total_ns for a in activities)
    saving = saving_of(context, per_step_of(context, total / max(context.budget.steps, 1)), total)
    return reported(kind, saving, [Evidence(metric=OTHER_THREADS_METRIC if a.kind == "other_threads" else metric,
                                            value=a.per_step_mean_ns, unit="ns", where=_where(a))
                                   for a in activities])


def sync_wait(context: Context, syncs: pl.DataFrame, small_reads: int) -> Finding | None:
    """Syncs that drain the GPU queue in steps (`.item()`, a stream sync, a sync copy): the idle time each causes."""
    steps = max(context.budget.steps if context.budget else 1, 1)
    calls = syncs.group_by("name", "range").agg(pl.col("len").sum()).sort(["len", "name", "range"],
                                                                           descending=[True, False, False])
    extra = [Evidence(metric="sync_calls_per_step", value=count / steps, unit="count",
                      where=Where(kind="api", name=f"{name} in {source}" if source else name))
             for name, source, count in calls.iter_rows()]
    if small_reads:
        extra.append(Evidence(metric="small_device_to_host_copies_per_step", value=small_reads / steps, unit="count",
                              where=Where(kind="copy", name="Device-to-Host")))
    # Pageable copies: torch.tensor(list, device=...), .to() or .cpu(); small reads say more (the value is the cause).
    copies = calls.filter(pl.col("name").str.contains(PAGEABLE_COPY_CALL)).height
    subject = "scalar_reads" if small_reads else "pageable_transfer" if copies else ""
    return _budget_finding(context, "sync_wait", extra, seen=int(calls["len"].sum()) >= steps, subject=subject)


def launch_bound(context: Context, kernels_per_step: float, kernel_p50_ns: float,
                 launch_p50_ns: float) -> Finding | None:
    """Many short kernels: the GPU waits on launches (short gaps between work) more than it computes them."""
    if context.budget is None:
        return None
    measured = context.budget.part("launch_gap")
    short = bool(kernel_p50_ns) and kernel_p50_ns < launch_p50_ns
    if context.steps.clock == "cpu" and not short:
        return None
    evidence = [Evidence(metric="kernels_per_step", value=kernels_per_step, unit="count"),
                Evidence(metric="kernel_duration_p50", value=kernel_p50_ns, unit="ns",
                         where=Where(kind="kernel", name="")),
                Evidence(metric="launch_call_p50", value=launch_p50_ns, unit="ns", where=Where(kind="api", name="")),
                Evidence(metric="launch_gap_per_step_mean", value=measured.per_step_mean_ns, unit="ns"),
                Evidence(metric="launch_gap_fraction_of_step_time", value=measured.fraction, unit="fraction")]
    saving = saving_of(context, per_step_of(context, measured.per_step_mean_ns), measured.total_ns)
    return reported("launch_bound", saving, evidence, seen=short and kernels_per_step >= MANY_KERNELS)


def compute_capability(gpus: pl.DataFrame | None) -> float | None:
    """The least compute capability among the capture's GPUS (None where the export does not say)."""
    if gpus is None or not gpus.height:
        return None
    value = gpus.select(pl.col("compute_capability").cast(pl.Float64, strict=False).min()).item()
    return float(value) if value is not None else None


def nominal_pinned(capability: float | None) -> float:
    """The pinned-copy bandwidth to expect from a GPU of this compute CAPABILITY (PCIe 5 from Hopper)."""
    return NOMINAL_PINNED_PCIE5_BYTES_PER_S if capability and capability >= PCIE5_COMPUTE_CAPABILITY \
        else NOMINAL_PINNED_BYTES_PER_S


def pageable_copies(context: Context, memcpy: pl.DataFrame | pl.LazyFrame, steps: pl.DataFrame,
                    nominal: float = NOMINAL_PINNED_BYTES_PER_S) -> list[Finding]:
    """Pageable copies of PAGEABLE_MIN_BYTES or more, a finding per direction, saving each copy's time less its time at
    its direction's best pinned bandwidth (else NOMINAL); per step: those in STEPS over their number."""
    duration = pl.col("end_ns") - pl.col("start_ns")
    big = memcpy.lazy().filter((pl.col("bytes") >= PAGEABLE_MIN_BYTES) & (duration > 0))
    pinned_best, pageable_big = pl.collect_all([
        big.filter(((pl.col("src_kind") == "Pinned") | (pl.col("dst_kind") == "Pinned")) & ~PAGEABLE)
        .group_by("direction").agg((pl.col("bytes") / duration).max().alias("best")),
        big.filter(PAGEABLE).select("start_ns", "end_ns", "direction", "bytes")], engine="streaming")
    best = dict(pinned_best.iter_rows())
    located = pageable_big.sort("start_ns").join_asof(
        steps.select("step", pl.col("start_ns").alias("step_start"), pl.col("end_ns").alias("step_end")),
        left_on="start_ns", right_on="step_start", strategy="backward",
    ).with_columns(pl.when(pl.col("start_ns") < pl.col("step_end")).then(pl.col("step")).alias("step"))
    findings: list[Finding | None] = []
    for (direction,), copies in located.group_by("direction", maintain_order=True):
        achievable = float(best.get(direction, nominal))
        each = (duration - pl.col("bytes") / achievable * 1e9).clip(lower_bound=0)
        summed = copies.select(pl.col("bytes").sum(), duration.sum().alias("ns"), each.sum().alias("saving"),
                               each.filter(pl.col("step").is_not_null()).sum().alias("in_steps")).row(0, named=True)
        largest = copies.sort("bytes", descending=True).row(0, named=True)
        per_step = summed["in_steps"] / steps.height if summed["in_steps"] and context.budget is not None else None
        where = Where(kind="copy", name=str(direction), step=largest["step"], start_ns=largest["start_ns"])
        evidence = [Evidence(metric="copies", value=copies.height, unit="count", where=where),
                    Evidence(metric="bytes", value=summed["bytes"], unit="bytes", where=where),
                    Evidence(metric="copy_time", value=summed["ns"], unit="ns", where=where),
                    Evidence(metric="achieved_bandwidth", value=summed["bytes"] / summed["ns"] * 1e9,
                             unit="bytes_per_s", where=where),
                    Evidence(metric="achievable_bandwidth" if direction in best else "nominal_pinned_bandwidth",
                             value=achievable, unit="bytes_per_s"),
                    Evidence(metric="largest_copy", value=largest["bytes"], unit="bytes", where=where)]
        findings.append(reported("pageable_copy", saving_of(context, per_step, summed["saving"]), evidence,
                                 str(direction)))
    return [finding for finding in findings if finding is not None]


def exposed_copy(context: Context, pageable: list[Finding]) -> Finding | None:
    """Copies that no kernel overlaps, less what the PAGEABLE findings already save of them in the steps."""
    finding = _budget_finding(context, "exposed_copy")
    if finding is None or finding.saving is None or context.budget is None:
        return finding
    claimed = sum(f.saving.per_step_ns * context.budget.steps for f in pageable
                  if f.saving is not None and f.saving.per_step_ns is not None)
    total = max(finding.saving.total_ns - claimed, 0.0)
    per_step = total / context.budget.steps if finding.saving.per_step_ns is not None and context.budget.steps else None
    return reported("exposed_copy", saving_of(context, per_step, total), finding.evidence)


def exposed_comm(context: Context) -> Finding | None:
    """NCCL kernels no compute kernel overlaps: communication the step waits for."""
    return _budget_finding(context, "exposed_comm",
                           seen=bool(context.budget and context.budget.part("exposed_comm").total_ns))


def kernel_totals(kernels: pl.DataFrame | pl.LazyFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """The time of the kernels started in STEPS' span per short and full name (KERNEL_TOTAL_COLUMNS), streamed."""
    if not steps.height:
        return pl.DataFrame(schema=KERNEL_TOTAL_COLUMNS)
    lo, hi = steps.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
    return (kernels.lazy().filter((pl.col("start_ns") >= lo) & (pl.col("start_ns") < hi))
            .group_by("short_name", "name").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("total_ns"))
            .cast(KERNEL_TOTAL_COLUMNS).collect(engine="streaming"))  # type: ignore[arg-type]


def _top_kernels(totals: pl.DataFrame, steps: int) -> list[Evidence]:
    """The TOP_KERNELS kernels (by short name) that ran longest in TOTALS (:func:`kernel_totals`), per one of STEPS."""
    top = (totals.group_by("short_name").agg(pl.col("total_ns").sum())
           .sort(["total_ns", "short_name"], descending=[True, False]).head(TOP_KERNELS))
    return [Evidence(metric="kernel_time_per_step", value=ns / steps, unit="ns", where=Where(kind="kernel", name=name))
            for name, ns in top.iter_rows()]


def device_bound(context: Context, totals: pl.DataFrame) -> Finding | None:
    """A loop the GPU bounds with little to win around its kernels: an info line naming the top kernels of TOTALS."""
    if not isinstance(context.steps, NvtxGpuSteps) or context.steps.bound != "device" or context.budget is None:
        return None
    busy = sum(context.budget.part(p).fraction for p in ("compute", "exposed_comm", "exposed_copy"))
    evidence = [Evidence(metric="gpu_busy_fraction_of_step", value=busy, unit="fraction"),
                *_top_kernels(totals, max(context.budget.steps, 1))]
    return Finding(kind="device_bound", severity="info", evidence=evidence, saving=None)


def fp32_matmuls(kernels: Frame) -> Frame:
    """The FP32 matrix kernels of KERNELS (:func:`kernel_totals`, or any frame with a name) that run without tensor
    cores: cuBLAS' and cuDNN's sgemm/f32 paths."""
    name = pl.col("name")
    return kernels.filter(name.str.contains(FP32_GEMM) & ~name.str.contains(TENSOR_CORE_GEMM))


def fp32_matmul(context: Context, totals: pl.DataFrame, faster: precision.Replayed) -> Finding | None:
    """FP32 matrix kernels of TOTALS (:func:`kernel_totals`) without tensor cores: the saving is what allowing TF32 (a
    flag, no model change) would win the steps, FASTER's replay of their timeline; bf16's is evidence."""
    if context.budget is None or not context.budget.steps or context.step_p50_ns is None:
        return None
    fp32 = fp32_matmuls(totals)
    summed = float(fp32["total_ns"].sum())
    share = summed / context.budget.wall_ns if context.budget.wall_ns else 0.0
    if share < WARNING_SHARE:
        return None
    steps = context.budget.steps
    tf32, bf16 = (None if total is None else total / steps for total in faster)
    saving = saving_of(context, tf32, tf32 * steps) if tf32 is not None else None
    # Tensor cores there, and nothing they would win: the host bounds the step (what_if.py).
    idle = saving is not None and share_of(saving) < REPORT_SHARE
    return Finding(kind="fp32_matmul", severity=severity_of(share_of(saving)) if saving else "info",
                   subject="host_bound" if idle else "", evidence=[
        Evidence(metric="fp32_matmul_time_per_step", value=summed / steps, unit="ns"),
        Evidence(metric="fp32_matmul_fraction_of_step_time", value=share, unit="fraction"),
        *(Evidence(metric=f"{kind}_saving_per_step", value=value, unit="ns")
          for kind, value in (("tf32", tf32), ("bf16", bf16)) if value is not None),
        *_top_kernels(fp32, steps)], saving=saving)


def warmup(context: Context) -> Finding | None:
    """A first step much longer than the rest: a one-off start-up cost (saved once, not per step)."""
    stats = context.steps
    if not stats.warmup or not isinstance(stats, FamilySteps):
        return None
    first = Where(kind="step", name=stats.family.pattern, step=0)
    return Finding(kind="warmup", severity="info", saving=saving_of(context, None, stats.warmup_excess_ns), evidence=[
        Evidence(metric="first_step", value=stats.family.first_ns, unit="ns", where=first),
        Evidence(metric="step_p50", value=stats.family.p50_ns, unit="ns"),
        Evidence(metric="first_step_excess", value=stats.warmup_excess_ns, unit="ns", where=first)])


def step_count(context: Context) -> Finding | None:
    """Too few steps to judge percentiles and trends, or no steps found at all."""
    stats = context.steps
    if not isinstance(stats, FamilySteps):
        return Finding(kind="no_steps", severity="info", evidence=[], saving=None)
    if stats.family.count >= MIN_STEPS:
        return None
    return Finding(kind="too_few_steps", severity="info", saving=None,
                   evidence=[Evidence(metric="steps", value=stats.family.count, unit="count",
                                      where=Where(kind="range", name=stats.family.pattern))])


@dataclass(frozen=True, kw_only=True)
class GpuInputs:
    """What the GPU findings read beyond their :class:`Context` (analysis/finding_inputs.py)."""

    syncs: pl.DataFrame
    """The steady steps' blocking calls on their thread, counted: name, range, len (:func:`sync_wait`)."""
    small_reads: int
    """Small device-to-host copies in the steady steps."""
    shape: tuple[float, float, float]
    """Kernels per step, median kernel and median launch-call duration in the steady steps (:func:`launch_bound`)."""
    copies: pl.DataFrame | pl.LazyFrame
    """Memory copies, at least those of PAGEABLE_MIN_BYTES or more (:func:`pageable_copies`): lazy where streamed."""
    copy_steps: pl.DataFrame
    """The steps the copies' savings are counted in (empty: no steps)."""
    pinned: float
    """The nominal pinned bandwidth (:func:`nominal_pinned`)."""
    kernels: pl.DataFrame
    """:func:`kernel_totals` of the steady steps."""
    causes: CauseInputs | None = None
    """What the findings of known causes read (analysis/causes.py); None: none looked for."""
    faster_matmuls: precision.Replayed = precision.NOT_REPLAYED
    """What the steady steps would win with their FP32 matrix kernels on tensor cores (:func:`fp32_matmul`)."""


def findings_of(context: Context, gpu: GpuInputs | None) -> list[Finding]:
    """Every finding of CONTEXT, with the GPU's where the capture traced GPU work (GPU: their inputs), ordered."""
    gpu_findings: list[Finding | None] = []
    if gpu is not None:
        from nsight_core.analysis.causes import known_causes, named  # they build on this module's findings

        causes = known_causes(context, gpu.causes) if gpu.causes is not None else None
        found = causes.findings if causes else []
        # The other findings read the budget less what the known causes claimed: no time is saved twice.
        rest = context.model_copy(update={"budget": causes.budget}) if causes else context
        pageable = [finding for finding in pageable_copies(rest, gpu.copies, gpu.copy_steps, gpu.pinned) if not (
            finding.subject == "Device-to-Host" and any(f.kind == "bulk_device_to_host" for f in found))]
        idle = [sync_wait(rest, gpu.syncs, gpu.small_reads),
                _activity_finding(rest, ("nvtx",), "host_work", "gpu_idle_while_host_in_range_per_step"),
                _activity_finding(rest, ("untraced", "osrt", "cuda_api", "other_threads"), "untraced_host",
                                  "gpu_idle_while_host_untraced_per_step"),
                _budget_finding(rest, "stream_wait")]
        gpu_findings = [*found, *idle, launch_bound(rest, *gpu.shape), *pageable, exposed_copy(rest, pageable),
                        exposed_comm(rest),
                        fp32_matmul(context, gpu.kernels, gpu.faster_matmuls), device_bound(context, gpu.kernels)]
        if causes is not None:
            gpu_findings = named(gpu_findings, causes, gpu.syncs)
    return ordered([*gpu_findings, warmup(context), step_count(context)])
