"""`--cuda-graph-trace` (graph|node) reaches nsys: `nsight run` (both capture modes), `nsight launch` and the exec
wrapper the Flyte decorator stamps. The proof is nsys' own record of the capture's settings in the report it
wrote (META_DATA_CAPTURE `PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE`), with the real nsys 2023.4.4, which takes
the option on `launch` and `profile` (not on `start`: graph tracing is set where the session begins)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from nsight_core.launch import exec_wrapper
from nsight_core.nsys import Nsys
from nsight_core.trace.export import export

pytestmark = pytest.mark.nsys

REGION = """import nsight_core
with nsight_core.range("work"):
    sum(range(1000))
"""


def graph_mode(report: Path) -> str:
    """How nsys was told to trace CUDA graphs when it recorded REPORT (its own record)."""
    with sqlite3.connect(export(report, "sqlite")) as connection:
        [(mode,)] = connection.execute("SELECT value FROM META_DATA_CAPTURE WHERE name LIKE "
                                       "'%CUDA_GRAPH_TRACE_OPTIONS:MODE'").fetchall()
    connection.close()
    return str(mode)


NO_DRIVER = "CUDA graph-level trace requires CUDA driver version 11.7 or higher"
"""nsys' answer to --cuda-graph-trace=graph on a machine without a CUDA driver (this one): it records nodes."""


def assert_reached_nsys(mode: str, report: Path, nsys_output: str) -> None:
    """nsys recorded REPORT as told: MODE in its own record, or, for graph on a machine without a CUDA driver, its
    warning that it cannot (nsys' default there is node, so without the option it says nothing)."""
    recorded = graph_mode(report)
    if mode == "graph" and recorded == "Node":
        assert NO_DRIVER in nsys_output
    else:
        assert recorded == mode.capitalize()


def nsight(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nsight_core.cli", *args], capture_output=True, text=True,
                          timeout=240, check=False, cwd=cwd)


@pytest.mark.parametrize(("capture", "mode"), [("process", "node"), ("manual", "node"), ("manual", "graph")])
def test_nsight_run_passes_it_to_nsys(capture: str, mode: str, nsys: Nsys, tmp_path: Path) -> None:
    """Both values: nsys' own default depends on the driver (node without one, as here; graph from CUDA 11.7)."""
    script = tmp_path / "region.py"
    script.write_text(REGION, encoding="utf-8")
    done = nsight("run", "--capture", capture, "--trace", "cuda,nvtx", "--sample", "none", "--cuda-graph-trace",
                  mode, "-o", str(tmp_path / "out"), "--", sys.executable, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [report] = sorted((tmp_path / "out").glob("*.nsys-rep"))
    assert_reached_nsys(mode, report, done.stderr)


def test_the_exec_wrapper_passes_it_to_nsys(nsys: Nsys, tmp_path: Path) -> None:
    """What the decorator stamps (`_F_EXEC_WRAPPER`), run as the runtime runs it: `nsight launch` under it."""
    script = tmp_path / "region.py"
    script.write_text(REGION, encoding="utf-8")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "NSIGHT_NSYS": str(nsys.path),
           "TMPDIR": str(tmp_path), **{k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "HOME")}}
    for mode in ("graph", "node"):
        words = exec_wrapper(f"nsight-{mode}", ("cuda", "nvtx"), "none", mode)
        done = subprocess.run([*words, sys.executable, str(script)], capture_output=True, text=True, timeout=240,
                              check=False, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        [report] = sorted((tmp_path / "nsight").glob(f"nsight-{mode}-*/*.nsys-rep"))
        assert_reached_nsys(mode, report, done.stdout + done.stderr)


def test_a_bad_value_is_refused_before_anything_runs(tmp_path: Path) -> None:
    assert NO_DRIVER not in nsight("run", "--capture", "manual", "--trace", "cuda,nvtx", "--sample", "none", "-o",
                                   str(tmp_path / "plain"), "--", sys.executable, "-c", "pass", cwd=tmp_path).stderr
    shutil.rmtree(tmp_path / "plain", ignore_errors=True)
    done = nsight("run", "--cuda-graph-trace", "nodes", "--", "true", cwd=tmp_path)
    assert done.returncode == 2
    assert "--cuda-graph-trace: invalid choice: 'nodes' (choose from 'graph', 'node')" in done.stderr
    assert not list(tmp_path.iterdir())
