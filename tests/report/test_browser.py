"""The report in headless Chromium, as a person opens it: no console errors, every chart drawn.

Screenshots go to tests/artifacts/ (report-h200.png is the one the README shows, refreshed with
`cp tests/artifacts/report-h200.png docs/`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from flyte.report._report import Report
from report_helpers import Chromium, PageLoad, write_recorded
from test_html import HOSTILE_NVTX, hostile_profile
from test_size import many_kernels

from nsight_core.nsys import Nsys
from nsight_core.profile import build_profile
from nsight_core.render.html import render_fragment, render_page

pytestmark = pytest.mark.browser


def assert_drawn(load: PageLoad, page: str) -> None:
    """Nothing on the console, and every chart container in PAGE holds an SVG with marks."""
    assert load.console == []
    expected = len(re.findall(r'class="nsr-vega"', page))
    marks = load.chart_marks()
    assert len(marks) == expected > 0
    assert all(count > 0 for count in marks.values()), marks
    assert load.screenshot.stat().st_size > 20_000


def test_h200_report(h200_copy: Path, chromium: Chromium, artifacts: Path, nsys: Nsys) -> None:
    profiles = [build_profile(h200_copy / f"{region}.nsys-rep") for region in ("training", "evaluation")]
    page = render_page(profiles, title="GPU Profile: H200 torch MLP")
    html_file = artifacts / "report-h200.html"
    html_file.write_text(page)
    load = chromium.load(html_file, artifacts / "report-h200.png", width=1100, height=2600)
    assert_drawn(load, page)
    # Seven charts a section, one explained instead: evaluation copies no memory. step_0..step_19 are
    # one family, so the spread of repeated ranges is drawn for training too. The first two are the budget's:
    # the median step's bar and every step's.
    assert len(load.chart_marks()) == 13
    assert page.count("The median step (step ") == 2 and page.count("Where each step&#39;s time went") == 2
    # Each section draws its median and slowest step.
    assert load.dom.count('class="nsr-sv-panel"') >= 4 and "Median step: step" in load.dom
    assert "no memory copies or memsets" in page and "no NVTX range" not in page
    # What to fix comes first and is in the page the browser drew.
    assert load.dom.index("What to fix") < load.dom.index('class="nsr-tiles"')
    assert "Device-to-Host copies use pageable host memory" in load.dom
    assert "≈ " in load.dom and "per step" in load.dom


def test_flyte_report_tab(h200_copy: Path, tmp_path: Path, chromium: Chromium, artifacts: Path,
                          nsys: Nsys) -> None:
    """The fragment inside Flyte's own report template, two regions and a note, as the adapter writes it."""
    profiles = [
        build_profile(h200_copy / "training.nsys-rep", title="Nsight region: training"),
        hostile_profile(tmp_path),
    ]
    report = Report(name="report")
    report.get_tab("GPU Profile").replace(render_fragment(profiles, ["training: trace (.nsys-rep) uploaded "
                                                                     "to s3://bucket/<x>/training.nsys-rep"]))
    page = report.get_final_report()
    assert isinstance(page, str)
    html_file = artifacts / "report-flyte.html"
    html_file.write_text(page)
    load = chromium.load(html_file, artifacts / "report-flyte.png")
    assert_drawn(load, page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in load.dom
    assert HOSTILE_NVTX not in load.dom
    assert "s3://bucket/&lt;x&gt;/training.nsys-rep" in load.dom


def test_ten_thousand_kernels(tmp_path: Path, chromium: Chromium, artifacts: Path) -> None:
    page = render_page([build_profile(many_kernels(tmp_path))])
    html_file = artifacts / "report-10k-kernels.html"
    html_file.write_text(page)
    assert_drawn(chromium.load(html_file, artifacts / "report-10k-kernels.png"), page)


def test_recorded_csvs_only(tmp_path: Path, chromium: Chromium, artifacts: Path) -> None:
    path = write_recorded(tmp_path, "csv", kernels=[("void k<int>(T1)", 500, 2)], nvtx=[("step", 100, 2)])
    page = render_page([build_profile(path)])
    html_file = artifacts / "report-csv-only.html"
    html_file.write_text(page)
    load = chromium.load(html_file, artifacts / "report-csv-only.png")
    assert_drawn(load, page)
    assert "needs the event trace" in load.dom


CLICK_SORT = """
<script>
  var table = document.querySelector("table.nsr-sortable");
  var header = Array.prototype.find.call(table.querySelectorAll("th"), function (th) {
    return th.textContent === "instances"; });
  header.click();
  var result = document.createElement("pre");
  result.id = "sorted";
  result.textContent = Array.prototype.map.call(table.tBodies[0].rows, function (row) {
    return row.cells[0].textContent; }).join("|");
  document.body.appendChild(result);
</script>
"""


def test_clicking_a_header_sorts_the_table(tmp_path: Path, chromium: Chromium, artifacts: Path) -> None:
    path = write_recorded(tmp_path, "sort", kernels=[("big_few", 9000, 1), ("mid_many", 5000, 50),
                                                      ("small_some", 100, 7)])
    page = render_page([build_profile(path, reports=["cuda_gpu_kern_sum"])])
    assert page.index("big_few") < page.index("mid_many")  # nsys order: by total time
    html_file = artifacts / "report-sort.html"
    body, end = page.rsplit("</body>", 1)
    html_file.write_text(body + CLICK_SORT + "</body>" + end)
    load = chromium.load(html_file, artifacts / "report-sort.png")
    assert load.console == []
    sorted_rows = re.search(r'<pre id="sorted">(.*?)</pre>', load.dom)
    assert sorted_rows is not None and sorted_rows.group(1) == "mid_many|small_some|big_few"


def test_cpu_capture_leads_with_what_it_captured(cpu_steps: Path, chromium: Chromium, artifacts: Path) -> None:
    """A CPU-only capture (real nsys, NVTX + OS runtime; six steps): What to fix, NVTX and OS calls; no wall of GPU
    tiles."""
    page = render_page([build_profile(cpu_steps)])
    html_file = artifacts / "report-cpu.html"
    html_file.write_text(page)
    load = chromium.load(html_file, artifacts / "report-cpu.png")
    assert_drawn(load, page)
    assert "What to fix" in load.dom and "steps: 6 x step_{n} (nvtx)" in load.dom
    assert "OS runtime calls by total time" in load.dom and "no GPU activity in this capture" in load.dom
    assert load.dom.count('class="nsr-tile nsr-missing"') == 1
