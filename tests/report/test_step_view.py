"""The step view in headless Chromium, as a person uses it: the median and slowest step drawn with their GPU idle
stretches labelled, zoom by Ctrl+wheel, hover naming an event, and a finding's evidence bringing its event into view.

A probe script appended to the page does what the person would (a wheel event, a mouse move, a click) and writes
what the view then shows into the DOM, which the test reads back (Chromium's --dump-dom).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from fixture_sets import unpacked
from report_helpers import Chromium

from nsight_core.analysis import step_drawing
from nsight_core.analysis.capture_profile import CaptureProfile
from nsight_core.nsys import Nsys
from nsight_core.profile import build_profile
from nsight_core.render.html import render_page
from nsight_core.render.step_view import step_view_data
from nsight_core.trace.load import load_trace
from nsight_core.units import duration

pytestmark = pytest.mark.browser

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

PROBE = """
<script>
(function () {
  var out = {}, view = document.querySelector("[data-nsr-steps]"), canvas = view.querySelector("canvas");
  var tip = view.querySelector(".nsr-sv-tip");
  function inked(c) {
    var copy = document.createElement("canvas"), g = copy.getContext("2d", {willReadFrequently: true}), n = 0;
    copy.width = c.width; copy.height = c.height; g.drawImage(c, 0, 0);
    var d = g.getImageData(0, 0, c.width, c.height).data;
    for (var i = 0; i < d.length; i += 4) { if (d[i + 3] && (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200)) n++; }
    return n;
  }
  function hoverAcross(x, target) {
    target = target || canvas;
    var box = target.getBoundingClientRect(), seen = [];
    // From a twentieth of the width: steps of alike spans share one axis, where the median step may fill only its first
    // quarter (a step slowed by the machine's load, up to 4x the median, sets the axis).
    if (x === null) { return [0.05, 0.15, 0.3, 0.45, 0.6, 0.75].reduce(function (all, f) {
      return all.concat(hoverAcross(190 + (box.width - 190) * f, target)); }, []); }
    for (var y = 4; y < box.height; y += 5) {
      target.dispatchEvent(new MouseEvent("mousemove", {clientX: box.left + x, clientY: box.top + y, bubbles: true}));
      if (tip.style.display === "block") { seen.push(tip.textContent); }
    }
    return seen;
  }
  out.inked = Array.prototype.map.call(view.querySelectorAll("canvas"), inked);
  out.full = view.getAttribute("data-nsr-view");
  var box = canvas.getBoundingClientRect();
  canvas.dispatchEvent(new WheelEvent("wheel", {deltaY: -500, ctrlKey: true, clientX: box.left + box.width * 0.6,
                                                clientY: box.top + 30, bubbles: true, cancelable: true}));
  out.zoomed = view.getAttribute("data-nsr-view");
  out.zoomedInked = inked(canvas);
  canvas.dispatchEvent(new MouseEvent("dblclick", {bubbles: true}));
  out.reset = view.getAttribute("data-nsr-view");
  out.hover = hoverAcross(null);
  var wanted = %s, evidence = Array.prototype.find.call(document.querySelectorAll("[data-nsr-where]"),
    function (e) { return wanted && e.textContent.indexOf(wanted) >= 0; });
  if (evidence) {
    evidence.click();
    out.focus = view.getAttribute("data-nsr-focus");
    out.focused = view.getAttribute("data-nsr-view");
    var titles = Array.prototype.map.call(view.querySelectorAll(".nsr-sv-title"),
                                          function (t) { return t.textContent; });
    var shown = titles.findIndex(function (t) { return t.indexOf("step " + out.focus.split(" ")[0] + ",") >= 0; });
    out.focusHover = hoverAcross(190 + (box.width - 190) / 2, view.querySelectorAll("canvas")[shown]);
  }
  var pre = document.createElement("pre");
  pre.id = "nsr-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def probe(profile: CaptureProfile, chromium: Chromium, artifacts: Path, name: str,
          evidence: str | None = None) -> tuple[dict[str, Any], str]:
    """PROFILE's page loaded in Chromium with the probe run (clicking the evidence whose text holds EVIDENCE):
    what the probe saw, and the DOM."""
    page = render_page([profile], title=f"Step view: {name}")
    body, end = page.rsplit("</body>", 1)
    html_file = artifacts / f"step-view-{name}.html"
    html_file.write_text(body + PROBE % json.dumps(evidence) + "</body>" + end)
    load = chromium.load(html_file, artifacts / f"step-view-{name}.png", width=1200, height=2400)
    assert load.console == []
    found = re.search(r'<pre id="nsr-probe">(.*?)</pre>', load.dom, re.S)
    assert found is not None, load.dom[-3000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">")), load.dom


def span(view: str) -> int:
    start, end = (int(value) for value in view.split())
    return end - start


