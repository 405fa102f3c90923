"""Findings, steps and the step budget as words and numbers (terminal text; the page reuses the phrases): where the
analysis' data become "≈ 38.2 ms per step, 61 % of the step"."""

from __future__ import annotations

from nsight_core.analysis.budget import StepBudget
from nsight_core.analysis.completeness import Completeness
from nsight_core.analysis.finding_model import Evidence, Finding, Saving, Where
from nsight_core.analysis.findings import MIN_STEPS
from nsight_core.analysis.kernels import short_name
from nsight_core.analysis.overhead import release_year
from nsight_core.analysis.result import Analysis, Coverage
from nsight_core.analysis.steps import CaptureAsStep, KernelPeriodSteps, NvtxGpuSteps, StepStats
from nsight_core.render.text import printable
from nsight_core.units import duration as _ns
from nsight_core.units import quantity

PART_LABELS = {"compute": "GPU compute", "exposed_comm": "exposed communication (NCCL)",
               "exposed_copy": "exposed copies", "sync_wait": "sync waits", "launch_gap": "launch gaps",
               "gpu_idle": "GPU idle", "stream_wait": "waits on other streams",
               "profiler_overhead": "profiler overhead (nsys tracing)"}
CPU_LABELS = {"cuda_api": "in CUDA call", "osrt": "in OS call", "nvtx": "in range", "untraced": "untraced CPU time",
              "dispatch": "framework time before CUDA call", "other_threads": "waiting on other threads' CUDA call"}


def saving_text(saving: Saving) -> str:
    """'≈ 38.2 ms per step, 61.0 % of the step' or '≈ 40.0 ms, 42.3 % of the capture'."""
    if saving.per_step_ns is not None and saving.step_fraction is not None:
        return f"≈ {_ns(saving.per_step_ns)} per step, {saving.step_fraction:.1%} of the step"
    return f"≈ {_ns(saving.total_ns)}, {saving.capture_fraction:.1%} of the capture"


def where_text(where: Where) -> str:
    """Where a number was measured: 'step 3', 'Device-to-Host copy at 547.331 ms', 'range data'."""
    own_step = where.kind == "step" and where.step is not None
    parts = (f"step {where.step}" + (f" ({where.name})" if where.name else "") if own_step
             else f"{where.kind} {where.name}" if where.name else "",
             f"in step {where.step}" if where.step is not None and not own_step else "",
             f"at {_ns(where.start_ns)}" if where.start_ns is not None else "")
    return " ".join(part for part in parts if part)


def evidence_text(evidence: Evidence) -> str:
    """'achieved bandwidth: 1.57 GB/s (copy Device-to-Host at 547.331 ms)'."""
    place = where_text(evidence.where) if evidence.where else ""
    return f"{evidence.metric.replace('_', ' ')}: {quantity(evidence.value, evidence.unit)}" + \
        (f" ({place})" if place else "")


