"""A clustered task through flyte's own launcher chain: `clustered` → torchrun → 2 `a0` processes (gloo, CPU).

Only global rank 0 may run under nsys: one nsys session, one trace uploaded to raw data with its
location printed in the tab, and rank 1 adds nothing to the report.
"""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import pytest
from flyte_harness import HERE, executable, nvtx_counts, parse_report

MODULE = "profiled_tasks"
STEPS = 4


@pytest.fixture(scope="session")
def clustered_launcher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return executable(HERE / "clustered_shim.py", tmp_path_factory.mktemp("bin"))


def _free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def test_clustered_launcher_torchrun_two_ranks_profiles_rank_0_only(  # type: ignore[no-untyped-def]
        run_action, clustered_launcher):
    if importlib.util.find_spec("torch") is None:  # not imported here: the ranks import it (1.5 s of CPU each)
        pytest.skip("torchrun needs torch (make test installs a CPU build)")
    jobset = {"JOBSET_NAME": "nsight-ddp", "POD_NAMESPACE": "tests", "JOB_COMPLETION_INDEX": "0",
              "JOBSET_RESTART_ATTEMPT": "0", "NNODES": "1", "NPROC_PER_NODE": "2", "RDZV_BACKEND": "c10d",
              "MASTER_PORT": _free_port()}
    result = run_action(HERE, MODULE, "ddp_cpu", {"steps": STEPS}, env=jobset, entry=[str(clustered_launcher)])

    assert result.returncode == 0 and result.error is None, result.stderr
    assert result.output == "rank 0 of 2 done"
    assert "rank 1 of 2 done" in result.stderr
    sessions = list((result.workdir / "tmp" / "nsight").iterdir())
    assert len(sessions) == 1, "only rank 0 may run under nsys launch"
    assert [p.name for p in sessions[0].glob("*.nsys-rep")] == ["ddp_cpu.nsys-rep"]
    [trace] = (result.workdir / "raw").rglob("*.nsys-rep")
    assert trace.stat().st_size > 0
    sections = [h for h in parse_report(result.report).headings if h.startswith("Nsight")]
    assert len(sections) == 1, "rank 1 adds nothing to the report"
    assert nvtx_counts(result.report) == [{f"step_{i}": 1 for i in range(STEPS)}]
    assert f"trace (.nsys-rep) uploaded to {trace}" in result.report
    assert result.traces == []