def test_sync_log_median_step_shows_the_log_wait(tmp_path: Path, chromium: Chromium, artifacts: Path,
                                                  nsys: Nsys) -> None:
    """nsys 2023.4.4's capture of the sync_log fix pair: its median step holds a ~2.4 ms sync wait while the host
    is in the `log` range, drawn and listed; zoom narrows the axis; the evidence '(range log)' zooms to that range."""
    capture = tmp_path / "sync_log-problem.nsys-rep"
    shutil.copy(FIXTURES / "h200-fix-pairs" / capture.name, capture)
    capture.chmod(0o644)
    profile = build_profile(capture)
    seen, dom = probe(profile, chromium, artifacts, "sync_log", evidence="(range log)")
    median = re.search(r'<div class="nsr-sv-title">Median step: step (\d+), ([\d.]+) ms', dom)
    assert median is not None
    waits = re.findall(r"<li data-nsr-idle=\"0 [^\"]+\">sync waits: in range log: ([\d.]+) ms at", dom)
    assert waits and 2.0 <= float(waits[0]) <= 3.0, waits
    assert "Slowest step: step" in dom
    assert all(count > 2000 for count in seen["inked"]), seen["inked"]  # both panels drawn
    assert span(seen["zoomed"]) < 0.6 * span(seen["full"]) and seen["zoomedInked"] > 500
    assert seen["reset"] == seen["full"]
    assert any("cudaStreamSynchronize" in text and "CUDA call" in text for text in seen["hover"]), seen["hover"]
    # The evidence brings the median step's `log` range into view, centred, and hover names it.
    assert seen["focus"].split()[0] == median.group(1)
    assert span(seen["focused"]) < span(seen["full"]) / 2
    assert any(text.startswith("log") and "NVTX range" in text for text in seen["focusHover"]), seen["focusHover"]


@pytest.mark.parametrize("name", ["graph-fixed", *(pytest.param(name, marks=pytest.mark.exhaustive)
                                                   for name in ("sync_log-problem", "dataloader-problem"))])
def test_nsys_2025_captures(name: str, chromium: Chromium, artifacts: Path) -> None:
    """nsys 2025.3's SQLite exports: GPU rows and idle causes drawn; CUDA graph launches in their stream's row."""
    profile = build_profile(FIXTURES / "h200-fix-pairs-2025" / f"{name}.sqlite")
    assert profile.steps_drawn is not None
    seen, dom = probe(profile, chromium, artifacts, f"2025-{name}")
    assert re.search(r"GPU idle in all: [\d,]+ stretches, [\d.]+ (ms|µs)", dom)
    assert all(count > 2000 for count in seen["inked"]), seen["inked"]
    assert span(seen["zoomed"]) < 0.6 * span(seen["full"])
    kinds = {kind for step in profile.steps_drawn.steps for kind in step.events["kind"].to_list()}
    if name == "graph-fixed":
        assert "graph" in kinds and "CUDA graph launch" in dom
    assert kinds & {"kernel", "graph"} and seen["hover"]


def test_cpu_capture(cpu_steps: Path, chromium: Chromium, artifacts: Path) -> None:
    """A CPU-only capture (real nsys, NVTX steps of 10 ms sleeps and 2 ms spins): its steps drawn on the CPU's clock,
    one NVTX row, no idle stretches (its GPU is idle by design), zoom and hover as on a GPU capture."""
    profile = build_profile(cpu_steps)
    seen, dom = probe(profile, chromium, artifacts, "cpu")
    # The median step's own time, whatever the machine's load made it (at least its 10 ms sleep).
    assert profile.steps_drawn is not None
    median = next(step for step in profile.steps_drawn.steps if "median" in step.roles)
    assert median.wall_ns >= 10_000_000
    assert f"Median step: step {median.step}, {duration(median.wall_ns)} (its NVTX range)" in dom
    assert "GPU idle in all" not in dom and "The median step (step" not in dom  # its GPU is idle by design
    assert seen["inked"][0] > 1000
    assert span(seen["zoomed"]) < 0.6 * span(seen["full"])
    assert any(text.startswith("step_") and "NVTX range" in text for text in seen["hover"]), seen["hover"]


def test_evidence_with_an_event_zooms_to_it(chromium: Chromium, artifacts: Path) -> None:
    """The pageable fix pair's largest copy (evidence with its step and start): a click brings that copy into view,
    centred and outlined (a 64 MiB pageable copy is most of its step), and hover there names it with its size."""
    profile = build_profile(FIXTURES / "h200-fix-pairs" / "pageable-problem.arrowdir")
    seen, _ = probe(profile, chromium, artifacts, "pageable", evidence="largest copy")
    step, event = seen["focus"].split()
    assert step == "0" and event  # step 0 (the slowest), and an event of it
    assert any(text.startswith("Host-to-Device") and "copy" in text and "64.00 MiB" in text
               for text in seen["focusHover"]), seen["focusHover"]


def test_a_step_of_too_many_events_keeps_the_longest(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step holding more events than a step draws keeps its longest and the page says how many it left out."""
    monkeypatch.setattr(step_drawing, "MAX_EVENTS", 40)
    profile = build_profile(FIXTURES / "h200-fix-pairs-2025" / "sync_log-problem.sqlite")
    assert profile.steps_drawn is not None
    median = profile.steps_drawn.steps[0]
    assert median.events.height == 40 and median.left_out > 0
    kept = (median.events["end_ns"] - median.events["start_ns"]).min()
    every = step_drawing.step_events(load_trace(FIXTURES / "h200-fix-pairs-2025" / "sync_log-problem.sqlite"),
                                    median.start_ns, median.end_ns)
    assert (every["end_ns"] - every["start_ns"]).sort(descending=True)[39] == kept
    assert f"The {median.left_out:,} shortest of its events are left out" in render_page([profile])


def test_kernels_in_an_anonymous_namespace_are_named_by_their_function() -> None:
    """A foreach optimizer's kernels (``void at::native::<unnamed>::multi_tensor_apply_kernel<...>(...)``) are labelled
    ``multi_tensor_apply_kernel`` in the step view, as in the charts, not left blank."""
    profile = build_profile(unpacked("h200-fix-pairs-v2-2025") / "per_param-fixed.sqlite")
    assert profile.steps_drawn is not None
    data = step_view_data(profile.steps_drawn)
    shorts = {short for name, short in zip(data["names"], data["short"], strict=True) if "<unnamed>::" in name}
    assert shorts == {"multi_tensor_apply_kernel"}
    assert "" not in data["short"] and not any(short.startswith("void ") for short in data["short"])
