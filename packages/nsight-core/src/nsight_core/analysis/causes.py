"""Known causes of a step's idle time (``allocator_churn``, ``per_tensor_launches``, ``small_copies``,
``bulk_device_to_host``), each a finding whose saving is its own part of the budget: the host time the budget names by
the calls that cause it (host_time.HostCalls), less what tracing added to them. What a cause claims is taken out of the
budget the other findings read (:func:`less`): no time is saved twice. render/findings.py words them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

import polars as pl

from nsight_core.analysis.budget import BudgetPart, CpuActivity, StepBudget
from nsight_core.analysis.finding_model import Context, Evidence, Finding, FindingKind, Where, reported, saving_of
from nsight_core.analysis.findings import NOMINAL_PINNED_BYTES_PER_S
from nsight_core.analysis.gpu_budget import QUERY_CALLS
from nsight_core.units import Unit

ALLOC_API = r"^cu(da)?(Malloc|Free)(_v\d+)?$|^cuMem(Alloc|Free|Create|Release|Map|Unmap|AddressReserve|AddressFree)"
"""The device allocator's calls (not cudaMallocAsync, whose pool is the fix, nor pinned host memory)."""
ALLOC_MIN_PER_STEP = 1.0
"""Allocator calls per steady step from which they are churn: a warm caching allocator makes none."""
LAUNCH_API = r"^cu(da)?LaunchKernel|^cuLaunch|^cu(da)?GraphLaunch"
COPY_API = r"^cu(da)?Memcpy"
SYNC_API = r"^cu(da)?(Stream|Event|Device|Ctx)Synchronize"
BIG_KERNEL = r"(?i)gemm|conv|cutlass|xmma|nvjet|matmul|attention|flash|cudnn|fprop|dgrad|wgrad"
"""Kernels that do a step's main work: a loop of small kernels is a run between them."""
BIG_KERNEL_NS = 50_000
"""A kernel this long (50 µs) or longer is no small one, whatever its name."""
LOOP_MIN_LAUNCHES = 64
"""Launches a run of small kernels holds at least to be a loop over tensors."""
LOOP_MIN_REPEATS = 128
"""...with each of its kernels repeated this many times on average: once per tensor of a list of hundreds (a model's
parameters), not a chain of ops on one tensor (which fusion, not a multi-tensor kernel, shortens)."""
TENSORS_PER_LAUNCH = 64
"""Tensors a multi-tensor kernel (torch._foreach_*, a foreach optimizer) handles per launch: a few dozen in PyTorch."""
OTHER_THREADS_SHARE = 0.5
"""Other threads' CUDA time per step, as a share of the untraced idle time, from which that time is theirs."""
TOP_OTHER_CALLS = 3
"""Other threads' calls an untraced_host finding names."""
SMALL_COPY_MAX_BYTES = 1 << 20
"""A host-to-device copy of at most this (1 MiB) is a small one."""
MANY_SMALL_COPIES = 32
"""Small host-to-device copies per step from which they are a cause: a sample or a tensor at a time."""
BULK_D2H_BYTES = 16 << 20
"""Device-to-host bytes per step (in copies above SMALL_COPY_MAX_BYTES) from which they are a model's state."""
BULK_HOST_SHARE = 0.05
"""The GPU's idle time right after the bulk copies, as a share of the step, from which the host's handling of them (a
torch.save) is a cause; less, and the copies are a copy's finding alone (pageable_copy, exposed_copy)."""
SMALL_READ_BYTES = 8
"""A device-to-host copy of at most this (a scalar: `.item()`, a bool for a Python `if`, a count) is a read."""
SELECT_KERNEL = r"(?i)DeviceSelect|DeviceReduce|DeviceScan|DeviceCompact|RadixSort|RunLength|nonzero|unique|masked"
"""Kernels that count or select (CUB's, run by nonzero, boolean-mask indexing, unique): a read after one is a size."""
DRIVER_PARTS = ("launch_gap", "gpu_idle", "sync_wait")
"""The idle parts a cause's host time can be in."""
TOP_LINES = 3
"""Python lines a finding names, most calls first."""
MASK_RANGE = r"(?i)DeviceSelect|nonzero|masked"
"""NVTX ranges (CUB's own) a sync of a selection sits in."""
TOP_EVIDENCE = 3
"""Host activities an unexplained finding names."""
_METRICS = {"cuda_api": ("time_in_call_per_step", "api"), "dispatch": ("framework_time_before_call_per_step", "api"),
            "osrt": ("time_in_os_call_per_step", "osrt"), "nvtx": ("time_in_range_per_step", "range"),
            "untraced": ("untraced_host_per_step", None)}


