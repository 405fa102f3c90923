"""`nsight diff` as a CI gate: real captures and recorded CSVs; exit codes, reasons and Markdown as the command prints
them (its ``main`` in this process; the first test runs it as a process, the exit status a CI job reads).

The exit codes a CI job sees: 0 (passed, or not comparable without a gate), 3 (slower than allowed),
4 (a gate was set and the captures are not comparable: renamed steps, another GPU, an incomplete trace),
1 (an error).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from analysis_helpers import FIXTURES, copy_capture
from capture_helpers import nsight_here
from fixture_sets import unpacked

import nsight_core
from nsight_core.cli import NOT_COMPARABLE_EXIT, SLOWER_EXIT
from nsight_core.trace.export import export
from nsight_core.units import duration

PAIRS = FIXTURES / "h200-fix-pairs"
INCOMPLETE = FIXTURES / "h200-quick-start-cuda13-incomplete" / "train.nsys-rep"
MARKDOWN_HEADER = "| A | B | B - A | Change | Metric |"


def nsight_diff(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return nsight_here("diff", *args)


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


@pytest.fixture(scope="module")
def h200(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Private copies of H200 recordings (exports land beside them): a fix pair and an incomplete capture."""
    root = tmp_path_factory.mktemp("h200")
    return {"problem": copy_capture(PAIRS / "two-problem.nsys-rep", root),
            "fixed": copy_capture(PAIRS / "two-fixed.nsys-rep", root),
            "incomplete": copy_capture(INCOMPLETE, root)}


def test_recorded_csvs_gate_on_summed_kernel_time(tmp_path: Path) -> None:
    base, slow = recorded(tmp_path, "base", 1.0), recorded(tmp_path, "slow", 1.2)
    failed = subprocess.run([sys.executable, "-m", "nsight_core.cli", "diff", base, slow, "--fail-if-slower", "10"],
                            capture_output=True, text=True, timeout=240)
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
    assert data["verdict"] == "slower" and data["gate"]["metric"] == "kernel_time_sum" and data["reasons"] == []
    assert data["gate"]["change"] == pytest.approx(0.5, rel=1e-3)
    assert {k["name"] for k in data["kernels"]} and all(k["change"] == pytest.approx(0.5, abs=1e-3)
                                                        for k in data["kernels"])


def test_a_host_that_changed_speed_as_a_capture_started_is_noted_beside_the_verdict() -> None:
    """alloc_churn's fix on an H100 with nsys 2025.3 (tests/fixtures/h100-host-speed-2025): the fixed twin's host took
    0.50x as long for the same Python loop once collection was live, the problem's held (1.04x). The text and the
    Markdown note B's spell beside the verdict, which it leaves alone, and the JSON carries the ratio; two captures
    whose hosts held have no note."""
    folder = unpacked("h100-host-speed-2025")
    problem, fixed = folder / "alloc_churn-problem.sqlite", folder / "alloc_churn-fixed.sqlite"
    text, markdown = nsight_diff(problem, fixed), nsight_diff(problem, fixed, "--markdown")
    note = ("B's host changed speed by itself as its capture started (a loop with no CUDA call took 0.50x as long once "
            "collection was live): its host-bound step times may not be its usual ones")
    verdict, second = text.stdout.splitlines()[:2]
    assert text.returncode == 0 and verdict.startswith("B is") and second == f"note: {note}"
    assert "A's host" not in text.stdout
    assert f"**Note:** {note}" in markdown.stdout
    data = json.loads(nsight_diff(problem, fixed, "--json").stdout)
    assert data["host_speed_changed"] == {"b": pytest.approx(0.5, abs=0.005)} and data["verdict"] == "faster"
    held = nsight_diff(folder / "bf16_tf32-problem.sqlite", folder / "bf16_tf32-fixed.sqlite")
    assert held.returncode == 0 and "note:" not in held.stdout and "host changed speed" not in held.stdout


def test_a_missing_capture_is_an_error_not_a_pass(tmp_path: Path) -> None:
    done = nsight_diff(tmp_path / "nope.nsys-rep", tmp_path / "nope2.nsys-rep", "--fail-if-slower", "10")
    assert done.returncode == 1 and "does not exist" in done.stderr


def test_json_and_markdown_are_one_choice(tmp_path: Path) -> None:
    base = recorded(tmp_path, "base", 1.0)
    done = nsight_diff(base, base, "--json", "--markdown")
    assert done.returncode == 2 and "not allowed with argument" in done.stderr


