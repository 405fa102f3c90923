"""The tracing-cost calibration a region runs as it starts (nsight_core.calibration) never initialises CUDA: it runs
only where the program already did (the GPU recordings of tests/fixtures/h100-fix-pairs-2025.tar.xz show it at work)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from fixture_sets import unpacked

import nsight_core
from nsight_core import calibration
from nsight_core.analysis.steps import KernelPeriodSteps
from nsight_core.marks import CALIBRATION_RANGE
from nsight_core.stats.load import stats_of_trace
from nsight_core.trace.export import ExportChoice
from nsight_core.trace.model import Trace
from nsight_core.trace.spill import SpilledTables
from nsight_core.trace.tables import SqliteTables

STREAMED = ExportChoice(kind="sqlite", streamed=True, reason="large", trace_bytes=0)


def test_a_program_whose_torch_has_not_started_cuda_is_not_calibrated() -> None:
    torch = pytest.importorskip("torch")
    assert calibration.before_start(("cuda", "nvtx")) is None
    calibration.after_start(None)  # nothing to finish, nothing raised
    assert not torch.cuda.is_initialized()


def test_a_capture_without_cuda_traced_is_not_calibrated() -> None:
    assert calibration.before_start(("nvtx", "osrt")) is None


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_the_reports_leave_out_the_calibration_burst(streamed: bool, tmp_path: Path) -> None:
    """small_step's fixed twin, a region recorded on an H100 with nsys 2025.3: its calibration burst (1,500 empty
    kernels, each with a cudaLaunchKernel and a cuKernelGetName, in the range `nsight: calibration`) is nsight's own
    work. The reports show the program's: 19 launches a step over 20 steps, the one synchronise after its steps, no
    spin_kernel and no calibration range, in the reports and the range table; read whole or streamed from disk alike."""
    source = unpacked("h100-pairs-2025") / "small_step-fixed.sqlite"
    copy = tmp_path / source.name
    shutil.copyfile(source, copy)
    trace = Trace(SpilledTables(SqliteTables(copy), STREAMED)) if streamed else nsight_core.load_trace(copy)
    recorded = nsight_core.load_trace(source).cuda_api.filter(pl.col("name") == "cudaLaunchKernel").height
    stats = stats_of_trace(trace)
    calls = {row.name: row.instances for row in stats.api_calls}
    assert recorded == 1_880 and calls["cudaLaunchKernel"] == calls["cuKernelGetName"] == 380
    assert calls["cudaDeviceSynchronize"] == 1
    assert not [row.name for row in stats.kernels if "spin_kernel" in row.name]
    assert sum(row.instances for row in stats.kernels) == 660
    ranges = {row.name for row in stats.nvtx_ranges}
    assert "step_0" in ranges and CALIBRATION_RANGE not in ranges
    families = {family.pattern for family in nsight_core.analyze(trace).ranges}
    assert "step_{n}" in families and CALIBRATION_RANGE not in families


def test_a_region_without_step_ranges_finds_its_steps_after_the_calibration(tmp_path: Path) -> None:
    """small_step's problem (a region on an H100, nsys 2025.3, recorded without the `nvtx` package, so without the
    region's own marks) with its step ranges taken out: the user's window starts after the calibration, whose 1,500
    launches of one kernel would otherwise be the sequence's first repeating kernel (no period to cut into steps). The
    steps are the kernel sequence's period: 19 of the 20 recorded (its anchor kernel runs mid-step, and the period
    from the last one is cut by the capture's end)."""
    copy = shutil.copyfile(unpacked("h100-pairs-2025") / "small_step-problem.sqlite", tmp_path / "no_steps.sqlite")
    with sqlite3.connect(copy) as db:
        db.execute("DELETE FROM NVTX_EVENTS WHERE coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) "
                   "LIKE 'step_%'")
    trace = nsight_core.load_trace(copy)
    analysis = nsight_core.analyze(trace)
    burst = trace.nvtx.filter(pl.col("name") == CALIBRATION_RANGE)
    assert analysis.window.source == "events" and analysis.window.start_ns > burst["end_ns"].max()
    assert isinstance(analysis.steps, KernelPeriodSteps) and analysis.steps.family.count == 19
