"""A capture's section is titled by its region's name, or for an unnamed `nsight run`'s whole-process capture (a
file named by a random id, nsight-1a2b3c4d.nsys-rep) by the command it recorded (where the export holds it) or the
program: never by the id."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from capture_helpers import capture_cpu, run_captured

from nsight_core.nsys import Nsys
from nsight_core.profile import build_profile

pytestmark = pytest.mark.nsys


def test_whole_process_capture_is_titled_by_its_program(tmp_path: Path, nsys: Nsys) -> None:
    script = tmp_path / "train.py"
    script.write_text("import time, nvtx\nfor i in range(3):\n    with nvtx.annotate(f'step_{i}'):\n"
                      "        time.sleep(0.01)\n")
    done = run_captured([sys.executable, "-m", "nsight_core.cli", "run", "--trace", "nvtx,osrt", "--sample", "none",
                         "-o", str(tmp_path / "out"), "--", sys.executable, str(script)], timeout=240)
    assert done.returncode == 0, done.stderr
    [capture] = [Path(line) for line in done.stdout.splitlines() if line.endswith(".nsys-rep")]
    assert re.fullmatch(r"nsight-[0-9a-f]{8}", capture.stem)  # the file keeps the run's id
    page = tmp_path / "page.html"
    report = run_captured([sys.executable, "-m", "nsight_core.cli", "report", str(capture), "-o", str(page)],
                          timeout=240)
    assert report.returncode == 0, report.stderr
    [title] = re.findall(r"<h2>([^<]*)</h2><p class=\"nsr-source\">", page.read_text())
    # nsys names the process as it saw it first: the command (python) or, when it read it before the exec,
    # nsight run's shell or nsys' own launcher, which are no program's name and are left out.
    assert re.fullmatch(r"(python[\d.]* \(whole process, pid \d+\))|(whole-process capture, pid \d+)", title), title
    assert capture.stem not in title


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_the_command_when_the_export_holds_it() -> None:
    """The H200 whole-process capture `nsight run` made with nsys 2025 (its SQLite export keeps the command line):
    titled by the command nsight's shell wrapper ran, the wrapper left out."""
    profile = build_profile(FIXTURES / "h200-2025-process" / "nsight-0013a405.sqlite")
    assert profile.title == "python3 /work/main/bench/gpu/fix_pairs.py --time-only truth.json --cases quick_start,graph"


def test_region_capture_keeps_its_name(tmp_path: Path, nsys: Nsys) -> None:
    capture = capture_cpu(tmp_path, "time.sleep(0.01)\n", region="training")
    assert build_profile(capture).title == "training"
