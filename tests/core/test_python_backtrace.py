"""`--python-backtrace` (the `python_backtrace` option of `Session`, `nsight run` and `nsight launch`) reaches nsys:
the proof is nsys' own record of the capture's settings in the report it wrote (META_DATA_CAPTURE
`PROCESS_0:CUDA_BACKTRACE_OPTIONS:*`), with the real nsys 2023.4.4."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from nsight_core import Session
from nsight_core.launch import exec_wrapper
from nsight_core.nsys import PYTHON_BACKTRACE_THRESHOLD_NS, Nsys
from nsight_core.trace.export import export

pytestmark = pytest.mark.nsys

REGION = """import nsight_core
with nsight_core.range("work"):
    sum(range(1000))
"""


def backtrace_options(report: Path) -> dict[str, str]:
    """How nsys was told to take CUDA calls' backtraces and Python samples when it recorded REPORT (its own record)."""
    with sqlite3.connect(export(report, "sqlite")) as connection:
        rows = connection.execute("SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE "
                                  "'%CUDA_BACKTRACE_OPTIONS:%' OR name LIKE "
                                  "'PYTHON_BACKTRACE_SAMPLING_OPTIONS:%'").fetchall()
    connection.close()
    return {str(name).rsplit(":", 1)[-1]: str(value) for name, value in rows}


@pytest.mark.parametrize("capture", ["process", "manual"])
def test_nsight_run_asks_nsys_for_the_python_stack_of_cuda_calls(capture: str, nsys: Nsys, tmp_path: Path) -> None:
    script = tmp_path / "region.py"
    script.write_text(REGION, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "nsight_core.cli", "run", "--capture", capture, "--trace",
                           "cuda,nvtx", "--python-backtrace", "-o", str(tmp_path / "out"), "--", sys.executable,
                           str(script)], capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [report] = sorted((tmp_path / "out").glob("*.nsys-rep"))
    options = backtrace_options(report)
    assert options["COLLECT_PYTHON_BACKTRACES"] == "true"
    assert options["COLLECT_SAMPLES"] == "true"  # the host's Python stack, sampled
    for kind in ("KERNEL", "MEMORY", "SYNCHRONOIZATION", "OTHER"):  # nsys' spelling
        assert options[f"COLLECT_{kind}_BACKTRACES"] == "true"
        assert int(options[f"{kind}_BACKTRACES_THRESHOLD_NS"]) == PYTHON_BACKTRACE_THRESHOLD_NS


def test_the_exec_wrapper_passes_it_to_nsys_from_the_environment(nsys: Nsys, tmp_path: Path) -> None:
    """What the Flyte decorator's python_backtrace does: NSIGHT_PYTHON_BACKTRACE=1 in the task's environment, read by
    `nsight launch` under the exec wrapper it stamps."""
    script = tmp_path / "region.py"
    script.write_text(REGION, encoding="utf-8")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "NSIGHT_NSYS": str(nsys.path),
           "TMPDIR": str(tmp_path), "NSIGHT_PYTHON_BACKTRACE": "1",
           **{k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "HOME")}}
    done = subprocess.run([*exec_wrapper("nsight-bt", ("cuda", "nvtx"), None), sys.executable, str(script)],
                          capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    [report] = sorted((tmp_path / "nsight").glob("nsight-bt-*/*.nsys-rep"))
    assert backtrace_options(report)["COLLECT_PYTHON_BACKTRACES"] == "true"


def test_without_the_option_nsys_takes_no_python_stacks(nsys: Nsys, tmp_path: Path) -> None:
    script = tmp_path / "region.py"
    script.write_text(REGION, encoding="utf-8")
    result = Session(trace=("cuda", "nvtx"), output_dir=tmp_path / "out").run([sys.executable, str(script)])
    [report] = result.reports
    options = backtrace_options(report)
    assert options.get("COLLECT_PYTHON_BACKTRACES", "false") == "false"
    assert options.get("COLLECT_SAMPLES", "false") == "false"


def test_python_backtrace_without_cpu_sampling_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="python_backtrace needs nsys' CPU sampling"):
        Session(sample="none", python_backtrace=True, output_dir=tmp_path)
