"""The budget drawn: the median step as one bar of its parts (labelled where large), every step's stacked bar, and a
long capture's steps in groups; the bars add up to the steps' time, as the budget does."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import polars as pl
import pytest

from nsight_core.analysis.budget import PARTS
from nsight_core.analysis.step_drawing import StepDrawing
from nsight_core.profile import build_profile
from nsight_core.render.charts import MAX_BUDGET_BARS, budget_charts

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="module")
def sync_log() -> StepDrawing:
    drawing = build_profile(FIXTURES / "h200-fix-pairs-2025" / "sync_log-problem.sqlite").steps_drawn
    assert drawing is not None
    return drawing


def test_median_step_is_one_bar_of_its_parts(sync_log: StepDrawing) -> None:
    median, steps = budget_charts(sync_log)
    assert median.spec is not None and steps.spec is not None
    alt.Root.validate(median.spec)
    alt.Root.validate(steps.spec)
    rows = median.spec["datasets"]["median"]
    wall = sync_log.budgets.filter(pl.col("step") == sync_log.median_step)["wall_ns"].item()
    assert {row["step"] for row in rows} == {sync_log.median_step}
    assert sum(row["ns"] for row in rows) == wall
    assert f"step {sync_log.median_step}" in median.title
    labels = [row["label"] for row in rows if row["label"]]
    assert any(label.startswith("GPU compute") for label in labels)
    sync = next(row for row in rows if row["part"] == "sync waits")
    # The capture's problem and its cause, readable in place, with its share of the step.
    assert f"sync waits {round(100 * sync['ns'] / wall)}% (in range log)" in labels and sync["ns"] > 0.2 * wall


def test_every_step_is_a_stacked_bar(sync_log: StepDrawing) -> None:
    _, steps = budget_charts(sync_log)
    assert steps.spec is not None
    rows = pl.DataFrame(steps.spec["datasets"]["budgets"])
    assert rows["step"].n_unique() == sync_log.budgets.height
    totals = rows.group_by("step").agg(pl.col("ns").sum()).join(sync_log.budgets, on="step")
    assert (totals["ns"] == totals["wall_ns"]).all()


def test_long_captures_draw_groups_of_steps(sync_log: StepDrawing) -> None:
    steps = 5_000
    budgets = pl.DataFrame({"step": range(steps), "wall_ns": [1_000] * steps,
                            **{f"{part}_ns": [1_000 if part == "compute" else 0] * steps for part in PARTS}})
    _, chart = budget_charts(sync_log.model_copy(update={"budgets": budgets, "median_step": 7}))
    assert chart.spec is not None
    bars = {row["step"] for row in chart.spec["datasets"]["budgets"]}
    assert len(bars) <= MAX_BUDGET_BARS and "mean of 25 consecutive steps" in chart.title
