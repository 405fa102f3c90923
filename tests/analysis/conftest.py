"""Fixtures of the analysis tests: the H200 recordings as traces, and CPU captures made with real nsys.

Each trace is loaded from a private copy (exports land beside the .nsys-rep), so tests in parallel
never share an export.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import nsight_core

needs_trace = pytest.mark.skipif(not hasattr(nsight_core, "load_trace"),
                                 reason="needs the Trace data layer (nsight_core.load_trace, issue 8)")
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def copy_capture(source: Path, target_dir: Path) -> Path:
    """A writable copy of one .nsys-rep in TARGET_DIR."""
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / source.name
    shutil.copyfile(source, target)
    return target


@pytest.fixture(scope="module")
def load(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Any]:
    """Load fixture REL (e.g. 'h200-torch-mlp/training.nsys-rep') as a Trace, from a private copy."""
    loaded: dict[str, Any] = {}

    def _load(rel: str) -> Any:
        if rel not in loaded:
            folder = tmp_path_factory.mktemp(Path(rel).stem)
            loaded[rel] = nsight_core.load_trace(copy_capture(FIXTURES / rel, folder))
        return loaded[rel]

    return _load


def capture_cpu(folder: Path, body: str, region: str = "work") -> Path:
    """Run BODY (Python, inside `with nsight_core.range(REGION):`) under real nsys, CPU only; its .nsys-rep."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "script.py"
    script.write_text("import time, nvtx, nsight_core\n"
                      f"with nsight_core.range({region!r}):\n" + textwrap.indent(textwrap.dedent(body), "    "))
    done = subprocess.run(
        [sys.executable, "-m", "nsight_core.cli", "run", "--capture", "manual", "--trace", "nvtx,osrt",
         "--sample", "none", "-o", str(folder / "out"), "--", sys.executable, str(script)],
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    reports = sorted((folder / "out").glob("*.nsys-rep"))
    assert len(reports) == 1, (done.stdout, done.stderr)
    return reports[0]


def sleepy_steps(steps: int, sleep_s: float, busy_s: float) -> str:
    """A training-loop shape on the CPU: each step_<i> loads data (a sleep), then computes (a spin)."""
    return f"""
        for i in range({steps}):
            with nvtx.annotate(f"step_{{i}}"):
                with nvtx.annotate("data"):
                    time.sleep({sleep_s})
                with nvtx.annotate("compute"):
                    t = time.perf_counter()
                    while time.perf_counter() - t < {busy_s}:
                        pass
    """
