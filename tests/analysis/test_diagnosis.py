"""The diagnosis fixture (tests/fixtures/README.md): every injected problem is found, with its saving
within 30 % of what was injected; a clean run raises no warning."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
import pytest
from analysis_helpers import FIXTURES

import nsight_core
from nsight_core.analysis.findings import NOMINAL_PINNED_PCIE5_BYTES_PER_S
from nsight_core.analysis.steps import FamilySteps
from nsight_core.render.findings import finding_title

DIAGNOSIS = "h200-diagnosis/diagnosis.nsys-rep"
STEPS = 12
SLEEP_NS = 20e6
TINY_KERNELS = 200
COPY_BYTES = 64 << 20




@pytest.fixture(scope="module")
def analysis(load: Callable[[str], Any]) -> nsight_core.Analysis:
    return nsight_core.analyze(load(DIAGNOSIS))


def _one(analysis: nsight_core.Analysis, kind: str) -> Any:
    found = [f for f in analysis.findings if f.kind == kind]
    assert len(found) == 1, [f.kind for f in analysis.findings]
    return found[0]


def _evidence(finding: Any, metric: str) -> float:
    return next(e.value for e in finding.evidence if e.metric == metric)


def test_the_warm_up_step_is_found(analysis: nsight_core.Analysis) -> None:
    recorded = pl.read_csv(FIXTURES / "h200-diagnosis" / "diagnosis_nvtx_pushpop_sum.csv")
    first = recorded.filter(pl.col("Range") == "step_0")["Total Time (ns)"][0]
    assert isinstance(analysis.steps, FamilySteps) and analysis.steps.family.count == STEPS
    finding = _one(analysis, "warmup")
    # The loop syncs every step, so the GPU's first step (read on its clock) is the range's, give or take a launch.
    assert _evidence(finding, "first_step") == analysis.steps.family.first_ns == pytest.approx(first, rel=0.01)
    assert analysis.budget.steps == STEPS - 1, "the budget is of the steady steps"


def test_the_pageable_copy_is_found_with_its_cost(analysis: nsight_core.Analysis) -> None:
    recorded = pl.read_csv(FIXTURES / "h200-diagnosis" / "diagnosis_cuda_gpu_mem_time_sum.csv")
    big_copy_ns = recorded["Total Time (ns)"][0] - recorded["Min (ns)"][0] * STEPS  # less the .item() reads
    injected = big_copy_ns / STEPS - COPY_BYTES / NOMINAL_PINNED_PCIE5_BYTES_PER_S * 1e9
    finding = _one(analysis, "pageable_copy")
    assert _evidence(finding, "copies") == STEPS and _evidence(finding, "largest_copy") == COPY_BYTES
    assert finding.saving is not None and finding.saving.per_step_ns == pytest.approx(injected, rel=0.3)
    assert finding.severity == "critical"


def test_the_sleep_is_untraced_host_time_worth_twenty_ms_per_step(analysis: nsight_core.Analysis) -> None:
    # No range marks the sleep, and no CUDA call runs in it: host work nothing traced, not dispatch.
    finding = _one(analysis, "untraced_host")
    assert finding.saving is not None and finding.saving.per_step_ns == pytest.approx(SLEEP_NS, rel=0.3)
    assert finding.severity in {"warning", "critical"}


def test_the_item_sync_is_found_every_step(analysis: nsight_core.Analysis) -> None:
    finding = _one(analysis, "sync_wait")
    assert _evidence(finding, "small_device_to_host_copies_per_step") >= 1
    assert ".item()" in finding_title(finding)
    assert finding.saving is not None and finding.saving.per_step_ns is not None
    assert 0 < finding.saving.per_step_ns < SLEEP_NS, "the sync owns its stall, not the sleep after it"


def test_the_tiny_kernels_are_launch_bound(analysis: nsight_core.Analysis) -> None:
    finding = _one(analysis, "launch_bound")
    assert _evidence(finding, "kernels_per_step") >= TINY_KERNELS
    assert _evidence(finding, "kernel_duration_p50") < _evidence(finding, "launch_call_p50")
    assert finding.saving is not None and finding.saving.per_step_ns is not None
    gaps = _evidence(finding, "launch_gap_per_step_mean")
    assert finding.saving.per_step_ns == gaps == analysis.budget.part("launch_gap").per_step_mean_ns
    assert gaps < analysis.budget.wall_ns / analysis.budget.steps


def test_savings_never_exceed_the_step(analysis: nsight_core.Analysis) -> None:
    per_step = [f.saving.per_step_ns for f in analysis.findings if f.saving and f.saving.per_step_ns is not None]
    assert isinstance(analysis.steps, FamilySteps) and sum(per_step) <= analysis.budget.wall_ns / analysis.budget.steps


@pytest.mark.parametrize("capture", ["h200-two-streams/two_streams.nsys-rep", "h200-torch-mlp/evaluation.nsys-rep"])
def test_a_clean_run_raises_no_warning(load: Callable[[str], Any], capture: str) -> None:
    """Nothing to fix in how they run; their matmuls are FP32 on an H200, which tensor cores (TF32) would speed up."""
    findings = nsight_core.analyze(load(capture)).findings
    assert [f.kind for f in findings if f.severity != "info"] == ["fp32_matmul"]