class CauseInputs(NamedTuple):
    """What the findings of known causes read (analysis/cause_inputs.py), summed over the steady steps."""

    steps: int
    activities: pl.DataFrame
    """The budget's CPU activities of the steps' idle time: part, cpu_kind, cpu_name, total_ns."""
    calls: pl.DataFrame
    """The steps' thread's CUDA calls in the steps: name, calls, total_ns."""
    copies: pl.DataFrame
    """Copies in the steps: direction, small (at most SMALL_COPY_MAX_BYTES), copies, bytes, ns."""
    loops: pl.DataFrame
    """Kernels launched in loops (cause_inputs.loops_in): name, launches, kept (by a multi-tensor kernel), timed (with
    a call on the steps' thread), host_ns (the host's time issuing the loops, shared by those launches)."""
    reads: pl.DataFrame
    """Small device-to-host reads: select (after a selecting kernel), reads."""
    after_bulk_ns: float
    """The GPU's idle time right after each bulk device-to-host copy, until its next work (in its step)."""
    others: pl.DataFrame
    """The CUDA calls other threads of the steps' process made in the steps (autograd's backward pass): name, calls."""
    others_ns: float
    """Their time: from each step's first such call to its last, summed over the steps."""
    per_call_ns: float
    """What the profiler's tracing added to each CUDA call (analysis/overhead.py; 0 where not estimated)."""
    lines: pl.DataFrame
    """The calls by the user's Python line they came from (empty without backtraces): name, place, function, calls."""
    samples: pl.DataFrame
    """Sampled host time outside CUDA calls and inner ranges (empty without sampling): place, function, host_ns."""


Claim = tuple[str, str | None, str | None]
"""A part of the budget a cause takes: (part, cpu_kind, cpu_name); kind and name None for a busy part's time."""


@dataclass(frozen=True, kw_only=True)
class Causes:
    """The known causes found (:func:`known_causes`) and what they claimed of the budget."""

    findings: list[Finding]
    claims: dict[Claim, float]
    budget: StepBudget | None
    """The budget less the claims (:func:`less`): what the other findings read."""
    left: pl.DataFrame
    """The CPU activities less the claims (part, cpu_kind, cpu_name, per_step_ns): what an unknown cause shows."""
    select_reads: float
    """Small reads per step right after a selecting kernel (the sync finding's pattern)."""
    scalar_reads: float
    lines: list[Evidence]
    """The user's Python lines the steps' synchronising calls came from (:func:`lines_of`)."""
    sampled: list[Evidence]
    """The user's Python lines of the steps' untraced host time (:func:`sampled_lines`)."""
    others: list[Evidence]
    """What other threads of the steps' process did in the steps (:func:`other_threads`): their time, their calls."""


def _activity(inputs: CauseInputs, names: str, kinds: tuple[str, ...] = ("cuda_api", "dispatch"),
              parts: tuple[str, ...] = DRIVER_PARTS) -> pl.DataFrame:
    """The activities of NAMES (a pattern of call names) of KINDS in PARTS: part, cpu_kind, cpu_name, total_ns."""
    return inputs.activities.filter(pl.col("cpu_name").str.contains(names) & pl.col("cpu_kind").is_in(kinds)
                                    & pl.col("part").is_in(parts))


def _calls(inputs: CauseInputs, names: str) -> float:
    return float(inputs.calls.filter(pl.col("name").str.contains(names))["calls"].sum())


def _traced(inputs: CauseInputs, calls: float) -> float:
    """What tracing added to CALLS calls that are no query, and to the queries (QUERY_CALLS) that come with each."""
    total = float(inputs.calls["calls"].sum())
    queries = _calls(inputs, QUERY_CALLS)
    return calls * (total / (total - queries) if total > queries else 1.0) * inputs.per_call_ns


