"""Profiled tasks through the real `a0` entrypoint under real nsys (trace nvtx,osrt on CPU).

A task that raises, a missing nsys and a nested range are cases of the fault matrix
(tests/reliability/test_faults.py), which asserts there what was asserted here too: one run each. DDP
under torchrun (`ddp_cpu`, rank 0 alone profiled) runs through flyte's own launcher chain in
test_clustered_launcher.py, which asserts what this file's torchrun case did and more."""

from __future__ import annotations

from pathlib import Path

import pytest
from flyte_harness import HERE, nvtx_counts, parse_report, report_tabs
from profiled_tasks import HOSTILE

pytestmark = [pytest.mark.flyte, pytest.mark.nsys]

MODULE = "profiled_tasks"
STEPS = 6


def assert_trace_file(path: Path, raw: Path) -> None:
    """A complete .nsys-rep copied into the action's raw data (what the UI lets you download)."""
    assert path.suffix == ".nsys-rep"
    assert path.is_relative_to(raw), f"{path} is not under the raw data path {raw}"
    assert path.stat().st_size > 10_000


ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"


def assert_draws(chromium, name: str, page: str) -> None:  # type: ignore[no-untyped-def]
    """The task's real report.html in headless Chromium: nothing on the console, every chart drawn.
    Checked here, by the test that made the page (no test reads another test's files)."""
    ARTIFACTS.mkdir(exist_ok=True)
    html_file = ARTIFACTS / f"flyte-e2e-{name}.html"
    html_file.write_text(page)
    load = chromium.load(html_file, html_file.with_suffix(".png"))
    assert load.console == []
    marks = load.chart_marks()
    assert marks and all(count > 0 for count in marks.values()), marks


def test_whole_task_profile(run_action, chromium):
    unprofiled = __import__(MODULE).work(STEPS)
    result = run_action(HERE, MODULE, "whole_task", {"steps": STEPS})

    assert result.error is None, result.stderr
    assert result.output == unprofiled
    page = result.report
    assert report_tabs(page) == ["GPU Profile"]
    assert [s for s in parse_report(page).headings if s.startswith("Nsight")] == ["Nsight task: whole_task"]
    assert nvtx_counts(page) == [{**{f"step_{i}": 1 for i in range(STEPS)}, HOSTILE: 1}]
    assert HOSTILE not in page  # escaped
    assert_draws(chromium, "whole_task", page)
    [trace] = result.traces_named("capture_report_file")  # the trace alone: no timeline unless perfetto=True
    assert_trace_file(trace, result.workdir / "raw")
    assert "whole timeline for ui.perfetto.dev" not in page
    assert "WARNING" not in result.stderr.replace("WARNING Flyte runtime", "")


@pytest.mark.parametrize("task", ["regions_async", "regions_sync"])
def test_manual_regions(run_action, chromium, task):
    result = run_action(HERE, MODULE, task, {"steps": STEPS})

    assert result.error is None, result.stderr
    assert result.output == __import__(MODULE).work(STEPS, "train") + __import__(MODULE).work(2, "eval")
    page = result.report
    headings = [s for s in parse_report(page).headings if s.startswith("Nsight")]
    assert headings == ["Nsight region: training", "Nsight region: evaluation"]
    assert nvtx_counts(page) == [{f"train_{i}": 1 for i in range(STEPS)}, {"eval_0": 1, "eval_1": 1}]
    assert_draws(chromium, task, page)
    step = "capture_report_file" if task == "regions_async" else "capture_report_file_sync"
    traces = result.traces_named(step)
    assert [t.stem for t in traces] == ["training", "evaluation"]
    for trace in traces:
        assert_trace_file(trace, result.workdir / "raw")


@pytest.mark.parametrize("rank", ["0", "1"])
def test_clustered_worker(run_action, rank):
    result = run_action(HERE, MODULE, "clustered", {"steps": STEPS},
                        env={"FLYTE_CLUSTERED_WORKER": "1", "RANK": rank})

    assert result.returncode == 0 and result.error is None, result.stderr
    assert f"rank {rank} done" in result.stderr
    assert result.traces == []  # a clustered worker has no controller, so no traced step
    raw = result.workdir / "raw"
    uploaded = list(raw.rglob("*.nsys-rep"))
    if rank == "1":  # not wrapped by the runtime: no session, no capture, nothing in the report
        assert result.output is None  # flyte uploads outputs from rank 0 only
        assert not (result.workdir / "tmp" / "nsight").exists()
        assert report_tabs(result.report) == []
        assert uploaded == []
        return
    assert result.output == "rank 0 done"
    [trace] = uploaded
    assert_trace_file(trace, raw)
    assert nvtx_counts(result.report) == [{f"step_{i}": 1 for i in range(STEPS)}]
    assert f"trace (.nsys-rep) uploaded to {trace}" in result.report


FAULTS = {
    "start fails": ("echo 'Error: collection could not be started' >&2", "nsys start for region"),
    "no permission": ("echo 'ERR_NVGPUCTRPERM: insufficient privileges' >&2",
                      "NVreg_RestrictProfilingToAdminUsers=0"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_nsys_start_failure_runs_unprofiled_with_one_warning(run_action, tmp_path, fault):
    """A fake nsys only injects the fault: everything but `nsys start` is the real nsys."""
    from nsight_core import find_nsys

    script, expected = FAULTS[fault]
    fake = tmp_path / "fake-nsys"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = start ]; then {script}; exit 1; fi\n'
                    f'exec {find_nsys().path} "$@"\n')
    fake.chmod(0o755)
    result = run_action(HERE, MODULE, "whole_task", {"steps": STEPS}, env={"NSIGHT_NSYS": str(fake)})

    assert result.error is None, result.stderr
    assert result.output == __import__(MODULE).work(STEPS)
    warnings = [line for line in result.stderr.splitlines() if "could not start collection" in line]
    assert len(warnings) == 1, result.stderr
    assert expected in result.stderr
    assert report_tabs(result.report) == [] and result.traces == []


def test_plain_with_in_an_async_task_reports_but_does_not_hang(run_action):
    result = run_action(HERE, MODULE, "plain_with_in_async", {"steps": STEPS})

    assert result.error is None, result.stderr
    assert result.output == __import__(MODULE).work(STEPS)
    assert nvtx_counts(result.report) == [{f"step_{i}": 1 for i in range(STEPS)}]
    assert result.traces == []
    assert "write `async with nsys.range(...)` there" in result.stderr
