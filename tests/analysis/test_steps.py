"""Steps of real captures: numbered NVTX families, warm-up, the kernel period without NVTX."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest
from analysis_helpers import FIXTURES
from capture_helpers import capture_cpu

import nsight_core
from nsight_core.analysis.codes import family_codes
from nsight_core.analysis.steps import (
    CaptureAsStep,
    FamilySteps,
    KernelPeriodSteps,
    NvtxGpuSteps,
    find_steps,
    nvtx_families,
)
from nsight_core.render.findings import steps_text

TRAINING = "h200-torch-mlp/training.nsys-rep"
TWO_STREAMS = "h200-two-streams/two_streams.nsys-rep"




def recorded_steps() -> pl.DataFrame:
    """The step_N rows of the training fixture's nvtx_pushpop_sum CSV, as nsys recorded them."""
    table = pl.read_csv(FIXTURES / "h200-torch-mlp" / "training_nvtx_pushpop_sum.csv")
    return table.filter(pl.col("Range").str.contains(r"^:?step_\d+$"))


def test_twenty_numbered_ranges_are_one_step_family(load: Callable[[str], Any]) -> None:
    analysis = nsight_core.analyze(load(TRAINING))
    steps = analysis.steps
    recorded = recorded_steps()
    # The ranges' own durations are the CPU's period; the family's are the GPU's (the loop does not sync).
    assert isinstance(steps, NvtxGpuSteps) and steps.mode == "nvtx-gpu" and steps.clock == "gpu"
    family = steps.family
    assert family.pattern == "step_{n}"
    assert family.count == recorded.height == 20
    assert steps.cpu_p50_ns == pytest.approx(float(recorded["Total Time (ns)"].median()))
    # The GPU windows tile the steps' GPU work: from step_0's first kernel to the end of step_19's last.
    trace = load(TRAINING)

    def launched_in(step: str) -> pl.DataFrame:
        span = trace.nvtx.filter(pl.col("name") == step).row(0, named=True)
        calls = trace.cuda_api.filter(pl.col("start_ns").is_between(span["start_ns"], span["end_ns"]))
        return trace.kernels.filter(pl.col("correlation_id").is_in(calls["correlation_id"].implode()))

    assert family.total_ns == launched_in("step_19")["end_ns"].max() - launched_in("step_0")["start_ns"].min()
    # The ranges end long before their kernels: 20 steps of ~1.3 ms on the CPU, ~2 ms on the GPU.
    assert family.p50_ns > 1.4 * steps.cpu_p50_ns
    assert family.min_ns <= family.p50_ns <= family.p95_ns <= family.max_ns


def test_the_first_step_is_a_warm_up_outlier(load: Callable[[str], Any]) -> None:
    analysis = nsight_core.analyze(load(TRAINING))
    assert analysis.steps.warmup and isinstance(analysis.steps, FamilySteps)
    family = analysis.steps.family
    assert family.first_ns > 1.5 * family.p50_ns
    warmup = [finding for finding in analysis.findings if finding.kind == "warmup"]
    assert len(warmup) == 1 and warmup[0].saving is not None
    assert warmup[0].saving.total_ns == pytest.approx(analysis.steps.warmup_excess_ns)


def test_without_nvtx_the_kernel_period_gives_the_steps(load: Callable[[str], Any]) -> None:
    trace = load(TRAINING)
    stats, steps = find_steps(trace.nvtx.clear(), trace.kernels)
    assert isinstance(stats, KernelPeriodSteps) and stats.mode == "kernel-period"
    assert stats.family.count == 20 == steps.height
    assert stats.kernels_per_period * 20 <= trace.kernels.height
    assert steps["start_ns"].is_sorted() and (steps["end_ns"] > steps["start_ns"]).all()
    # Each step starts with the anchor kernel, which the steps' line names by its function: no return type,
    # namespaces (an anonymous one here: `at::native::<unnamed>::`), template or parameters.
    first = trace.kernels.filter(pl.col("start_ns") == steps["start_ns"][0])["name"].to_list()
    assert stats.anchor_kernel in first
    assert stats.anchor_kernel.startswith("void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<")
    assert "(kernel-period, each from kernel distribution_elementwise_grid_stride_kernel): p50" in steps_text(stats)


def test_without_nvtx_and_one_kernel_name_it_says_it_cannot_tell(load: Callable[[str], Any]) -> None:
    trace = load(TWO_STREAMS)
    stats, steps = find_steps(trace.nvtx.clear(), trace.kernels)
    assert isinstance(stats, CaptureAsStep) and stats.mode == "capture-as-one-step" and steps.height == 0
    assert "same name" in stats.reason


MODE_FIELDS = {"nvtx-gpu": {"family", "cpu_p50_ns", "cpu_p95_ns", "bound", "estimated_p50_ns"},
               "kernel-period": {"family", "kernels_per_period", "anchor_kernel"},
               "capture-as-one-step": {"reason"}}