def _claim(claims: dict[Claim, float], activities: pl.DataFrame, share: float = 1.0) -> float:
    """Add SHARE of ACTIVITIES to CLAIMS, never more of one than another cause left of it; their claimed time."""
    taken = 0.0
    for part, kind, name, total in activities.select("part", "cpu_kind", "cpu_name", "total_ns").iter_rows():
        before = claims.get((part, kind, name), 0.0)
        mine = max(min(total * share, total - before), 0.0)
        claims[(part, kind, name)] = before + mine
        taken += mine
    return taken


def _claim_exposed(context: Context, claims: dict[Claim, float], copy_ns: float) -> float:
    """Claim the copies' exposed time (at most COPY_NS) of what another cause left of it; the time claimed."""
    key = ("exposed_copy", None, None)
    part = float(context.budget.part("exposed_copy").total_ns) if context.budget else 0.0
    exposed = max(min(copy_ns, part - claims.get(key, 0.0)), 0.0)
    claims[key] = claims.get(key, 0.0) + exposed
    return exposed


def _finding(context: Context, kind: FindingKind, total_ns: float, steps: int,
             evidence: list[Evidence]) -> Finding | None:
    """A finding of KIND saving TOTAL_NS over STEPS steps, when it is worth reporting (REPORT_SHARE)."""
    if total_ns <= 0 or not steps:
        return None
    return reported(kind, saving_of(context, total_ns / steps if context.step_p50_ns else None, total_ns), evidence)


def lines_of(inputs: CauseInputs, names: str) -> list[Evidence]:
    """The user's Python lines the calls of NAMES came from, most calls first (``nsight run --python-backtrace``)."""
    rows = (inputs.lines.filter(pl.col("name").str.contains(names)).group_by("place", "function")
            .agg(pl.col("calls").sum()))
    return _line_evidence(inputs, rows, "calls", "calls_from_line_per_step", "count")


def sampled_lines(inputs: CauseInputs) -> list[Evidence]:
    """The user's Python lines sampled outside every CUDA call and range of a step: what its untraced time did."""
    return _line_evidence(inputs, inputs.samples, "host_ns", "sampled_host_time_at_line_per_step", "ns")


def _line_evidence(inputs: CauseInputs, rows: pl.DataFrame, column: str, metric: str, unit: Unit) -> list[Evidence]:
    """The TOP_LINES of ROWS (place, function, COLUMN) by COLUMN, as evidence of METRIC per step."""
    top = rows.sort([column, "place"], descending=[True, False]).head(TOP_LINES)
    return [Evidence(metric=metric, value=value / max(inputs.steps, 1), unit=unit,
                     where=Where(kind="line", name=f"{place} in {function}"))
            for place, function, value in top.select("place", "function", column).iter_rows()]


def allocator_churn(context: Context, inputs: CauseInputs, claims: dict[Claim, float]) -> Finding | None:
    """cudaMalloc/cudaFree in steady steps: their idle time, and the launches' dispatch they exposed, less what tracing
    added to them. A call that began while the GPU still ran queued work made the host late by the whole call: the
    launches after it met an idle GPU, and that time, up to the dispatch the GPU waited on, is the churn's too."""
    steps = inputs.steps
    calls = inputs.calls.filter(pl.col("name").str.contains(ALLOC_API))
    count = float(calls["calls"].sum())
    if not steps or count / steps < ALLOC_MIN_PER_STEP:
        return None
    held = _activity(inputs, ALLOC_API)
    in_calls = float(_activity(inputs, ALLOC_API, kinds=("cuda_api",))["total_ns"].sum())
    overlapped = max(float(calls["total_ns"].sum()) - in_calls, 0.0)
    exposed = _activity(inputs, LAUNCH_API, kinds=("dispatch",), parts=("launch_gap",))
    dispatch_ns = float(exposed["total_ns"].sum())
    available = dispatch_ns - sum(claims.get(key, 0.0)
                                  for key in exposed.select("part", "cpu_kind", "cpu_name").iter_rows())
    total = _claim(claims, held) - _traced(inputs, count)
    if overlapped > 0 and available > 0:
        total += _claim(claims, exposed, min(overlapped, available) / dispatch_ns)
    evidence = [Evidence(metric=metric, value=value / steps, unit="count" if column == "calls" else "ns",
                         where=Where(kind="api", name=name))
                for metric, column in (("allocator_calls_per_step", "calls"), ("time_in_call_per_step", "total_ns"))
                for name, value in calls.sort([column, "name"], descending=[True, False])[["name", column]].iter_rows()]
    evidence.append(Evidence(metric="gpu_idle_in_allocator_per_step", value=float(held["total_ns"].sum()) / steps,
                             unit="ns"))
    return _finding(context, "allocator_churn", total, steps, [*evidence, *lines_of(inputs, ALLOC_API)])


