"""Known causes (analysis/causes.py) and the host's time named by its calls (analysis/host_time.py), on real
captures and on frames made here: what the fix pairs (test_fix_pairs.py) do not cover."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
import pytest
from fixture_sets import unpacked

from nsight_core.analysis.budget import BudgetPart, CpuActivity, StepBudget
from nsight_core.analysis.cause_inputs import (
    COPY_COLUMNS,
    LINE_COLUMNS,
    LOOP_COLUMNS,
    OTHER_COLUMNS,
    READ_COLUMNS,
    SAMPLE_COLUMNS,
    loops_in,
)
from nsight_core.analysis.causes import LOOP_MIN_LAUNCHES, TENSORS_PER_LAUNCH, CauseInputs, known_causes, less
from nsight_core.analysis.finding_model import Context

OTHER_CAPTURES = ["h200-diagnosis/diagnosis.nsys-rep", "h200-torch-mlp/training.nsys-rep",
                  "h200-two-streams/two_streams.nsys-rep", "h200-2025-process/nsight-0013a405.sqlite",
                  "h200-2025-graph-node/graph_node.sqlite", "h200-quick-start-cuda13-incomplete/train.nsys-rep",
                  "h200-ddp-cuda13-incomplete/train_ddp.nsys-rep",
                  str(unpacked("h200-fix-pairs-v2-2025") / "python-backtrace-2025" / "small_step-backtrace.sqlite")]
"""The fixtures beside the fix pairs (test_fix_pairs.py checks those)."""


@pytest.mark.parametrize("capture", OTHER_CAPTURES)
def test_no_undivided_dispatch_time_on_any_fixture(capture: str, load: Callable[[str], Any]) -> None:
    """The host's time while the GPU waited is named by the call it was in or led to, a range, an OS call, or is
    untraced: no CPU activity is dispatch (or a CUDA call) without a call's name."""
    import nsight_core

    activities = nsight_core.analyze(load(capture)).budget.idle_activities
    assert [(a.kind, a.fraction) for a in activities if a.kind in ("dispatch", "cuda_api") and not a.name] == []


def _kernels(names: list[str], ns: int = 1_000) -> pl.DataFrame:
    starts = [index * 10_000 for index in range(len(names))]
    return pl.DataFrame({"start_ns": starts, "end_ns": [start + ns for start in starts], "stream": [7] * len(names),
                         "name": names, "correlation_id": list(range(len(names)))})


