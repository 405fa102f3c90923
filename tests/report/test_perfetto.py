"""`nsight export --format perfetto` and ``nsight_core.report.export_perfetto``: the file loads back as Chrome Trace
Event JSON (gzip + json) and holds every event of the trace's frames, by category, on named processes and threads.

The counts are checked against the frames of the same trace (kernels, CUDA-graph launches, copies, memsets, CUDA
API calls, NVTX ranges and marks, OS-runtime calls), on the recorded H200 captures and on a CPU capture made with
real nsys.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from capture_helpers import capture_cpu, nsight_here
from fixture_sets import fanned
from report_helpers import write_recorded

from nsight_core import load_trace
from nsight_core.nsys import Nsys
from nsight_core.render import perfetto
from nsight_core.report import build_profile, export_perfetto, render_page
from nsight_core.trace import Trace

pytestmark = pytest.mark.nsys

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def h200_sources() -> list[Path]:
    """Every H200 recording: its committed export where it has one (the nsys 2025 captures, which this nsys cannot
    export; read in place, read-only), else its .nsys-rep (copied by the test, the export lands beside the copy)."""
    sources = []
    for report in sorted(FIXTURES.glob("h200-*/*.nsys-rep")):
        exports = [path for path in (report.with_suffix(".arrowdir"), report.with_suffix(".sqlite")) if path.exists()]
        sources.append(exports[0] if exports else report)
    return sources


H200_SOURCES = h200_sources()


def loaded(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as stream:
        document = json.load(stream)
    assert document["displayTimeUnit"] == "ns"
    events: list[dict[str, Any]] = document["traceEvents"]
    return events


def expected_counts(trace: Trace) -> Counter[str]:
    """What the frames hold: a start/end NVTX range is two events (begin, end), a push/pop range one."""
    crossing = trace.nvtx.filter(pl.col("kind") != "push_pop").height
    return Counter({"kernel": trace.kernels.height, "graph": trace.graphs.height, "memcpy": trace.memcpy.height,
                    "memset": trace.memset.height,
                    "cuda_api": trace.cuda_api.height, "nvtx": trace.nvtx.height + crossing,
                    "osrt": trace.osrt.height, "nvtx_mark": trace.nvtx_marks.height})


def assert_round_trip(capture: Path, output: Path) -> list[dict[str, Any]]:
    """Export CAPTURE to OUTPUT and check the file against the trace's frames; the events."""
    written = export_perfetto(capture, output)
    events = loaded(output)
    trace = load_trace(capture)
    counted = Counter(event["cat"] for event in events if event["ph"] != "M")
    assert +counted == +expected_counts(trace)
    assert {category: count for category, count in written.events.items() if category != "__metadata"} == \
        dict(expected_counts(trace))
    # Every event sits on a named thread of a named process.
    named_threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    named_processes = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    used = {(e["pid"], e["tid"]) for e in events if e["ph"] != "M"}
    assert used <= named_threads and {pid for pid, _ in used} <= named_processes
    assert all(e["dur"] >= 0 for e in events if e["ph"] == "X")
    return events


