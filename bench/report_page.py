"""The report page of a large capture: its size and how long headless Chromium takes to draw it (docs/report.md).

The issue's targets: the page of the 200,000-kernel capture under 5 MB, open in headless Chromium in under 3 s.
Without --trace, the capture is made here in the shape of bench/gpu/tiny_kernels.py's (no GPU on this machine):
STEPS NVTX steps of KERNELS_PER_STEP kernels, each launched by a cudaLaunchKernel call 4 µs after the last and
running 1.5 µs, a cudaDeviceSynchronize ending each step. It is an nsys 2025.3 SQLite export of an H200 fix pair
(tests/fixtures/h200-fix-pairs-2025/gpu_bound-problem.sqlite) whose kernels, CUDA calls and NVTX ranges are
replaced by those rows (each copied from a real row of its table: names, ids, threads), so it reads as any export.

Per page: bytes; the build (`build_profile` + `render_page`, in this process); and in Chromium (each load its own
process, no GPU: software raster) the time from navigation to every chart and the step view drawn, measured by the
page itself (performance.now(): the scripts' real compute; Chromium's timers run on virtual time), and the
whole process's wall time (start-up included) against an empty page's, loaded in turn (machines are noisy: the
ratio compares across runs). The median of RUNS loads.

    .venv/bin/python bench/report_page.py [--trace PATH] [--runs 3]
"""

from __future__ import annotations

import argparse
import re
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from nsight_core.profile import build_profile
from nsight_core.render.html import render_page

FIXTURE = Path(__file__).resolve().parent.parent / "tests/fixtures/h200-fix-pairs-2025/gpu_bound-problem.sqlite"
STEPS = 200
KERNELS_PER_STEP = 1000
LAUNCH_NS, KERNEL_NS, SYNC_NS = 4_000, 1_500, 30_000
PROBE = """<script>
window.addEventListener("load", function () {
  (function wait() {
    var charts = document.querySelectorAll(".nsr-vega"), drawn = document.querySelectorAll(".nsr-vega svg");
    if (drawn.length < charts.length) { setTimeout(wait, 5); return; }
    var pre = document.createElement("pre"); pre.id = "bench"; pre.textContent = performance.now();
    document.body.appendChild(pre);
  })();
});
</script>"""


def synthetic_capture(folder: Path) -> Path:
    """The tiny_kernels-shaped export (see the module), in FOLDER."""
    target = folder / "tiny_kernels_200k.sqlite"
    shutil.copy(FIXTURE, target)
    db = sqlite3.connect(target)
    kernel = db.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()
    launch = db.execute("SELECT r.* FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                        "WHERE s.value LIKE 'cudaLaunchKernel%' LIMIT 1").fetchone()
    sync = db.execute("SELECT r.* FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                      "WHERE s.value LIKE 'cudaDeviceSynchronize%' LIMIT 1").fetchone()
    nvtx = db.execute("SELECT * FROM NVTX_EVENTS WHERE eventType = 59 LIMIT 1").fetchone()
    origin = db.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
                  "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        db.execute(f"DELETE FROM {table}")
    step_ns = KERNELS_PER_STEP * LAUNCH_NS + SYNC_NS + 10_000
    kernels, calls, ranges = [], [], []
    correlation = 1
    for step in range(STEPS):
        start = origin + step * step_ns
        for index in range(KERNELS_PER_STEP):
            at = start + index * LAUNCH_NS
            calls.append((at, at + 3_000, *launch[2:4], correlation, *launch[5:]))
            kernels.append((at + 3_500, at + 3_500 + KERNEL_NS, *kernel[2:6], correlation, *kernel[7:]))
            correlation += 1
        end = start + KERNELS_PER_STEP * LAUNCH_NS
        calls.append((end, end + SYNC_NS, *sync[2:4], correlation, *sync[5:]))
        correlation += 1
        ranges.append((start, end + SYNC_NS + 5_000, nvtx[2], *nvtx[3:6], f"step_{step}", *nvtx[7:]))
    marks = ",".join("?" * len(kernel))
    db.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({marks})", kernels)
    db.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({','.join('?' * len(launch))})", calls)
    db.executemany(f"INSERT INTO NVTX_EVENTS VALUES ({','.join('?' * len(nvtx))})", ranges)
    db.commit()
    db.close()
    return target


def chromium_load(page: Path, chromium: str) -> tuple[float, float]:
    """(ms until every chart is drawn, as the page measured it; the Chromium process's wall seconds)."""
    with tempfile.TemporaryDirectory() as profile:
        started = time.perf_counter()
        done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                               "--virtual-time-budget=30000", "--window-size=1200,2000", "--dump-dom", page.as_uri()],
                              capture_output=True, text=True, timeout=300)
        wall = time.perf_counter() - started
    found = re.search(r'<pre id="bench">([\d.]+)</pre>', done.stdout)
    if found is None:
        raise SystemExit(f"the page never finished drawing: {done.stderr[-2000:]}")
    return float(found.group(1)), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, help="a capture to report on (default: the synthetic 200 k kernels)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium: run scripts/install-chromium.sh")
    with tempfile.TemporaryDirectory() as folder:
        trace = args.trace or synthetic_capture(Path(folder))
        started = time.perf_counter()
        profile = build_profile(trace)
        page = render_page([profile])
        built = time.perf_counter() - started
        html_file = Path(folder) / "page.html"
        body, end = page.rsplit("</body>", 1)
        html_file.write_text(body + PROBE + "</body>" + end, encoding="utf-8")
        empty = Path(folder) / "empty.html"
        empty.write_text("<!DOCTYPE html><html><body>" + PROBE + "</body></html>", encoding="utf-8")
        loads, baseline = [], []
        for _ in range(args.runs):  # turn about, so a slow spell of the machine hits both
            loads.append(chromium_load(html_file, chromium))
            baseline.append(chromium_load(empty, chromium)[1])
    assert profile.trace is not None
    drawn = profile.steps_drawn.steps if profile.steps_drawn else []
    print(f"capture: {trace.name}: {profile.trace.kernel_count:,} kernels, {profile.trace.nvtx_total:,} NVTX ranges")
    print(f"page: {len(page.encode()) / 2**20:.2f} MiB; step view: {len(drawn)} steps drawn, "
          f"{sum(step.events.height for step in drawn):,} events; built in {built:.2f} s")
    print(f"Chromium: drawn in {statistics.median(ms for ms, _ in loads) / 1000:.2f} s (median of {args.runs}; "
          f"all: {', '.join(f'{ms / 1000:.2f}' for ms, _ in loads)}), process wall "
          f"{statistics.median(wall for _, wall in loads):.2f} s, {statistics.median(baseline):.2f} s for an empty "
          f"page: {statistics.median(wall for _, wall in loads) / statistics.median(baseline):.2f}x")


if __name__ == "__main__":
    main()