TITLES: dict[str, str] = {
    "sync_wait": "Synchronising calls drain the GPU's queue every step",
    "sync_wait/scalar_reads": "Reading scalars back (.item()-style device-to-host syncs) drains the GPU's queue "
                              "every step",
    "host_work": "The GPU waits while the host runs the ranges below between steps",
    "untraced_host": "The GPU waits on host time outside every NVTX range",
    "untraced_host/other_threads": "The GPU waits while other threads of the process issue its work (autograd's "
                                   "backward pass), and the step's thread waits on them",
    "allocator_churn": "The GPU waits while the host allocates and frees device memory every step",
    "per_tensor_launches": "The same small kernels are launched once per tensor, in loops of hundreds a step",
    "small_copies": "Many small host-to-device copies a step, one at a time",
    "bulk_device_to_host": "Tens of megabytes are copied to the host every step, then handled on the host",
    "launch_bound/unexplained": "The GPU waits on the host, which spends these gaps in the calls below",
    "sync_wait/mask_indexing": "Boolean-mask indexing (or nonzero, unique) makes the host wait for the GPU every "
                               "step",
    "sync_wait/pageable_transfer": "A copy between pageable host memory and the GPU makes the host wait for the "
                                   "GPU every step",
    "stream_wait": "Queued GPU work waits on another stream, an event or a copy",
    "launch_bound": "The GPU waits on the host's dispatch: launches and framework time between kernels",
    "pageable_copy": "{subject} copies use pageable host memory",
    "exposed_copy": "Memory copies run while no kernel does",
    "exposed_comm": "Communication (NCCL) is not hidden behind compute",
    "device_bound": "The loop is device-bound: the GPU is busy through its steps",
    "fp32_matmul": "Single-precision matrix multiplies run without tensor cores",
    "warmup": "The first step is a warm-up outlier",
    "no_steps": "No repeating steps found: the budget covers the whole capture",
    "too_few_steps": "Too few steps to judge step-to-step variation",
}
"""Each finding kind's one-line title (no numbers: they are in the evidence and saving); KIND/SUBJECT first."""
SUGGESTIONS: dict[str, str] = {
    "sync_wait": "Keep step results on the GPU (accumulate the loss as a tensor) and read them back every N steps; "
                 "drop torch.cuda.synchronize() and blocking copies from the loop, so the host's next work overlaps "
                 "the GPU's.",
    "host_work": "Take this host work off the GPU's critical path: prefetch the next batch in background workers "
                 "(DataLoader num_workers>0, a loader thread or queue) and move logging or I/O off the step's thread.",
    "untraced_host": "Mark the host work between steps with NVTX ranges (flyteplugins.nsight.nvtx / nvtx.annotate) to "
                     "see what it is, or trace OS-runtime calls (trace=cuda,nvtx,osrt).",
    "untraced_host/other_threads": "Where their calls are launches, the backward pass is dispatch-bound: fewer, "
                                   "larger kernels (torch.compile), the step captured as a CUDA graph "
                                   "(torch.compile(mode='reduce-overhead')), or a larger batch. Where they are a "
                                   "loader's pin-memory thread, prefetch further ahead.",
    "stream_wait": "Check cross-stream dependencies (wait_stream, events, a copy on the default stream) that "
                   "serialise work the GPU could overlap.",
    "allocator_churn": "Let PyTorch's caching allocator keep its memory: drop torch.cuda.empty_cache() from the loop, "
                       "reuse buffers across steps (preallocate, out=), or set "
                       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so a growing step maps more memory instead "
                       "of freeing and allocating segments.",
    "per_tensor_launches": "Launch one kernel for many tensors: a foreach or fused optimizer (torch.optim.*(..., "
                           "foreach=True) or fused=True), torch._foreach_* over lists of tensors, or fuse a chain of "
                           "small ops (torch.compile).",
    "small_copies": "Stack the samples on the host and copy them once: torch.stack(samples) into a pinned buffer "
                    "(pin_memory=True, or DataLoader(pin_memory=True) with a collate that stacks), then "
                    ".to('cuda', non_blocking=True).",
    "bulk_device_to_host": "Copy and save the state less often (every N steps), or in the background: copy into "
                           "pinned buffers with non_blocking=True and write them from another thread (or use "
                           "torch.distributed.checkpoint's async save); keep metrics on the GPU.",
    "launch_bound": "Capture the step in a CUDA graph (torch.compile(mode='reduce-overhead') or torch.cuda.graphs), "
                    "fuse the small kernels, or give each launch more work (a larger batch).",
    "pageable_copy": "Use pinned host memory for these copies (tensor.pin_memory(), torch.empty(..., pin_memory=True) "
                     "or DataLoader(pin_memory=True)) and copy with non_blocking=True.",
    "exposed_copy": "Overlap the copies with compute: pinned memory and non_blocking=True on a side stream, or "
                    "prefetch the next batch while this one computes.",
    "exposed_comm": "Overlap gradient communication with backward: DDP buckets (bucket_cap_mb), no_sync() for "
                    "gradient accumulation, or FSDP prefetching.",
    "device_bound": "Speed up the kernels themselves: lower precision (bf16, TF32), fused kernels (torch.compile), "
                    "larger matrix shapes; the host is not what holds the step.",
    "fp32_matmul": "Allow TF32 (torch.backends.cuda.matmul.allow_tf32 = True, or "
                   "torch.set_float32_matmul_precision('high')) or train in bf16 autocast.",
    "warmup": "Leave the first step out of timings (or warm up before the profiled region); if start-up matters, "
              "cache compilation (torch.compile cache, cudnn.benchmark tuned once).",
    "no_steps": "Mark each training step with an NVTX range (nsight_core or nvtx: range('step_<n>')).",
    "too_few_steps": f"Profile at least {MIN_STEPS} steps (10 or more after the warm-up) for stable percentiles.",
    "fp32_matmul/host_bound": "Nothing to win yet: the GPU waits on the host's launches, so faster matrix "
                              "multiplies would only lengthen its gaps. Once the host keeps ahead, allow TF32 "
                              "(torch.set_float32_matmul_precision('high')) or bf16 autocast.",
    "launch_bound/unexplained": "No known cause fits: the evidence names the calls the host is in (or on its way to) "
                                "while the GPU waits, and their time per step. Find what makes them in the step's code "
                                "(nsight run --python-backtrace names the line of each slow CUDA call).",
    "sync_wait/mask_indexing": "Keep the shape fixed so the host need not read it: torch.where(mask, x, 0) with "
                               "sums over the mask instead of x[mask], masked reductions instead of nonzero(); or "
                               "move the selection after the step's other launches.",
    "sync_wait/pageable_transfer": "Copy from pinned memory without waiting: torch.tensor(values, "
                                   "pin_memory=True).to('cuda', non_blocking=True) instead of torch.tensor(values, "
                                   "device='cuda') or .to('cuda') of a pageable tensor; or build the tensor on the "
                                   "GPU, or once before the loop.",
    "sync_wait/scalar_reads": "Keep the value on the GPU: no .item(), float(t) or Python `if` on a tensor in the "
                              "step (torch.where for a branch); accumulate losses and metrics as tensors and read "
                              "them back every N steps.",
}
"""Each finding kind's one concrete change to make; KIND/SUBJECT first, where the subject names the cause better."""


