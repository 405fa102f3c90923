"""A capture of several ranks (`nsight run torchrun ...`: every rank's process under one nsys) is analysed as the
process of its steps alone: another rank's GPU fills none of this one's idle time, its copies are not counted, and
its calls, which reuse this rank's correlation ids (each process numbers its own), launch none of this rank's work.

The ranks are made from real recordings: a second rank is a copy of a capture's every CUDA call, NVTX range and piece
of GPU work in the next process, on the next GPU, a third of a step later."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fixture_sets import unpacked

from nsight_core import memory
from nsight_core.profile import build_profile
from nsight_core.report import stats_json
from nsight_core.trace import export as export_module

PAIRS = unpacked("h100-pairs-2025")
NEXT_PROCESS = 1 << 24
"""nsys' global thread and process ids hold the pid above their low 24 bits: this is the next pid."""
RANK_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
               "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "OSRT_API")
THE_RANKS_OWN = ("steps", "budget", "budget_scope", "coverage", "overhead", "findings")
"""What `nsight stats --json` says of the steps' rank; the rest (kernel and API tables, NVTX ranges) is the
capture's, every rank's."""


def with_a_second_rank(source: Path, target: Path, shift_ns: int) -> Path:
    """SOURCE (an SQLite export of one process) at TARGET with a second rank beside it, SHIFT_NS later."""
    shutil.copyfile(source, target)
    with sqlite3.connect(target) as db:
        for table in RANK_TABLES:
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            moved = {"start": f"start + {shift_ns}", "end": f"end + {shift_ns}", "deviceId": "deviceId + 1",
                     **{name: f"{name} + {NEXT_PROCESS}" for name in ("globalTid", "endGlobalTid", "globalPid")}}
            if columns:
                db.execute(f"INSERT INTO {table} SELECT {', '.join(moved.get(c, c) for c in columns)} FROM {table}")
    return target


def first_pid(export: Path) -> int:
    """The pid of the process recorded in EXPORT (the first rank's)."""
    with sqlite3.connect(export) as db:
        [(global_pid,)] = db.execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    return int(global_pid) // NEXT_PROCESS % NEXT_PROCESS


def stats(capture: Path, scanned: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`nsight stats --json` of CAPTURE, read whole or (SCANNED) streamed from its export in windows."""
    with monkeypatch.context() as patched:
        if scanned:
            patched.setattr(memory, "STREAMED_SUMMARY_BYTES", 1 << 20)
            patched.setattr(export_module, "STREAM_ABOVE_BYTES", 0)
            patched.setenv("NSIGHT_SUMMARY_MEMORY", "34M")
        return stats_json(build_profile(capture))


def own(payload: dict[str, Any]) -> dict[str, Any]:
    """PAYLOAD's analysis of the steps' rank, less which of the same ranges it chose (their thread), the other
    candidates (every rank's family) and the savings' share of the capture (whose window holds every rank)."""
    found = {key: payload[key] for key in THE_RANKS_OWN}
    found["findings"] = [{**finding, "saving": {key: value for key, value in (finding["saving"] or {}).items()
                                                if key != "capture_fraction"}} for finding in found["findings"]]
    found["steps"] = {key: value for key, value in found["steps"].items() if key != "candidates"}
    found["steps"]["family"] = {key: value for key, value in found["steps"]["family"].items() if key != "thread"}
    found["budget"] = {key: value for key, value in found["budget"].items() if key != "thread"}
    found["coverage"] = {key: value for key, value in found["coverage"].items() if key not in ("process", "gpus")}
    return found


@pytest.mark.parametrize("region", ["mask_sync-problem", "small_copies-problem", "prefetch-fixed"])
def test_each_rank_of_a_capture_is_its_own_analysis(region: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A sync after a GEMM, many small copies, a prefetch on a side stream: beside a second rank, the steps, budget,
    tracing cost and findings are the ones of the rank alone, whether the capture is read whole or streamed."""
    source = PAIRS / f"{region}.sqlite"
    alone = own(stats(shutil.copyfile(source, tmp_path / "alone.sqlite"), False, monkeypatch))
    shift = alone["steps"]["family"]["p50_ns"] // 3
    two = with_a_second_rank(source, tmp_path / "ranks.sqlite", shift)
    whole = stats(two, False, monkeypatch)
    assert whole["steps"]["candidates"][0]["count"] == whole["steps"]["candidates"][1]["count"], "two ranks' steps"
    assert own(whole) == alone
    rank = whole["steps"]["family"]["thread"] // NEXT_PROCESS % NEXT_PROCESS
    assert (whole["coverage"]["process"], whole["coverage"]["gpus"]) == (rank, [rank - first_pid(source)])
    assert own(stats(shutil.copyfile(two, tmp_path / "scanned.sqlite"), True, monkeypatch)) == alone


def test_ranks_without_step_ranges_are_the_busiest_ones_steps(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """No step ranges: the steps are the kernel sequence's period on one GPU (of the process that launched most of
    the first kernels), not a sequence of two GPUs' kernels mixed."""
    source = shutil.copyfile(PAIRS / "small_step-problem.sqlite", tmp_path / "alone.sqlite")
    with sqlite3.connect(source) as db:
        db.execute("DELETE FROM NVTX_EVENTS WHERE coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) "
                   "LIKE 'step_%'")
    alone = stats(source, False, monkeypatch)
    assert alone["steps"]["mode"] == "kernel-period" and alone["coverage"]["process"] is None
    ranks = with_a_second_rank(source, tmp_path / "ranks.sqlite", alone["steps"]["family"]["p50_ns"] // 3)
    two = stats(ranks, False, monkeypatch)
    assert own(two) == own(alone)
    assert two["coverage"]["gpus"] == [two["coverage"]["process"] - first_pid(source)], "a rank's own GPU"


def test_the_text_says_which_rank_it_covers(tmp_path: Path) -> None:
    """`nsight stats` of a capture of two ranks says the analysis is of one process and its GPU alone."""
    source = PAIRS / "mask_sync-problem.sqlite"
    two = with_a_second_rank(source, tmp_path / "ranks.sqlite", 700_000)
    shown = subprocess.run([sys.executable, "-m", "nsight_core.cli", "stats", str(two)], capture_output=True,
                           text=True, check=True).stdout
    pids = {first_pid(source) + rank: rank for rank in (0, 1)}
    [line] = [line for line in shown.splitlines() if line.startswith("covers:")]
    assert any(line.endswith(f"of process {pid} alone (GPU {gpu}): the capture holds other processes' GPU work too")
               for pid, gpu in pids.items()), line