def per_tensor_launches(context: Context, inputs: CauseInputs, claims: dict[Claim, float]) -> Finding | None:
    """Loops of small kernels: the launches a multi-tensor kernel would remove, at the idle time per launch."""
    steps = inputs.steps
    launched, kept = float(inputs.loops["launches"].sum()), float(inputs.loops["kept"].sum())
    launches = _calls(inputs, LAUNCH_API)
    if not steps or launched / steps < LOOP_MIN_LAUNCHES or not launches:
        return None
    removed = min(launched - kept, launches)
    # The launches' idle time outside syncs (whose finding has the gaps after them), per launch, times those removed;
    # at most the host's time per launch inside the loops: a step's other launches (a model's layers) cost more each.
    held = _activity(inputs, LAUNCH_API, parts=("launch_gap", "gpu_idle"))
    share, held_ns = removed / launches, float(held["total_ns"].sum())
    if (timed := float(inputs.loops["timed"].sum())) and held_ns:
        share = min(share, removed * float(inputs.loops["host_ns"].sum()) / timed / held_ns)
    total = _claim(claims, held, share) - _traced(inputs, removed)
    top = inputs.loops.sort(["launches", "name"], descending=[True, False]).head(5).select("name", "launches")
    evidence = [Evidence(metric="launches_in_loops_per_step", value=launched / steps, unit="count"),
                Evidence(metric="launches_left_per_step", value=(launches - removed) / steps, unit="count"),
                Evidence(metric="gpu_idle_per_launch", value=float(held["total_ns"].sum()) / launches, unit="ns"),
                *(Evidence(metric="kernel_launches_per_step", value=n / steps, unit="count",
                           where=Where(kind="kernel", name=name)) for name, n in top.iter_rows())]
    return _finding(context, "per_tensor_launches", total, steps, evidence)


def small_copies(context: Context, inputs: CauseInputs, claims: dict[Claim, float]) -> Finding | None:
    """Many small host-to-device copies a step: the idle time in and before them and their syncs, and their exposed
    time, less one stacked pinned copy of their bytes (at NOMINAL_PINNED_BYTES_PER_S)."""
    steps = inputs.steps
    small = inputs.copies.filter((pl.col("direction") == "Host-to-Device") & pl.col("small"))
    count, size, ns = (float(small[column].sum()) for column in ("copies", "bytes", "ns"))
    copy_calls, sync_calls = _calls(inputs, COPY_API), _calls(inputs, SYNC_API)
    if not steps or count / steps < MANY_SMALL_COPIES or not copy_calls:
        return None
    taken = _claim(claims, _activity(inputs, COPY_API), min(count / copy_calls, 1.0))
    synced = min(count / sync_calls, 1.0) if sync_calls else 0.0
    taken += _claim(claims, _activity(inputs, SYNC_API), synced)
    stacked = size / NOMINAL_PINNED_BYTES_PER_S * 1e9
    total = taken + _claim_exposed(context, claims, ns) - stacked - _traced(inputs, count + synced * sync_calls)
    evidence = [Evidence(metric="small_copies_per_step", value=count / steps, unit="count",
                         where=Where(kind="copy", name="Host-to-Device")),
                Evidence(metric="bytes_per_copy", value=size / count, unit="bytes"),
                Evidence(metric="bytes_per_step", value=size / steps, unit="bytes"),
                Evidence(metric="syncs_per_step", value=synced * sync_calls / steps, unit="count"),
                Evidence(metric="stacked_copy_time", value=stacked / steps, unit="ns")]
    return _finding(context, "small_copies", total, steps, evidence)


