"""``@nsys_profile(perfetto=True)``: each capture's whole timeline is attached beside its trace, and the tab says
where; off by default (the other tasks of tests/flyte attach the trace alone: test_profiled_tasks'
test_whole_task_profile asserts it of its run)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from flyte_harness import HERE

pytestmark = [pytest.mark.flyte, pytest.mark.nsys]

MODULE = "timeline_tasks"
STEPS = 5


@pytest.mark.parametrize("task", ["whole_task_timeline", "region_timeline"])
def test_timeline_is_attached_beside_the_trace(run_action, task):  # type: ignore[no-untyped-def]
    result = run_action(HERE, MODULE, task, {"steps": STEPS})

    assert result.error is None, result.stderr
    step = "capture_report_file_sync" if task == "region_timeline" else "capture_report_file"
    trace, timeline = result.traces_named(step)
    assert trace.suffix == ".nsys-rep" and timeline.name.endswith(".perfetto.json.gz")
    assert timeline.is_relative_to(result.workdir / "raw")
    with gzip.open(timeline, "rt", encoding="utf-8") as stream:
        events = json.load(stream)["traceEvents"]
    steps = sorted(e["name"] for e in events if e.get("cat") == "nvtx" and e["name"].startswith("step_"))
    assert steps == [f"step_{i}" for i in range(STEPS)]
    assert "whole timeline for ui.perfetto.dev" in result.report and str(Path(timeline).name) in result.report