def test_a_loop_of_small_kernels_between_gemms_is_found_and_what_foreach_keeps() -> None:
    """Two steps: a GEMM, then 2 x 150 small kernels of two names in a loop, then a GEMM; the second step's run of
    small kernels is short (a forward pass: no loop). Each kernel's launch call took 3 µs, 4 µs after the last: the
    host spent the loop's span issuing it, shared by its launches."""
    loop = ["gemm_a", *(["add_kernel", "mul_kernel"] * 150), "gemm_b"]
    forward = ["gemm_a", "relu", "gemm_b", "relu", "add_kernel"]
    kernels = _kernels(loop + forward)
    windows = pl.DataFrame({"step": [0, 1], "start_ns": [0, len(loop) * 10_000],
                            "end_ns": [len(loop) * 10_000, (len(loop) + len(forward)) * 10_000]})
    calls = kernels.select("correlation_id", start_ns=pl.col("correlation_id") * 7_000,
                           end_ns=pl.col("correlation_id") * 7_000 + 3_000)
    found = dict(loops_in(kernels, windows, calls).select("name", pl.struct("launches", "kept", "timed", "host_ns"))
                 .iter_rows())
    per_launch = -(-150 // TENSORS_PER_LAUNCH)
    span = 300 * 7_000 + 3_000 - 1 * 7_000  # the first looped launch (id 1) to the end of the last (id 300)
    assert found == {"add_kernel": {"launches": 150, "kept": per_launch, "timed": 150, "host_ns": span // 2},
                     "mul_kernel": {"launches": 150, "kept": per_launch, "timed": 150, "host_ns": span // 2}}
    assert LOOP_MIN_LAUNCHES <= 300


def test_what_a_cause_claims_leaves_the_budget_the_others_read() -> None:
    """A cause claims 3 of a step's 4 ms of launch gaps and an activity's 2 ms: the others read 1 ms of launch gaps and
    no time before that call; the parts left still add up to less than the wall (what was claimed is gone)."""
    parts = [BudgetPart(part=p, total_ns=t, per_step_p50_ns=t, per_step_mean_ns=t, fraction=t / 10_000_000)
             for p, t in (("compute", 6_000_000), ("launch_gap", 4_000_000))]
    activity = CpuActivity(part="launch_gap", kind="dispatch", name="cudaMalloc", total_ns=2_000_000,
                           per_step_mean_ns=2_000_000, fraction=0.2)
    budget = StepBudget(steps=1, wall_ns=10_000_000, parts=parts, idle_activities=[activity], thread=1)
    left = less(budget, {("launch_gap", "dispatch", "cudaMalloc"): 2_000_000, ("launch_gap", "cuda_api", "cudaFree"):
                         1_000_000})
    assert left is not None
    assert left.part("launch_gap").total_ns == 1_000_000 and left.part("compute").total_ns == 6_000_000
    assert left.idle_activities == []


def test_a_checkpoint_and_many_small_copies_never_claim_one_copys_time_twice() -> None:
    """One step: 64 MiB copied to the host (a checkpoint: 30 ms, then 5 ms of host time the GPU waits on) and 64 small
    copies to the device (2 ms). The copies' 10 ms of exposed time and their calls' 20 ms are there once: both findings
    together save at most what the step's copy time and the host's time after the checkpoint are."""
    wall = 100_000_000
    parts = [BudgetPart(part=p, total_ns=t, per_step_p50_ns=t, per_step_mean_ns=t, fraction=t / wall)
             for p, t in (("compute", 65_000_000), ("exposed_copy", 10_000_000), ("gpu_idle", 25_000_000))]
    activities = pl.DataFrame({"part": ["gpu_idle", "gpu_idle"], "cpu_kind": ["cuda_api", "untraced"],
                               "cpu_name": ["cudaMemcpyAsync", ""], "total_ns": [20_000_000, 5_000_000]})
    inputs = CauseInputs(
        steps=1, activities=activities,
        calls=pl.DataFrame({"name": ["cudaMemcpyAsync"], "calls": [65], "total_ns": [20_000_000]}),
        copies=pl.DataFrame({"direction": ["Device-to-Host", "Host-to-Device"], "small": [False, True],
                             "copies": [1, 64], "bytes": [64 << 20, 64 * 4096], "ns": [30_000_000, 2_000_000]}),
        loops=pl.DataFrame(schema={"name": pl.String, "launches": pl.Int64, "kept": pl.Int64}),
        reads=pl.DataFrame(schema={"select": pl.Boolean, "reads": pl.Int64}), after_bulk_ns=5_000_000,
        others=pl.DataFrame(schema=OTHER_COLUMNS), others_ns=0.0,
        per_call_ns=0.0, lines=pl.DataFrame(schema={"name": pl.String, "place": pl.String, "function": pl.String,
                                                    "calls": pl.Int64}),
        samples=pl.DataFrame(schema={"place": pl.String, "function": pl.String, "host_ns": pl.Float64}))
    budget = StepBudget(steps=1, wall_ns=wall, parts=parts, idle_activities=[], thread=1)
    context = Context.model_construct(budget=budget, window_ns=wall, step_p50_ns=float(wall))

    causes = known_causes(context, inputs)
    found = {finding.kind: finding.saving.per_step_ns for finding in causes.findings}
    assert set(found) == {"bulk_device_to_host", "small_copies"}
    assert sum(found.values()) <= 10_000_000 + 20_000_000 + 5_000_000  # exposed copies, copy calls, host after
    assert causes.claims[("exposed_copy", None, None)] <= 10_000_000
    assert causes.claims[("gpu_idle", "cuda_api", "cudaMemcpyAsync")] <= 20_000_000


def test_a_loop_of_launches_saves_at_most_the_host_time_spent_issuing_it() -> None:
    """One 10 ms step of 1,000 launches whose dispatch held the GPU idle 9 ms in all (a model's layers cost more per
    launch than an optimizer's loop): 800 of them are a loop over tensors that the host issued in 4 ms. A multi-tensor
    kernel removes the loop's launches and the host time they took, not 800 / 1,000 of the step's whole dispatch."""
    wall = 10_000_000
    parts = [BudgetPart(part=p, total_ns=t, per_step_p50_ns=t, per_step_mean_ns=t, fraction=t / wall)
             for p, t in (("compute", 1_000_000), ("gpu_idle", 9_000_000))]
    kept = -(-800 // TENSORS_PER_LAUNCH)
    inputs = CauseInputs(
        steps=1, activities=pl.DataFrame({"part": ["gpu_idle"], "cpu_kind": ["dispatch"],
                                          "cpu_name": ["cudaLaunchKernel"], "total_ns": [9_000_000]}),
        calls=pl.DataFrame({"name": ["cudaLaunchKernel"], "calls": [1_000], "total_ns": [3_000_000]}),
        copies=pl.DataFrame(schema=COPY_COLUMNS),
        loops=pl.DataFrame({"name": ["add_kernel"], "launches": [800], "kept": [kept], "timed": [800],
                            "host_ns": [4_000_000]}, schema=LOOP_COLUMNS),
        reads=pl.DataFrame(schema=READ_COLUMNS), after_bulk_ns=0.0, others=pl.DataFrame(schema=OTHER_COLUMNS),
        others_ns=0.0, per_call_ns=0.0,
        lines=pl.DataFrame(schema=LINE_COLUMNS), samples=pl.DataFrame(schema=SAMPLE_COLUMNS))
    budget = StepBudget(steps=1, wall_ns=wall, parts=parts, idle_activities=[], thread=1)
    context = Context.model_construct(budget=budget, window_ns=wall, step_p50_ns=float(wall))

    found = {finding.kind: finding for finding in known_causes(context, inputs).findings}
    assert found["per_tensor_launches"].saving.per_step_ns == pytest.approx((800 - kept) / 800 * 4_000_000)