@pytest.mark.parametrize(("capture", "dropped", "mode"), [
    (TRAINING, (), NvtxGpuSteps), (TRAINING, ("nvtx",), KernelPeriodSteps),
    (TWO_STREAMS, ("nvtx",), CaptureAsStep)], ids=["nvtx-gpu", "kernel-period", "capture-as-one-step"])
def test_each_mode_of_finding_steps_carries_its_own_fields(capture: str, dropped: tuple[str, ...], mode: type,
                                                            load: Callable[[str], Any]) -> None:
    """The whole analysis states how its steps were found as one model per mode; its JSON holds that mode's fields
    and no other's, and reads back as the same model."""
    trace = load(capture)
    frames = {name: getattr(trace, name).clear() if name in dropped else getattr(trace, name)
              for name in ("kernels", "memcpy", "memset", "cuda_api", "nvtx", "nvtx_marks", "osrt", "window")}
    analysis = nsight_core.analyze(SimpleNamespace(**frames))
    assert isinstance(analysis.steps, mode)
    payload = analysis.model_dump(mode="json")["steps"]
    common = {"mode", "warmup", "warmup_excess_ns", "trend", "trend_ns_per_step", "candidates"}
    assert set(payload) == common | MODE_FIELDS[payload["mode"]]
    assert nsight_core.Analysis.model_validate(analysis.model_dump()).steps == analysis.steps


@pytest.mark.nsys
def test_nested_numbered_ranges_on_the_cpu(tmp_path: Path) -> None:
    """`epoch3/step_7`-style names across epochs are one family; children keep their own self time."""
    report = capture_cpu(tmp_path, """
        for epoch in range(2):
            for i in range(4):
                with nvtx.annotate(f"epoch{epoch}/step_{i}"):
                    with nvtx.annotate("forward"):
                        time.sleep(0.004)
                    time.sleep(0.002)
    """)
    analysis = nsight_core.analyze(nsight_core.load_trace(report))
    assert isinstance(analysis.steps, FamilySteps)
    family = analysis.steps.family
    assert family.pattern == "epoch{n}/step_{n}" and family.count == 8
    ranges = {r.pattern: r for r in analysis.ranges}
    assert ranges["forward"].count == 8
    step, forward = ranges["epoch{n}/step_{n}"], ranges["forward"]
    assert step.self_ns == step.summed_ns - forward.summed_ns
    assert step.self_ns >= 8 * 2e6 * 0.95 and forward.self_ns >= 8 * 4e6 * 0.95
    assert forward.self_ns == forward.summed_ns, "a range without children is all self time"


@pytest.mark.nsys
def test_one_name_pattern_on_two_threads_and_in_two_domains_is_three_families(tmp_path: Path) -> None:
    """A family is (pattern, domain, thread) for steps, (pattern, domain) for self times: none is merged."""
    report = capture_cpu(tmp_path, """
        import threading
        def worker():
            for i in range(3):
                with nvtx.annotate(f"step_{i}"):
                    time.sleep(0.002)
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        for i in range(4):
            with nvtx.annotate(f"step_{i}"):
                time.sleep(0.001)
        for i in range(2):
            with nvtx.annotate(f"step_{i}", domain="data"):
                time.sleep(0.001)
    """)
    analysis = nsight_core.analyze(nsight_core.load_trace(report))
    steps = [(family.pattern, family.domain, family.count) for family in analysis.steps.candidates]
    assert sorted(steps) == [("step_{n}", "", 3), ("step_{n}", "", 4), ("step_{n}", "data", 2)]
    threads = {family.count: family.thread for family in analysis.steps.candidates}
    assert threads[3] != threads[4] == threads[2], "the worker's ranges are on a thread of their own"
    ranges = {(family.pattern, family.domain): family.count for family in analysis.ranges}
    assert {key: count for key, count in ranges.items() if key[0] == "step_{n}"} == {("step_{n}", ""): 7,
                                                                                   ("step_{n}", "data"): 2}


def test_families_stay_apart_when_their_key_needs_64_bits() -> None:
    """70,000 names on 70,000 threads: 4.9e9 (family, thread) pairs do not fit a 32-bit key, and none may merge."""
    count = 70_000
    letters = pl.int_range(count, eager=True)
    names = pl.Series(["".join(chr(97 + i // 26**k % 26) for k in range(4)) for i in range(count)])  # no digits
    nvtx = pl.DataFrame({
        "start_ns": pl.int_range(2 * count, eager=True) * 10, "end_ns": pl.int_range(2 * count, eager=True) * 10 + 5,
        "name": pl.concat([names, names]), "domain": [""] * (2 * count),
        "thread": pl.concat([letters * 7 + 1, letters * 7 + 1]), "depth": [0] * (2 * count)})
    families = nvtx_families(nvtx, family_codes(nvtx, "name"))
    assert families.height == count and (families["count"] == 2).all()
    paired = dict(zip(names.to_list(), (letters * 7 + 1).to_list(), strict=True))
    assert all(paired[pattern] == thread for pattern, thread in families.select("pattern", "thread").iter_rows())
