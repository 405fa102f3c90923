"""What the step view draws agrees with the rest of the page: each drawn step's idle stretches add up to its budget's
idle parts and its wall time to the budget's, its events are every event of the trace overlapping its span, and the
median and slowest steps are those of the steady steps' times. On nsys 2025.3 exports of the H200 fix pairs."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from nsight_core.analysis.step_drawing import StepDrawing
from nsight_core.profile import build_profile
from nsight_core.trace.load import load_trace

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "h200-fix-pairs-2025"
IDLE_PARTS = ("sync_wait_ns", "launch_gap_ns", "gpu_idle_ns", "stream_wait_ns")
FRAMES = {"kernel": "kernels", "memcpy": "memcpy", "memset": "memset", "cuda_api": "cuda_api", "nvtx": "nvtx",
          "graph": "graphs"}


def drawing_of(name: str) -> StepDrawing:
    drawing = build_profile(FIXTURES / f"{name}.sqlite").steps_drawn
    assert drawing is not None
    return drawing


@pytest.mark.parametrize("name", ["sync_log-problem", "dataloader-problem", "graph-fixed", "two-problem"])
def test_drawn_steps_agree_with_the_budget_and_the_trace(name: str) -> None:
    drawing = drawing_of(name)
    trace = load_trace(FIXTURES / f"{name}.sqlite")
    assert [step.roles[0] for step in drawing.steps[:2]] in (["median", "slowest"], ["median"])
    for step in drawing.steps:
        budget = drawing.budgets.filter(pl.col("step") == step.step).row(0, named=True)
        assert step.wall_ns == budget["wall_ns"]
        assert int((step.idle["end_ns"] - step.idle["start_ns"]).sum()) == sum(budget[part] for part in IDLE_PARTS)
        assert step.left_out == 0
        drawn = dict(step.events.group_by("kind").len().iter_rows())
        for kind, frame in FRAMES.items():
            events = getattr(trace, frame)
            overlapping = events.filter((pl.col("start_ns") < step.end_ns) & (pl.col("end_ns") > step.start_ns))
            assert drawn.get(kind, 0) == overlapping.height, kind


@pytest.mark.parametrize("name", ["sync_log-problem", "two-problem"])
def test_median_and_slowest_are_the_steady_steps(name: str) -> None:
    drawing = drawing_of(name)
    steady = drawing.budgets.slice(drawing.warmup_steps).sort("wall_ns", "step")
    median, slowest = drawing.steps[0], next(step for step in drawing.steps if "slowest" in step.roles)
    assert median.step == steady["step"][(steady.height - 1) // 2]
    assert slowest.wall_ns == steady["wall_ns"].max()