def finding_title(finding: Finding) -> str:
    return _worded(TITLES, finding).format(subject=finding.subject)


def finding_suggestion(finding: Finding) -> str:
    """FINDING's suggestion: its subject's where there is one, else its kind's."""
    return _worded(SUGGESTIONS, finding)


def _worded(words: dict[str, str], finding: Finding) -> str:
    return words.get(f"{finding.kind}/{finding.subject}", words[finding.kind])


def finding_json(finding: Finding) -> dict[str, object]:
    """FINDING as JSON, with its title and suggestion worded: what `stats --json` and the page carry."""
    return {**finding.model_dump(mode="json"), "title": finding_title(finding),
            "suggestion": finding_suggestion(finding)}


def finding_lines(finding: Finding) -> list[str]:
    """A finding as a few lines: severity and title, the saving, the suggestion, the evidence."""
    saving = [f"  saving: {saving_text(finding.saving)}"] if finding.saving is not None else []
    return [f"[{finding.severity}] {finding_title(finding)}", *saving, f"  fix: {finding_suggestion(finding)}",
            *(f"  - {evidence_text(e)}" for e in finding.evidence)]


def steps_text(steps: StepStats) -> str:
    """One line about the steps: family, count, p50/p95/max, warm-up and trend; or why there are none."""
    if isinstance(steps, CaptureAsStep):
        return f"steps: none found ({steps.reason})"
    found, clock = "nvtx", ""
    match steps:
        case NvtxGpuSteps():
            clock = (f"; on the GPU's clock, {steps.bound}-bound (the ranges themselves: p50 {_ns(steps.cpu_p50_ns)}"
                     + (", the host runs ahead of the GPU)" if steps.bound == "device" else ")"))
        case KernelPeriodSteps():
            found = f"kernel-period, each from kernel {printable(short_name(steps.anchor_kernel))}"
    family = steps.family
    warmup = f", first step {_ns(family.first_ns)} (warm-up)" if steps.warmup else ""
    return (f"steps: {family.count} x {family.pattern} ({found}): p50 {_ns(family.p50_ns)}, "
            f"p95 {_ns(family.p95_ns)}, max {_ns(family.max_ns)}{warmup}, trend {steps.trend}{clock}")


