"""Findings of real captures: the problem is found where it is, with a saving derived from measurements."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from analysis_helpers import FIXTURES
from capture_helpers import capture_cpu, sleepy_steps

import nsight_core
from nsight_core.analysis.findings import NOMINAL_PINNED_PCIE5_BYTES_PER_S
from nsight_core.marks import START_SETTLE_SECONDS
from nsight_core.render.findings import finding_suggestion, finding_title

MIB = 1 << 20




def _evidence(finding: Any, metric: str) -> float:
    return next(e.value for e in finding.evidence if e.metric == metric)


def test_the_64_mib_pageable_device_to_host_copy_is_found_with_its_bandwidth(load: Callable[[str], Any]) -> None:
    analysis = nsight_core.analyze(load("h200-torch-mlp/training.nsys-rep"))
    recorded = pl.read_csv(FIXTURES / "h200-torch-mlp" / "training_cuda_gpu_mem_time_sum.csv").filter(
        pl.col("Operation") == "[CUDA memcpy Device-to-Host]")
    copy_ns = recorded["Total Time (ns)"][0]
    found = [f for f in analysis.findings if f.kind == "pageable_copy" and "Device-to-Host" in finding_title(f)]
    assert len(found) == 1
    finding = found[0]
    assert _evidence(finding, "largest_copy") == 64 * MIB
    assert _evidence(finding, "copy_time") == copy_ns
    achieved = _evidence(finding, "achieved_bandwidth")
    assert achieved == pytest.approx(64 * MIB / copy_ns * 1e9)
    assert 1.4e9 < achieved < 1.8e9
    assert finding.saving is not None
    assert finding.severity == "warning", "44 % of the capture: worth fixing, but not half of it (critical)"
    assert finding.saving.total_ns == pytest.approx(copy_ns - 64 * MIB / NOMINAL_PINNED_PCIE5_BYTES_PER_S * 1e9)
    assert finding.saving.per_step_ns is None, "the copy ran after the steps, not in them"


def test_findings_are_data_with_units(load: Callable[[str], Any]) -> None:
    analysis = nsight_core.analyze(load("h200-torch-mlp/training.nsys-rep"))
    assert analysis.findings
    for finding in analysis.findings:
        title = finding_title(finding)
        assert "\n" not in title and not any(ch.isdigit() for ch in title)
        assert finding_suggestion(finding) and finding.evidence
    dumped = analysis.model_dump(mode="json")
    assert dumped["findings"][0]["evidence"][0]["unit"] in {"ns", "bytes", "bytes_per_s", "count", "fraction"}


@pytest.mark.nsys
def test_the_settle_wait_is_not_the_users_sleep(tmp_path: Path) -> None:
    """With osrt, the profiler's 0.25 s settle sleep is left out of the user's window and numbers.

    The region marks where the user's block begins and ends (nsight_core.marks): "collection live"
    comes after the settle sleep. (On a loaded machine osrt may start recording after that sleep
    began and miss it, so the sleep itself is not required to be in the trace.)"""
    steps, sleep_s = 5, 0.004
    trace = nsight_core.load_trace(capture_cpu(tmp_path, sleepy_steps(steps, sleep_s, 0.001)))
    own = trace.nvtx_marks.filter(pl.col("domain") == "nsight")
    assert own["name"].to_list() == ["collection live", "collection stopping"]
    live_ns = int(own["time_ns"][0])
    analysis = nsight_core.analyze(trace)
    assert analysis.window.source == "marks"
    assert analysis.window.start_ns >= live_ns
    assert analysis.window.span_ns < START_SETTLE_SECONDS * 1e9
    sleeps = trace.osrt.filter(pl.col("name") == "clock_nanosleep")
    settle = sleeps.filter(pl.col("end_ns") <= live_ns)
    assert settle.is_empty() or int(settle["end_ns"].max()) <= analysis.window.start_ns
    window = analysis.window
    overlap = (pl.min_horizontal("end_ns", pl.lit(window.end_ns))
               - pl.max_horizontal("start_ns", pl.lit(window.start_ns))).clip(lower_bound=0)
    in_window = sleeps.select(overlap.sum()).item()
    sleeping = next(a for a in analysis.budget.idle_activities if a.name == "clock_nanosleep")
    assert 0 < sleeping.total_ns <= in_window  # the user's sleeps (osrt under load may miss one), not the settle