def bulk_device_to_host(context: Context, inputs: CauseInputs, claims: dict[Claim, float]) -> Finding | None:
    """Tens of megabytes copied to the host every step with host time outside every range: that host time, the
    copies' exposed time and the idle time in and before their calls."""
    steps = inputs.steps
    bulk = inputs.copies.filter((pl.col("direction") == "Device-to-Host") & ~pl.col("small"))
    count, size, ns = (float(bulk[column].sum()) for column in ("copies", "bytes", "ns"))
    untraced = _activity(inputs, "", kinds=("untraced", "osrt"), parts=("gpu_idle",))
    host = float(untraced["total_ns"].sum())
    # The host's time is the copies' where the GPU waits on it right after them (pickling, writing), not elsewhere.
    after = min(inputs.after_bulk_ns, host)
    if not steps or size / steps < BULK_D2H_BYTES or not after or not context.step_p50_ns \
            or after / steps < BULK_HOST_SHARE * context.step_p50_ns:
        return None
    # The copy calls' idle time by the bulk copies' share of all copy time (a bulk copy's call waits longest).
    copy_ns = float(inputs.copies["ns"].sum())
    taken = _claim(claims, untraced, after / host)
    taken += _claim(claims, _activity(inputs, COPY_API), min(ns / copy_ns, 1.0) if copy_ns else 0.0)
    total = taken + _claim_exposed(context, claims, ns) - _traced(inputs, count)
    evidence = [Evidence(metric="device_to_host_bytes_per_step", value=size / steps, unit="bytes",
                         where=Where(kind="copy", name="Device-to-Host")),
                Evidence(metric="device_to_host_copies_per_step", value=count / steps, unit="count"),
                Evidence(metric="copy_time_per_step", value=ns / steps, unit="ns"),
                Evidence(metric="gpu_idle_after_the_copies_per_step", value=after / steps, unit="ns")]
    return _finding(context, "bulk_device_to_host", total, steps, [*evidence, *sampled_lines(inputs)])


def known_causes(context: Context, inputs: CauseInputs) -> Causes:
    """The known causes of CONTEXT's idle time, each claiming its own part of the budget (in this order: the
    copies and the allocator before the loops of launches, whose idle time per launch is what is left)."""
    claims: dict[Claim, float] = {}
    found = [bulk_device_to_host(context, inputs, claims), small_copies(context, inputs, claims),
             allocator_churn(context, inputs, claims), per_tensor_launches(context, inputs, claims)]
    steps = max(inputs.steps, 1)
    reads = dict(inputs.reads.iter_rows())
    taken = pl.DataFrame([(*key, ns) for key, ns in claims.items() if key[1] is not None], orient="row",
                         schema={"part": pl.String, "cpu_kind": pl.String, "cpu_name": pl.String, "_taken": pl.Float64})
    left = (inputs.activities.join(taken, on=["part", "cpu_kind", "cpu_name"], how="left", nulls_equal=True)
            .select("part", "cpu_kind", "cpu_name",
                    ((pl.col("total_ns") - pl.col("_taken").fill_null(0)) / steps).alias("per_step_ns"))
            .filter(pl.col("per_step_ns") > 0).sort(["per_step_ns", "part", "cpu_kind", "cpu_name"],
                                                    descending=[True, False, False, False]))
    return Causes(findings=[finding for finding in found if finding is not None], claims=claims,
                  budget=less(context.budget, claims), left=left, select_reads=float(reads.get(True, 0)) / steps,
                  scalar_reads=float(reads.get(False, 0)) / steps, lines=lines_of(inputs, SYNC_API),
                  sampled=sampled_lines(inputs), others=other_threads(inputs))


def other_threads(inputs: CauseInputs) -> list[Evidence]:
    """The time per step other threads of the steps' process spent making CUDA calls, then their top calls per step
    (queries left out); none where they made none."""
    steps = max(inputs.steps, 1)
    calls = inputs.others.filter(~pl.col("name").str.contains(QUERY_CALLS))
    if not calls.height:
        return []
    top = calls.sort(["calls", "name"], descending=[True, False]).head(TOP_OTHER_CALLS)
    return [Evidence(metric="other_threads_cuda_time_per_step", value=inputs.others_ns / steps, unit="ns"),
            *(Evidence(metric="other_threads_calls_per_step", value=count / steps, unit="count",
                       where=Where(kind="api", name=name)) for name, count in top.iter_rows())]


