"""How the step view's two candidate renderers draw one step of many events in headless Chromium (docs/report.md).

Candidates: the page's own canvas renderer (render/step_view.js) and Vega-Lite (the page's charts: a rect per event,
zoom and pan by an interval selection bound to the x scale), with Vega's canvas and its SVG renderer. Per
candidate: the first draw (from the script's start to the drawn view; Vega's bundle, which the page loads for its
charts anyway, is parsed before), and the mean time of one zoom step (a
Ctrl+wheel event on the view, until it is drawn again: what a person feels as smooth or not). One synthetic step
of EVENTS events: half kernels back to back on 4 GPU streams, half CUDA calls on 2 threads, 40 idle stretches.
Each page runs in a Chromium of its own (no GPU: software raster, as in CI); performance.now() measures the
scripts' real compute (timers run on Chromium's virtual time, so no waiting is counted).

    .venv/bin/python bench/step_view_render.py [EVENTS ...]     (default: 1000 3000 6000)
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

from nsight_core.analysis.step_drawing import EVENT_SCHEMA, DrawnStep, StepDrawing
from nsight_core.render.html import script_json, vega_bundle
from nsight_core.render.step_view import step_view_data, step_view_script

ZOOMS = 30
MEASURE = """
function report(result) {
  var pre = document.createElement("pre"); pre.id = "bench"; pre.textContent = JSON.stringify(result);
  document.body.appendChild(pre);
}
"""
CANVAS_PAGE = """<!DOCTYPE html><html><body style="width:1100px"><script>%(measure)s</script>
<div id="v" data-nsr-steps="d" style="position:relative"><div class="nsr-sv-panel"><canvas style="display:block;
width:100%%;height:120px"></canvas></div><div class="nsr-sv-tip"></div></div>
<script type="application/json" id="d">%(data)s</script>
<script>
var t0 = performance.now();
%(script)s
window.nsightStepView.install(document);
var t1 = performance.now(), canvas = document.querySelector("canvas"), box = canvas.getBoundingClientRect();
for (var i = 0; i < %(zooms)d; i++) {
  canvas.dispatchEvent(new WheelEvent("wheel", {deltaY: i < %(zooms)d / 2 ? -200 : 200, ctrlKey: true,
    clientX: box.left + box.width * 0.6, clientY: box.top + 30, bubbles: true, cancelable: true}));
}
report({first_ms: t1 - t0, zoom_ms: (performance.now() - t1) / %(zooms)d});
</script></body></html>"""
VEGA_PAGE = """<!DOCTYPE html><html><body><script>%(measure)s</script><div id="v"></div>
<script>%(bundle)s</script>
<script>var t0 = performance.now();
vegaEmbed("#v", %(spec)s, {renderer: "%(renderer)s", actions: false}).then(async function (result) {
  await result.view.runAsync();
  // The domain a wheel event would set (synthetic wheel events do not reach Vega's handlers), zooming in then out.
  var t1 = performance.now(), full = result.view.scale("x").domain(), a = full[0], b = full[1];
  for (var i = 0; i < %(zooms)d; i++) {
    var factor = i < %(zooms)d / 2 ? 0.74 : 1 / 0.74, at = a + (b - a) * 0.6;
    a = at - (at - a) * factor; b = at + (b - at) * factor;
    result.view.signal("zoom_start_ns", [a, b]);
    await result.view.runAsync();
    if (i === %(zooms)d / 2 - 1) { var middle = result.view.scale("x").domain(); }
  }
  report({first_ms: t1 - t0, zoom_ms: (performance.now() - t1) / %(zooms)d,
          zoomed_to: [a, b], mid_domain: middle});
});
</script></body></html>"""


def synthetic(events: int) -> StepDrawing:
    """One step of EVENTS events (see the module)."""
    half = events // 2
    kernels = pl.DataFrame({"lane": "gpu", "device": 0, "stream": [7 + i % 4 for i in range(half)], "thread": None,
                            "kind": "kernel", "name": [f"void kernel_{i % 40}<float>(T1)" for i in range(half)],
                            "bytes": None, "depth": 0, "start_ns": [i * 2_000 for i in range(half)],
                            "end_ns": [i * 2_000 + 1_500 for i in range(half)]}, schema=EVENT_SCHEMA)
    calls = pl.DataFrame({"lane": "cpu", "device": None, "stream": None, "thread": [1 + i % 2 for i in range(half)],
                          "kind": "cuda_api", "name": "cudaLaunchKernel", "bytes": None, "depth": 0,
                          "start_ns": [i * 2_000 for i in range(half)],
                          "end_ns": [i * 2_000 + 900 for i in range(half)]}, schema=EVENT_SCHEMA)
    span = half * 2_000
    idle = pl.DataFrame({"start_ns": [span * i // 40 + 1_500 for i in range(40)],
                         "end_ns": [span * i // 40 + 2_000 for i in range(40)], "part": "launch_gap",
                         "cpu_kind": "dispatch", "cpu_name": "cudaLaunchKernel"})
    step = DrawnStep(step=1, roles=["median", "slowest"], start_ns=0, end_ns=span, gpu_start_ns=0, gpu_end_ns=span,
                     cpu_start_ns=0, cpu_end_ns=span, wall_ns=span, events=pl.concat([kernels, calls]).sort("start_ns"),
                     idle=idle, left_out=0)
    return StepDrawing(clock="gpu", source="nvtx", steps=[step], thread_names={1: "python3", 2: "worker"},
                       budgets=pl.DataFrame(), warmup_steps=0, median_step=1, slowest_step=1)


def vega_spec(drawing: StepDrawing) -> dict[str, object]:
    """The same step as a Vega-Lite chart: a rect per event on its row, zoom and pan bound to the x scale."""
    step = drawing.steps[0]
    rows = step.events.select(
        pl.when(pl.col("lane") == "gpu").then(pl.format("stream {}", "stream")).otherwise(pl.format("thread {}",
                                                                                                   "thread")).alias(
            "row"), "name", "kind", "start_ns", "end_ns").to_dicts()
    return {"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "width": 900, "height": 120,
            "data": {"values": rows},
            "params": [{"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales"}],
            "mark": {"type": "rect"},
            "encoding": {"x": {"field": "start_ns", "type": "quantitative"}, "x2": {"field": "end_ns"},
                         "y": {"field": "row", "type": "nominal"}, "color": {"field": "kind", "type": "nominal"},
                         "tooltip": [{"field": "name"}, {"field": "start_ns"}]}}


def measure(page: str, chromium: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "page.html"
        path.write_text(page)
        done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={folder}/p",
                               "--virtual-time-budget=60000", "--window-size=1200,900", "--dump-dom", path.as_uri()],
                              capture_output=True, text=True, timeout=300)
    found = re.search(r'<pre id="bench">(.*?)</pre>', done.stdout)
    if found is None:
        raise SystemExit(f"no result: {done.stderr[-2000:]}")
    return json.loads(found.group(1))


def main() -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium: run scripts/install-chromium.sh")
    sizes = [int(arg) for arg in sys.argv[1:]] or [1000, 3000, 6000]
    print("| events | renderer | first draw | one zoom step |\n|---:|---|---:|---:|")
    for events in sizes:
        drawing = synthetic(events)
        pages = {
            "canvas (render/step_view.js)": CANVAS_PAGE % {"measure": MEASURE, "data": script_json(
                step_view_data(drawing)), "script": step_view_script(), "zooms": ZOOMS},
            **{f"Vega-Lite, {renderer} renderer": VEGA_PAGE % {
                "measure": MEASURE, "bundle": vega_bundle(),
                "spec": script_json(vega_spec(drawing)), "renderer": renderer, "zooms": ZOOMS}
               for renderer in ("canvas", "svg")},
        }
        for name, page in pages.items():
            result = measure(page, chromium)
            print(f"| {events:,} | {name} | {result['first_ms']:.0f} ms | {result['zoom_ms']:.1f} ms |", flush=True)


if __name__ == "__main__":
    main()
