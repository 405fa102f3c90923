"""Every chart of the page is valid Vega-Lite: render/charts.py builds its specs without Altair's
validation (it walks every data row through the schema on each report), so the schema is checked here,
on real captures and recorded CSVs, once per chart kind."""

from __future__ import annotations

import shutil
from pathlib import Path

import altair as alt
import pytest

from nsight_core.profile import build_profile
from nsight_core.render.charts import capture_charts

pytestmark = pytest.mark.nsys
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.parametrize("source", ["h200-diagnosis/diagnosis.nsys-rep", "h200-torch-mlp/training.nsys-rep",
                                    "h200-torch-mlp/training"])
def test_every_chart_is_valid_vega_lite(source: str, tmp_path: Path) -> None:
    fixture = FIXTURES / source
    folder = tmp_path / fixture.parent.name
    shutil.copytree(fixture.parent, folder)
    charts = capture_charts(build_profile(folder / fixture.name))

    drawn = [chart for chart in charts if chart.spec is not None]
    assert drawn, [chart.missing for chart in charts]
    for chart in drawn:
        alt.Root.validate(chart.spec)