@pytest.mark.nsys
def test_a_slower_capture_fails_the_gate_and_a_faster_one_passes(loops: dict[str, Path]) -> None:
    """Real nsys captures: steps of 6 ms against steps of 102 ms, judged on the step p50."""
    fast, slow = loops["fast"], loops["slow"]
    regressed = nsight_diff(fast, slow, "--fail-if-slower", "10")
    assert regressed.returncode == SLOWER_EXIT, regressed.stdout + regressed.stderr
    assert regressed.stdout.splitlines()[0].startswith("B is") and "step p50" in regressed.stdout.splitlines()[0]
    assert "(allowed: 10 %)" in regressed.stderr
    improved = nsight_diff(slow, fast, "--fail-if-slower", "10")
    assert improved.returncode == 0 and "allowed" not in improved.stderr, improved.stderr
    same = nsight_core.diff(fast, fast)
    assert same.verdict == "unchanged" and same.gate.metric == "step_p50" and same.reasons == []
    result = nsight_core.diff(fast, slow)
    # B's steps sleep 100 ms, which load only lengthens; A's 6 ms steps stretch under load, so the change is asked to
    # be B's p50 over A's, and well above the gate's 10 %.
    gate = result.gate
    assert gate.change is not None and gate.a_ns and gate.b_ns is not None and gate.b_ns >= 100e6
    assert gate.change == pytest.approx(gate.b_ns / gate.a_ns - 1) and gate.change > 0.3
    parts = {d.name: d for d in result.deltas if d.group == "budget"}
    # The slowdown shows as GPU idle (a CPU capture): each side's steps idle at least as long as they sleep (4 and
    # 100 ms), which load only lengthens.
    idle = parts["gpu_idle_per_step"]
    assert idle.a is not None and idle.a >= 4e6 and idle.b is not None and idle.b >= 100e6


@pytest.mark.nsys
def test_renamed_steps_are_not_comparable_and_fail_a_gate(loops: dict[str, Path]) -> None:
    """The slower loop with its steps renamed `step_*` -> `iter_*`: the gate must not pass it."""
    fast, renamed = loops["fast"], loops["renamed"]
    reason = "not comparable: the step families differ (A: step_{n}, B: iter_{n}): name the steps alike in both"
    gated = nsight_diff(fast, renamed, "--fail-if-slower", "5")
    assert gated.returncode == NOT_COMPARABLE_EXIT, gated.stdout + gated.stderr
    assert gated.stdout.splitlines()[0].startswith(reason)
    assert "nsight: the gate cannot judge B against A: " + reason in gated.stderr
    ungated = nsight_diff(fast, renamed)
    assert ungated.returncode == 0 and ungated.stdout.splitlines()[0].startswith(reason)
    data = json.loads(nsight_diff(fast, renamed, "--json").stdout)
    assert data["verdict"] == "not_comparable"
    assert data["reasons"] == [{"code": "step-families-differ", "a": ["step_{n}"], "b": ["iter_{n}"]}]
    markdown = nsight_diff(fast, renamed, "--fail-if-slower", "5", "--markdown")
    assert markdown.returncode == NOT_COMPARABLE_EXIT
    lines = markdown.stdout.splitlines()
    assert lines[0] == "### nsight diff: not comparable"
    assert "**Gate** (fail when B is more than 5 % slower): **failed: the captures are not comparable**" in lines
    assert "- the step families differ (A: step_{n}, B: iter_{n}): name the steps alike in both to compare step " \
           "times" in lines
    assert MARKDOWN_HEADER in lines and not any(line.startswith("For reference only") for line in lines)


@pytest.mark.parametrize("first, second", [("problem", "fixed"), ("fixed", "problem")])
def test_a_fix_pair_on_the_h200_is_comparable(h200: dict[str, Path], first: str, second: str) -> None:
    """two-problem (21.3 ms per step unprofiled) against two-fixed (3.2 ms): one GPU, one step family, complete."""
    truth = json.loads((PAIRS / "truth.json").read_text())["cases"]["two"]["variants"]
    real_change = truth[second]["step_ms"] / truth[first]["step_ms"] - 1
    result = nsight_core.diff(h200[first], h200[second])
    assert result.reasons == [] and result.gate.metric == "step_p50" and result.gate.change is not None
    assert (result.gate.change > 0) == (real_change > 0) and abs(result.gate.change) > 0.5
    done = nsight_diff(h200[first], h200[second], "--fail-if-slower", "5", "--markdown")
    lines = done.stdout.splitlines()
    word = "slower" if real_change > 0 else "faster"
    assert lines[0] == (f"### nsight diff: B is {abs(result.gate.change):.1%} {word} than A: step p50 (without the "
                        f"profiler where estimated) {duration(result.gate.a_ns)} -> {duration(result.gate.b_ns)}")
    outcome = "failed: B is slower than allowed" if real_change > 0 else "passed"
    assert f"**Gate** (fail when B is more than 5 % slower): **{outcome}**" in lines
    assert done.returncode == (SLOWER_EXIT if real_change > 0 else 0), done.stderr
    row = f"| {duration(result.gate.a_ns)} | {duration(result.gate.b_ns)} | "
    assert any(line.startswith(row) and line.endswith(" | steps: step_p50_without_profiler |") for line in lines)
    assert "<details><summary>Kernels: top 10 of" in done.stdout and "Not comparable:" not in done.stdout


