"""CPU captures made with real nsys for the tests: a Python body inside `nsight_core.range`, NVTX + OS runtime."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


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