@pytest.mark.parametrize("capture", fanned(H200_SOURCES))  # every H200 recording: make test-all
def test_h200_captures_round_trip(capture: Path, tmp_path: Path, nsys: Nsys) -> None:
    local = capture
    if capture.suffix == ".nsys-rep":
        local = tmp_path / capture.name
        local.write_bytes(capture.read_bytes())
    events = assert_round_trip(local, tmp_path / "trace.json.gz")
    trace = load_trace(local)
    if not trace.kernels.height:  # the incomplete DDP capture lost its CUDA activity: counts alone (above)
        return
    # Kernels by their names and args on their GPU's stream, at the frame's times (µs).
    first = trace.kernels.row(0, named=True)
    kernel = next(e for e in events if e.get("cat") == "kernel")
    assert kernel["args"]["kernel"] == first["name"] and kernel["args"]["correlation_id"] == first["correlation_id"]
    assert kernel["ts"] == pytest.approx(first["start_ns"] / 1000) and kernel["tid"] == first["stream"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    gpu_names = set(trace.gpus["name"].to_list())
    assert any(name.startswith("GPU ") and any(gpu in name for gpu in gpu_names) for name in names)
    assert any(name.startswith("Stream ") for name in names)


def test_training_copies_carry_their_bytes_and_direction(h200_copy: Path, tmp_path: Path, nsys: Nsys) -> None:
    events = assert_round_trip(h200_copy / "training.nsys-rep", tmp_path / "trace.json")
    copies = [e for e in events if e.get("cat") == "memcpy" and e["args"]["direction"] == "Device-to-Host"]
    assert any(e["args"]["bytes"] == 64 << 20 and e["name"] == "Memcpy Device-to-Host" for e in copies)
    steps = sorted(e["name"] for e in events if e.get("cat") == "nvtx")
    assert steps == sorted(f"step_{n}" for n in range(20))


CPU_BODY = """
import threading

def load():
    for i in range(3):
        with nvtx.annotate(f"load_{i}", domain="loader"):
            time.sleep(0.002)

worker = threading.Thread(target=load, name="loader")
worker.start()
epoch = nvtx.start_range("epoch")
for i in range(4):
    with nvtx.annotate(f"step_{i}"):
        with nvtx.annotate("compute"):
            time.sleep(0.003)
    nvtx.mark("tick")
overlap = nvtx.start_range("overlap")
nvtx.end_range(epoch)
nvtx.end_range(overlap)
worker.join()
"""


def test_cpu_capture_round_trips_with_nested_and_crossing_ranges(tmp_path: Path, nsys: Nsys) -> None:
    capture = capture_cpu(tmp_path, CPU_BODY)
    events = assert_round_trip(capture, tmp_path / "cpu.json.gz")
    nvtx = [e for e in events if e.get("cat") == "nvtx"]
    # Push/pop ranges nest as slices; the two start/end ranges that cross are begin/end pairs with one id each.
    assert sorted(e["name"] for e in nvtx if e["ph"] == "b") == ["epoch", "overlap"]
    ids = Counter(e["id"] for e in nvtx if e["ph"] in "be")
    assert len(ids) == 2 and set(ids.values()) == {2}
    assert {e["name"] for e in nvtx if e["ph"] == "X"} >= {"step_0", "compute", "loader:load_0"}
    assert sum(e["name"] == "tick" and e["ph"] == "i" for e in events) == 4
    assert any(e.get("cat") == "osrt" for e in events)
    # The loader thread is its own track, named by its id (Python does not name the OS thread); the main thread
    # by the name nsys recorded.
    loader = next(e for e in nvtx if e["name"] == "loader:load_0")
    step = next(e for e in nvtx if e["name"] == "step_0")
    assert loader["tid"] != step["tid"] and loader["pid"] == step["pid"]
    thread_names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert thread_names[loader["tid"]] == f"Thread {loader['tid']}"
    assert thread_names[step["tid"]].startswith("python")


def test_slices_join_into_one_document(h200_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       nsys: Nsys) -> None:
    """Written a few events at a time, the file holds the same events as written in one slice."""
    capture = h200_copy / "training.nsys-rep"
    whole = loaded(export_perfetto(capture, tmp_path / "whole.json").path)
    monkeypatch.setattr(perfetto, "CHUNK_ROWS", 7)
    sliced = loaded(export_perfetto(capture, tmp_path / "sliced.json").path)
    assert sliced == whole and len(whole) > 1000


def test_the_page_says_how_to_get_the_timeline(h200_copy: Path, tmp_path: Path, nsys: Nsys) -> None:
    page = render_page([build_profile(h200_copy / "training.nsys-rep")])
    assert "nsight export TRACE.nsys-rep -o timeline.json.gz" in page and "ui.perfetto.dev" in page
    recorded = write_recorded(tmp_path / "csv", "only", kernels=[("k", 10, 1)])
    assert "nsight export" not in render_page([build_profile(recorded)])  # totals only: no timeline to export


def nsight(*args: str) -> subprocess.CompletedProcess[str]:
    return nsight_here(*args)


def test_cli_export(h200_copy: Path, tmp_path: Path, nsys: Nsys) -> None:
    capture = h200_copy / "evaluation.nsys-rep"
    done = nsight("export", str(capture), "--format", "perfetto", "-o", str(tmp_path / "trace.json.gz"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "trace.json.gz") and "Traceback" not in done.stderr
    assert loaded(tmp_path / "trace.json.gz")
    beside = nsight("export", str(capture))
    assert beside.returncode == 0 and beside.stdout.strip() == str(h200_copy / "evaluation.perfetto.json.gz")
    assert "ui.perfetto.dev" in nsight("export", "--help").stdout


def test_cli_export_errors_say_what_to_do(tmp_path: Path) -> None:
    missing = nsight("export", str(tmp_path / "nope.nsys-rep"), "-o", str(tmp_path / "t.json.gz"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr
    (tmp_path / "csvs").mkdir()
    recorded = nsight("export", str(tmp_path / "csvs"), "-o", str(tmp_path / "t.json.gz"))
    assert recorded.returncode == 1 and "holds no events" in recorded.stderr
    wrong = nsight("export", str(tmp_path / "x.nsys-rep"), "--format", "pftrace")
    assert wrong.returncode == 2 and "invalid choice" in wrong.stderr
    nowhere = nsight("export", str(FIXTURES / "h200-two-streams" / "two_streams.nsys-rep"), "-o",
                     str(tmp_path / "no" / "such" / "t.json.gz"))
    assert nowhere.returncode == 1 and "does not exist" in nowhere.stderr and "Traceback" not in nowhere.stderr