def test_an_incomplete_capture_is_not_comparable(h200: dict[str, Path]) -> None:
    """The whole-process CUDA 13 capture nsys 2023.4.4 imported in part, against a complete H200 capture."""
    gated = nsight_diff(h200["fixed"], h200["incomplete"], "--fail-if-slower", "5")
    assert gated.returncode == NOT_COMPARABLE_EXIT, gated.stdout + gated.stderr
    verdict = gated.stdout.splitlines()[0]
    assert verdict.startswith("not comparable: B's trace is incomplete (") and "cuda ends early" in verdict
    assert "`nsight stats` on B says what it misses [for reference only: step p50 " in verdict
    reverse = nsight_diff(h200["incomplete"], h200["fixed"])
    assert reverse.returncode == 0 and reverse.stdout.startswith("not comparable: A's trace is incomplete (")
    markdown = nsight_diff(h200["fixed"], h200["incomplete"], "--markdown").stdout.splitlines()
    assert markdown[0] == "### nsight diff: not comparable" and "Not comparable:" in markdown
    assert any(line.startswith("- B's trace is incomplete (") for line in markdown)
    assert any(line.startswith("For reference only: step p50 ") for line in markdown)
    assert not any(line.startswith("**Gate**") for line in markdown)  # no gate was asked for


def test_a_capture_on_another_gpu_is_not_comparable(h200: dict[str, Path], tmp_path: Path) -> None:
    """The same capture, its SQLite export's GPU renamed as if recorded on an A100: only the GPU differs."""
    same = export(copy_capture(h200["fixed"], tmp_path / "same"), "sqlite")
    other = export(copy_capture(h200["fixed"], tmp_path / "other"), "sqlite")
    db = sqlite3.connect(other)
    db.execute("UPDATE TARGET_INFO_GPU SET name = 'NVIDIA A100-SXM4-80GB'")
    db.commit()
    db.close()
    assert nsight_diff(h200["fixed"], same, "--fail-if-slower", "5").returncode == 0
    gated = nsight_diff(h200["fixed"], other, "--fail-if-slower", "5")
    assert gated.returncode == NOT_COMPARABLE_EXIT, gated.stdout + gated.stderr
    assert gated.stdout.startswith("not comparable: they ran on different GPUs (A: NVIDIA H200, "
                                   "B: NVIDIA A100-SXM4-80GB) [for reference only: step p50 ")
    data = json.loads(nsight_diff(h200["fixed"], other, "--json").stdout)
    assert data["reasons"] == [{"code": "gpu-differs", "a": ["NVIDIA H200"], "b": ["NVIDIA A100-SXM4-80GB"]}]


def test_captures_with_nothing_to_compare_fail_a_gate() -> None:
    """The DDP capture's recorded CSVs hold no kernel (nsys 2023.4.4 lost them): no number to judge B on."""
    csvs = FIXTURES / "h200-ddp-cuda13-incomplete"
    gated = nsight_diff(csvs, csvs, "--fail-if-slower", "5")
    assert gated.returncode == NOT_COMPARABLE_EXIT, gated.stdout + gated.stderr
    reason = "not comparable: the captures share no step, GPU busy or kernel time to compare"
    assert gated.stdout.splitlines()[0] == reason and reason in gated.stderr
    assert nsight_diff(csvs, csvs).returncode == 0


def test_steps_timed_on_different_clocks_are_not_comparable(loops: dict[str, Path], h200: dict[str, Path]) -> None:
    """A CPU loop's steps are its ranges; the H200 fix's are GPU windows: one step family, both complete, and still
    a step time of one is not the other's."""
    result = nsight_core.diff(loops["fast"], h200["fixed"])
    clocks = [reason for reason in result.reasons if reason.code == "clocks-differ"]
    assert clocks and clocks[0].a == ["cpu"] and clocks[0].b == ["gpu"], result.reasons
    gated = nsight_diff(loops["fast"], h200["fixed"], "--fail-if-slower", "5")
    assert gated.returncode == NOT_COMPARABLE_EXIT
    assert "A's steps are timed on the CPU's clock, B's on the GPU's" in gated.stdout


def test_captures_that_would_not_fit_in_memory_are_not_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    """A comparison reads both captures' events whole; where that needs more than the process may take (here a
    limit of 1 MB, as a CI job's container could state one), `nsight diff` refuses with the numbers and the remedies
    instead of being killed for memory: exit 1, one line, no traceback."""
    pairs = FIXTURES / "h200-fix-pairs-2025"
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "1M")
    done = nsight_diff(pairs / "dataloader-problem.sqlite", pairs / "dataloader-fixed.sqlite")
    assert done.returncode == 1 and done.stdout == "", done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("nsight: error: comparing dataloader-problem.sqlite needs about"), line
    assert "allows 1.00 MiB, so it is not compared" in line and "NSIGHT_SUMMARY_MEMORY=off to compare it" in line
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "off")
    assert nsight_diff(pairs / "dataloader-problem.sqlite", pairs / "dataloader-fixed.sqlite").returncode == 0
