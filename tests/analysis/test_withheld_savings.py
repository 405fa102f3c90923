"""Never a saving from lost data: on a trace flagged incomplete, What to fix keeps its causes but claims nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from capture_helpers import nsight_here

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _stats(path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    done = nsight_here("stats", *flags, path)
    assert done.returncode == 0, done.stderr
    return done


def test_an_incomplete_capture_claims_no_saving_and_says_why() -> None:
    capture = FIXTURES / "h200-quick-start-cuda13-incomplete" / "train.nsys-rep"
    payload = json.loads(_stats(capture, "--json").stdout)
    analysis = payload
    assert payload["completeness"]["complete"] is False
    assert "cuda_ends_early" in analysis["savings_withheld"]
    assert all(f["saving"] is None for f in analysis["findings"])
    assert all(f["severity"] == "info" for f in analysis["findings"])
    text = _stats(capture).stdout
    assert "no savings: the trace is incomplete" in text and "saving:" not in text


def test_a_complete_capture_keeps_its_savings() -> None:
    payload = json.loads(_stats(FIXTURES / "h200-fix-pairs" / "host_load-problem.nsys-rep", "--json").stdout)
    assert payload["completeness"]["complete"] is True and payload["savings_withheld"] == []
    assert payload["findings"][0]["saving"]["per_step_ns"] > 0