def host_spell(slowdown: float) -> str:
    """What the region measured of the host's own speed across its start, in words (overhead.host_slowdown)."""
    return f"a loop with no CUDA call took {slowdown:.2f}x as long once collection was live"


def overhead_text(analysis: Analysis) -> str | None:
    """The step without the profiler, in one line ("p50 2.02 ms profiled; about 1.00 ms without the profiler
    (tracing added about 1.02 ms: 76 CUDA calls a step at 13.42 µs each, measured as the region started)"); None
    where it was not estimated."""
    steps, overhead = analysis.steps, analysis.overhead
    if overhead is None or not isinstance(steps, NvtxGpuSteps):
        return None
    # Where the cost was not measured, the estimate rests on a typical one: said, so a user can weigh it.
    release = release_year(overhead.nsys_version)
    basis = "measured as the region started" if overhead.calibrated else \
        f"the usual cost{f' for nsys {release}' if release else ''}, not measured in this process"
    # A host that changed speed by itself as the capture started: no cost per call explains that, so it is said.
    host = (f"; the host's own speed changed as the capture started ({host_spell(slowdown)}), so host-bound times "
            "here may not be the program's usual ones") if (slowdown := overhead.host_speed_change()) else ""
    return (f"p50 {_ns(steps.family.p50_ns)} profiled; about {_ns(steps.estimated_p50_ns)} without the profiler "
            f"(tracing added about {_ns(overhead.per_step_ns)}: {overhead.calls_per_step:,.0f} CUDA calls a step"
            f" at {_ns(overhead.per_call_ns)} each, {basis}){host}")


def coverage_text(coverage: Coverage) -> str:
    """What "What to fix" covers of the capture, in one line."""
    if coverage.scope == "capture_as_one_step":
        return "covers: the whole capture, as one step (no steps were found)"
    alone = "" if coverage.process is None else \
        (f", of process {coverage.process} alone (GPU {', '.join(map(str, coverage.gpus))}): the capture holds other "
         "processes' GPU work too")
    return f"covers: every step ({coverage.steps:,}), from the first to the last{alone}"


def budget_lines(budget: StepBudget) -> list[str]:
    """The budget parts per step with their shares, then what the CPU did while the GPU idled."""
    lines = [f"budget over {budget.steps} step{'s' if budget.steps != 1 else ''} ({_ns(budget.wall_ns)}):"]
    lines += [f"  {PART_LABELS[p.part]:<30} {_ns(p.per_step_mean_ns):>12} per step  {p.fraction:6.1%}"
              for p in budget.parts if p.total_ns]
    if budget.idle_activities:
        lines.append("  while the GPU idled, the CPU was:")
        lines += [f"    {CPU_LABELS[a.kind]} {a.name}".rstrip() + f": {_ns(a.per_step_mean_ns)} per step "
                  f"({PART_LABELS[a.part]})" for a in budget.idle_activities]
    return lines


def render_analysis(analysis: Analysis) -> str:
    """Steps, budget and findings of one capture as text ("What to fix" first)."""
    lines = ["== What to fix"]
    if analysis.savings_withheld:
        lines.append("(no savings: the trace is incomplete (" + ", ".join(analysis.savings_withheld).replace("_", " ")
                     + "), so time it lost would look like time to win; fix the recording first)")
    lines += [line for finding in analysis.findings for line in finding_lines(finding)] or ["nothing found"]
    lines += ["", steps_text(analysis.steps), *filter(None, [overhead_text(analysis)]),
              coverage_text(analysis.coverage), *budget_lines(analysis.budget)]
    return "\n".join(lines) + "\n"


def render_completeness(completeness: Completeness) -> str:
    """Nothing for a complete trace; otherwise a warning block to read before any number."""
    if completeness.complete:
        return ""
    lines = ["== WARNING: this trace is incomplete or suspect; the numbers below may miss part of what ran"]
    for warning in completeness.warnings:
        lines += [f"- {warning.message}", f"  cause: {warning.cause}", f"  fix: {warning.fix}"]
    lines += [f"- nsys said ({said.severity.lower()}{', lost data' if said.lost_data else ''}): {said.text}"
              for said in completeness.diagnostics]
    return "\n".join(lines) + "\n\n"
