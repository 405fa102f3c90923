"""examples/flyte_*.py: the reference doc's examples import cleanly and are stamped; the CPU ones run.

The GPU examples (quick start, regions, DDP) need torch with CUDA, so here they are checked at import
time only: the decorator's arguments are validated and the container environment stamped there.
"""

from __future__ import annotations

import importlib
import shlex

import pytest
from flyte_harness import EXAMPLES, load_module, nvtx_counts

pytestmark = [pytest.mark.flyte]

STAMPED = {
    "flyte_quick_start": {"train": ("cuda,nvtx", False)},
    "flyte_regions": {"train_regions": ("cuda,nvtx", False), "train_regions_sync": ("cuda,nvtx", False)},
    "flyte_ddp": {"train_ddp": ("cuda,nvtx", True)},
    "flyte_osrt": {"train": ("cuda,nvtx,osrt", False)},
}


def needs_kubernetes(module: str) -> None:
    if module == "flyte_osrt":
        pytest.importorskip("kubernetes", reason="allow_nested_sandboxing() imports kubernetes")


@pytest.mark.parametrize("module", STAMPED)
def test_example_tasks_are_stamped_at_import(module):
    needs_kubernetes(module)
    loaded = load_module(EXAMPLES, module)
    for name, (trace, clustered) in STAMPED[module].items():
        task = getattr(loaded, name)
        wrapper = shlex.split(task.env_vars["_F_EXEC_WRAPPER"])
        assert wrapper[:2] == ["/bin/sh", "-c"] and wrapper[5] == trace
        assert ("_F_EXEC_WRAPPER_CLUSTERED" in task.env_vars) is clustered
        assert task.report is True


def test_profile_switch_is_off_unless_asked(monkeypatch):
    monkeypatch.delenv("PROFILE_GPU", raising=False)
    switch = importlib.reload(load_module(EXAMPLES, "flyte_profile_switch"))
    assert "_F_EXEC_WRAPPER" not in (switch.train.env_vars or {})
    assert switch.train.env_vars["PROFILE_GPU"] == "0"


@pytest.mark.nsys
def test_profile_switch_on_runs_profiled(run_action, monkeypatch):
    monkeypatch.setenv("PROFILE_GPU", "1")
    importlib.reload(load_module(EXAMPLES, "flyte_profile_switch"))
    result = run_action(EXAMPLES, "flyte_profile_switch", "train", {"steps": 4})

    assert result.error is None, result.stderr
    assert result.output == pytest.approx(0.9**4)
    assert nvtx_counts(result.report) == [{f"step_{i}": 1 for i in range(4)}]
    assert len(result.traces_named("capture_report_file")) == 1


@pytest.mark.nsys
def test_osrt_example_runs_profiled(run_action):
    needs_kubernetes("flyte_osrt")
    result = run_action(EXAMPLES, "flyte_osrt", "train", {"steps": 3})

    assert result.error is None, result.stderr
    assert result.output == 3_000_000
    assert nvtx_counts(result.report) == [{f"checkpoint_{i}": 1 for i in range(3)}]
