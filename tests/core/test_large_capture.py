"""Large CPU captures (slow: `make bench` runs them, `make test` does not).

30 M NVTX ranges (bench/nvtx_ranges.py under `nsight run --trace nvtx --sample none`, a 365 MB trace recorded by the
real nsys in about 5 minutes): `nsight report` and `nsight stats --json`, each a process of its own in a task allowed
2 GiB (NSIGHT_SUMMARY_MEMORY), stay under 2 GiB for the whole process tree (nsys' export included, the sum of the
resident sets sampled from /proc: bench/bench.py's ``tree_run``), with every range counted, the summary's tiles and
timeline on the page, the completeness verdict in the statistics, and "What to fix" over every step, streamed (their
budget on the CPU's clock, batch by batch).

1 M NVTX ranges: the summary and completeness streamed from the Parquet copies, in one window and in several, equal
the whole-frame path's.

A long GPU capture (an H200 fixture's events repeated along time, bench/replicate_fixture.py: 160,000 steps, 4.6 M
kernels, 13 M CUDA calls, a 1.03 GB export): `nsight stats --json` in a task allowed 2 GiB stays under 2 GiB and its
"What to fix" covers every step, and so does it with its NVTX events deleted (160,000 kernel-period steps), and
with its kernels' names shuffled too (no steps: all of it as one step); at a quarter of that size, the analysis
streamed is the one read whole.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

import nsight_core
from nsight_core.analysis.analyze import analyze_steps
from nsight_core.analysis.completeness import check_completeness
from nsight_core.analysis.steps import FamilySteps
from nsight_core.analysis.trace_summary import summarize_trace
from nsight_core.nsys import Nsys
from nsight_core.trace.export import MAX_SLICES, SLICES_PER_CORE, ExportChoice, export, parquet_slices, usable_cores
from nsight_core.trace.model import Trace
from nsight_core.trace.spill import SpilledTables
from nsight_core.trace.tables import SqliteTables

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from bench import tree_run  # noqa: E402  (bench/ is no package: the sampler the benchmark tables use)

pytestmark = [pytest.mark.slow, pytest.mark.nsys, pytest.mark.timeout(2400)]

BOUND_MB = 2048
"""The whole pipeline's bound: 2 GiB, whatever the capture's size."""
ONE_PROCESS = {"process": None, "gpus": []}
"""The coverage of a capture of one process: all of it."""


def record(ranges: int, folder: Path) -> Path:
    recorded = subprocess.run(
        [sys.executable, "-m", "nsight_core.cli", "run", "--trace", "nvtx", "--sample", "none", "-o", str(folder),
         "--", sys.executable, str(REPO / "bench" / "nvtx_ranges.py"), str(ranges)],
        capture_output=True, text=True, timeout=1200)
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    [capture] = folder.glob("*.nsys-rep")
    return capture


def test_30m_ranges_get_stats_and_page_under_2_gib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ranges = 30_000_000
    capture = record(ranges, tmp_path / "capture")
    env = {**os.environ, "NSIGHT_SUMMARY_MEMORY": "2G"}
    page = tmp_path / "page.html"
    report = tree_run([sys.executable, "-m", "nsight_core.cli", "report", capture, "-o", page], tmp_path, env)
    stats = tree_run([sys.executable, "-m", "nsight_core.cli", "stats", capture, "--json"], tmp_path, env)
    payload = json.loads(stats.stdout)
    # Its Parquet export in the fewest slices whose nsys processes fit 2 GiB, else SQLite in two slices per core.
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "2G")
    cores = usable_cores()
    slices = min(cores * SLICES_PER_CORE, MAX_SLICES) if cores > 1 else 1
    parquet = parquet_slices(capture.stat().st_size)
    expected = ("parquetdir", parquet) if parquet else ("sqlitedir" if slices > 1 else "sqlite", slices)
    assert payload["export"]["streamed"] and (payload["export"]["kind"], payload["export"]["slices"]) == expected
    counted = {row["name"]: row["instances"] for row in payload["nvtx_ranges"]}
    assert counted["step"] == ranges // 1000 and sum(counted.values()) == ranges
    assert payload["completeness"]["complete"]
    # What to fix over every step (each `step` holds 999 ranges), with the note saying so.
    steps, budget = payload["steps"], payload["budget"]
    assert steps["family"]["pattern"] == "step" and steps["family"]["count"] == ranges // 1000
    assert budget["steps"] == ranges // 1000 - steps["warmup"] and budget["wall_ns"] > 0
    assert payload["coverage"] == {"scope": "every_step", "steps": ranges // 1000, **ONE_PROCESS}
    text = page.read_text()
    assert "30,000,000" in text and "Capture span" in text, "the page's tiles are missing"
    assert report.tree_mb < BOUND_MB and stats.tree_mb < BOUND_MB, (report.tree_mb, stats.tree_mb)
    assert not list(capture.parent.glob(".nsight-spill-*")), "the Parquet copies were left behind"


def test_3m_ranges_give_the_same_json_whatever_the_memory(tmp_path: Path) -> None:
    """`nsight stats --json` of a 3 M-range capture under 512 MiB, 1 GiB and no limit: read from its arrow export in
    memory, or scanned from its SQLite export in windows, one answer (``export`` says how it was read)."""
    capture = record(3_000_000, tmp_path / "capture")
    answers = {}
    for setting in ("512M", "1G", "off"):
        copy = tmp_path / setting / capture.name
        copy.parent.mkdir()
        shutil.copyfile(capture, copy)
        done = subprocess.run([sys.executable, "-m", "nsight_core.cli", "stats", str(copy), "--json"],
                              capture_output=True, text=True, timeout=1200,
                              env={**os.environ, "NSIGHT_SUMMARY_MEMORY": setting})
        assert done.returncode == 0, done.stderr[-2000:]
        payload = json.loads(done.stdout)
        answers[setting] = payload, payload.pop("export")
    assert answers["512M"][1]["streamed"] and not answers["off"][1]["streamed"], "both ways of reading it are tested"
    assert answers["512M"][0] == answers["1G"][0] == answers["off"][0]
    assert answers["off"][0]["coverage"] == {"scope": "every_step", "steps": 3_000, **ONE_PROCESS}


def test_1m_ranges_streamed_summary_equals_the_whole_frames(nsys: Nsys, tmp_path: Path) -> None:
    capture = record(1_000_000, tmp_path / "capture")
    sqlite = export(capture, "sqlite", nsys)
    whole_trace = nsight_core.load_trace(sqlite)
    whole, verdict = summarize_trace(whole_trace), check_completeness(whole_trace)
    assert whole.nvtx_total == 1_000_000 and whole.nvtx_buckets and len(whole.nvtx) == 1000
    streamed = Trace(SpilledTables(SqliteTables(sqlite), ExportChoice(kind="sqlite", streamed=True, reason="large",
                                                                        trace_bytes=0)))
    for rows in (None, 300_000, 77_777):
        assert summarize_trace(streamed, window_rows=rows) == whole, rows
    assert check_completeness(streamed) == verdict


HOST_LOAD = REPO / "tests" / "fixtures" / "h200-fix-pairs-2025" / "host_load-problem.sqlite"
"""20 steps of an MLP whose host loads each batch in a range: the GPU idles while it does (host-bound)."""
STREAMED = ExportChoice(kind="sqlite", streamed=True, reason="large", trace_bytes=0)


def replicate(copies: int, target: Path) -> Path:
    subprocess.run([sys.executable, str(REPO / "bench" / "replicate_fixture.py"), str(HOST_LOAD), str(target),
                    str(copies)], check=True, capture_output=True, timeout=600)
    return target


def test_a_long_gpu_capture_gets_what_to_fix_over_every_step_under_2_gib(tmp_path: Path) -> None:
    capture = replicate(8000, tmp_path / "long.sqlite")
    stats = tree_run([sys.executable, "-m", "nsight_core.cli", "stats", capture, "--json"], tmp_path,
                     {**os.environ, "NSIGHT_SUMMARY_MEMORY": "2G"})
    payload = json.loads(stats.stdout)
    assert payload["export"]["streamed"] and payload["steps"]["family"]["count"] == 160_000
    assert payload["budget"]["steps"] == 160_000 and payload["steps"]["mode"] == "nvtx-gpu"
    assert payload["steps"]["bound"] == "host"
    assert {finding["kind"] for finding in payload["findings"]} >= {"host_work"}
    assert payload["coverage"] == {"scope": "every_step", "steps": 160_000, **ONE_PROCESS} and not payload["notes"]
    assert stats.tree_mb < BOUND_MB, stats.tree_mb


SHUFFLED_NAMES = """UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = CASE abs(random()) % 3
    WHEN 0 THEN demangledName WHEN 1 THEN shortName
    ELSE (SELECT min(demangledName) FROM CUPTI_ACTIVITY_KIND_KERNEL) END"""
"""Each kernel named at random: its own name, its short name or one of all (string ids of the export), so that no
kernel recurs at a constant distance."""


@pytest.mark.parametrize(("change", "mode", "coverage"), [
    ("", "kernel-period", {"scope": "every_step", "steps": 160_000, **ONE_PROCESS}),
    (SHUFFLED_NAMES, "capture-as-one-step", {"scope": "capture_as_one_step", "steps": 1, **ONE_PROCESS})],
    ids=["kernel-periods", "no-steps"])
def test_a_long_gpu_loop_without_nvtx_gets_what_to_fix_over_all_of_it_under_2_gib(
        change: str, mode: str, coverage: dict[str, object], tmp_path: Path) -> None:
    capture = replicate(8000, tmp_path / "long.sqlite")
    with closing(sqlite3.connect(capture)) as db, db:
        db.execute("DELETE FROM NVTX_EVENTS")  # a loop nothing marks: its steps are its kernel sequence's periods
        if change:
            db.execute(change)  # nor does its kernel sequence repeat: the capture is one step
    stats = tree_run([sys.executable, "-m", "nsight_core.cli", "stats", capture, "--json"], tmp_path,
                     {**os.environ, "NSIGHT_SUMMARY_MEMORY": "2G"})
    payload = json.loads(stats.stdout)
    assert payload["export"]["streamed"] and payload["steps"]["mode"] == mode
    assert payload["budget"]["steps"] == (160_000 if mode == "kernel-period" else 1)
    assert {finding["kind"] for finding in payload["findings"]} >= {"untraced_host"}
    assert payload["coverage"] == coverage and not payload["notes"]
    assert stats.tree_mb < BOUND_MB, stats.tree_mb


def test_a_long_gpu_capture_scanned_from_disk_is_analysed_as_in_memory(tmp_path: Path) -> None:
    capture = replicate(2000, tmp_path / "long.sqlite")
    in_memory = analyze_steps(nsight_core.load_trace(capture))
    scanned = analyze_steps(Trace(SpilledTables(SqliteTables(capture), STREAMED)))
    assert isinstance(in_memory.analysis.steps, FamilySteps) and in_memory.analysis.steps.family.count == 40_000
    assert scanned.analysis == in_memory.analysis
    assert scanned.budgets.steps.equals(in_memory.budgets.steps)