def named(findings: list[Finding | None], causes: Causes, syncs: pl.DataFrame) -> list[Finding | None]:
    """FINDINGS with what the known causes tell of the others: the sync finding's pattern (``mask_indexing``) and Python
    lines; the host activities in the launch gaps and untraced time no known cause explains (and its sampled lines)."""
    def top(parts: tuple[str, ...]) -> list[Evidence]:
        rows = causes.left.filter(pl.col("part").is_in(parts) & pl.col("cpu_kind").is_in(list(_METRICS))).head(
            TOP_EVIDENCE)
        return [Evidence(metric=_METRICS[kind][0], value=ns, unit="ns",
                         where=Where(kind=_METRICS[kind][1], name=name) if _METRICS[kind][1] else None)  # type: ignore[arg-type]
                for _, kind, name, ns in rows.iter_rows() if kind in _METRICS]

    masked = bool(syncs.filter(pl.col("range").str.contains(MASK_RANGE))["len"].sum()) if syncs.height else False
    out: list[Finding | None] = []
    for finding in findings:
        if finding is not None and finding.kind == "sync_wait":
            finding = finding.model_copy(update={"evidence": [*finding.evidence, *causes.lines]})
            if masked or (causes.select_reads and causes.select_reads >= causes.scalar_reads):
                finding = finding.model_copy(update={"subject": "mask_indexing", "evidence": [
                    *finding.evidence, Evidence(metric="reads_after_a_selection_per_step", value=causes.select_reads,
                                                unit="count", where=Where(kind="copy", name="Device-to-Host"))]})
        elif finding is not None and finding.kind == "launch_bound":
            shown = top(("launch_gap",))
            # Launches that fill the gaps are what a CUDA graph removes; any other call is a cause no advice fits.
            other = bool(shown) and shown[0].where is not None and not re.search(LAUNCH_API, shown[0].where.name)
            finding = finding.model_copy(update={"evidence": [*finding.evidence, *shown],
                                                 "subject": "unexplained" if other else finding.subject})
        elif finding is not None and finding.kind == "untraced_host":
            shown = [e for e in top(("gpu_idle",)) if e.metric != "untraced_host_per_step"]
            finding = finding.model_copy(update={"evidence": [*finding.evidence, *shown, *causes.sampled]})
            # The steps' thread waited in loss.backward() while autograd's thread launched the backward pass.
            idle = finding.saving.per_step_ns if finding.saving and finding.saving.per_step_ns else 0.0
            if causes.others and causes.others[0].value >= OTHER_THREADS_SHARE * idle:
                finding = finding.model_copy(update={"subject": "other_threads",
                                                     "evidence": [*finding.evidence, *causes.others]})
        out.append(finding)
    return out


def less(budget: StepBudget | None, claims: dict[Claim, float]) -> StepBudget | None:
    """BUDGET less CLAIMS, per part and per CPU activity: what the other findings read (the budget shown is whole)."""
    if budget is None or not claims:
        return budget
    by_part = {part: sum(ns for (claimed, _, _), ns in claims.items() if claimed == part) for part, _, _ in claims}
    steps = max(budget.steps, 1)

    def part_less(part: BudgetPart) -> BudgetPart:
        gone = min(by_part.get(part.part, 0.0), float(part.total_ns))
        if not gone:
            return part
        total = round(part.total_ns - gone)
        return part.model_copy(update={
            "total_ns": total, "per_step_mean_ns": total / steps,
            "per_step_p50_ns": part.per_step_p50_ns * (total / part.total_ns if part.total_ns else 0.0),
            "fraction": total / budget.wall_ns if budget.wall_ns else 0.0})

    def activity_less(activity: CpuActivity) -> CpuActivity:
        gone = min(claims.get((activity.part, activity.kind, activity.name), 0.0), float(activity.total_ns))
        total = round(activity.total_ns - gone)
        return activity.model_copy(update={"total_ns": total, "per_step_mean_ns": total / steps,
                                           "fraction": total / budget.wall_ns if budget.wall_ns else 0.0})

    activities = [left for left in map(activity_less, budget.idle_activities) if left.total_ns > 0]
    return budget.model_copy(update={"parts": [part_less(part) for part in budget.parts],
                                     "idle_activities": activities})
