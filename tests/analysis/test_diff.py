"""`nsight diff` as a CI gate: real captures and recorded CSVs, exit codes from a subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from analysis_helpers import FIXTURES
from capture_helpers import capture_cpu, sleepy_steps

import nsight_core
from nsight_core.cli import SLOWER_EXIT


def nsight_diff(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nsight_core.cli", "diff", *map(str, args)],
                          capture_output=True, text=True, timeout=240)


def recorded(tmp_path: Path, name: str, kernel_scale: float) -> Path:
    """The training fixture's recorded CSVs, kernel times scaled by KERNEL_SCALE."""
    folder = tmp_path / name
    folder.mkdir()
    for csv in (FIXTURES / "h200-torch-mlp").glob("training_*.csv"):
        target = folder / csv.name
        if csv.name.endswith("_cuda_gpu_kern_sum.csv"):
            table = pl.read_csv(csv)
            scaled = [c for c in table.columns if c.endswith("(ns)")]
            scaled_table = table.with_columns((pl.col(c) * kernel_scale).round(0).cast(table[c].dtype) for c in scaled)
            scaled_table.write_csv(target)
        else:
            shutil.copyfile(csv, target)
    return folder


def test_recorded_csvs_gate_on_summed_kernel_time(tmp_path: Path) -> None:
    base, slow = recorded(tmp_path, "base", 1.0), recorded(tmp_path, "slow", 1.2)
    failed = nsight_diff(base, slow, "--fail-if-slower", "10")
    assert failed.returncode == SLOWER_EXIT, failed.stderr
    assert failed.stdout.splitlines()[0].startswith("B is 20.0% slower than A: summed kernel time")
    assert "20.0%" in failed.stderr
    passed = nsight_diff(slow, base, "--fail-if-slower", "10")
    assert passed.returncode == 0 and "faster" in passed.stdout.splitlines()[0]
    assert nsight_diff(base, slow, "--fail-if-slower", "25").returncode == 0


def test_json_is_one_object_with_the_verdict(tmp_path: Path) -> None:
    base, slow = recorded(tmp_path, "base", 1.0), recorded(tmp_path, "slow", 1.5)
    done = nsight_diff(base, slow, "--json")
    assert done.returncode == 0
    data = json.loads(done.stdout)
    assert data["verdict"] == "slower" and data["gate"]["metric"] == "kernel_time_sum"
    assert data["gate"]["change"] == pytest.approx(0.5, rel=1e-3)
    assert {k["name"] for k in data["kernels"]} and all(k["change"] == pytest.approx(0.5, abs=1e-3)
                                                        for k in data["kernels"])


def test_a_missing_capture_is_an_error_not_a_pass(tmp_path: Path) -> None:
    done = nsight_diff(tmp_path / "nope.nsys-rep", tmp_path / "nope2.nsys-rep", "--fail-if-slower", "10")
    assert done.returncode == 1 and "does not exist" in done.stderr


@pytest.mark.nsys
def test_a_slower_capture_fails_the_gate_and_a_faster_one_passes(tmp_path: Path) -> None:
    """Real nsys captures: steps of 6 ms against steps of 12 ms, judged on the step p50."""
    fast = capture_cpu(tmp_path / "fast", sleepy_steps(6, 0.004, 0.002))
    slow = capture_cpu(tmp_path / "slow", sleepy_steps(6, 0.010, 0.002))
    regressed = nsight_diff(fast, slow, "--fail-if-slower", "10")
    assert regressed.returncode == SLOWER_EXIT, regressed.stdout + regressed.stderr
    assert regressed.stdout.splitlines()[0].startswith("B is") and "step p50" in regressed.stdout.splitlines()[0]
    improved = nsight_diff(slow, fast, "--fail-if-slower", "10")
    assert improved.returncode == 0, improved.stderr
    same = nsight_core.diff(fast, fast)
    assert same.verdict == "unchanged" and same.gate.metric == "step_p50"
    parts = {d.name: d for d in nsight_core.diff(fast, slow).deltas if d.group == "budget"}
    assert parts["gpu_idle_per_step"].delta is not None and parts["gpu_idle_per_step"].delta > 4e6
