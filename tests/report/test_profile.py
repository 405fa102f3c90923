"""build_profile on real captures: the H200 fixture's numbers, recorded CSVs, and a CPU-only capture."""

from __future__ import annotations

import csv
import sqlite3
import sys
import textwrap
from pathlib import Path

import pytest

from nsight_core.analysis.capture_profile import CaptureProfile
from nsight_core.analysis.summary import Tile
from nsight_core.analysis.trace_summary import summarize_trace
from nsight_core.nsys import Nsys
from nsight_core.profile import build_profile, capture_paths
from nsight_core.render.charts import timeline_chart
from nsight_core.session import Session
from nsight_core.trace import load_trace

pytestmark = pytest.mark.nsys
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def tile(profile: CaptureProfile, label: str) -> Tile:
    return next(t for t in profile.tiles if t.label == label)


def union_length(rows: list[tuple[int, int]]) -> int:
    """Plain-Python interval union: an independent check of the Polars implementation."""
    total, reach = 0, None
    for start, end in sorted(rows):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def csv_instances(path: Path, column: str) -> int:
    with path.open() as handle:
        return sum(int(row[column]) for row in csv.DictReader(handle))


def test_h200_training_tiles_match_the_export_and_the_recorded_csvs(h200_copy: Path, nsys: Nsys) -> None:
    recorded_kernels = csv_instances(h200_copy / "training_cuda_gpu_kern_sum.csv", "Instances")
    profile = build_profile(h200_copy / "training.nsys-rep")
    nsys.export(h200_copy / "training.nsys-rep", h200_copy / "training.sqlite", "sqlite")  # the independent truth
    with sqlite3.connect(h200_copy / "training.sqlite") as db:
        kernels = db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
        bounds = [db.execute(f"SELECT MIN(start), MAX(end) FROM {table}").fetchone() for table in (
            "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")]
    span = max(end for _, end in bounds) - min(start for start, _ in bounds)
    busy = union_length(kernels)

    assert tile(profile, "Capture span").number == span
    assert tile(profile, "GPU kernel time").number == busy
    assert tile(profile, "GPU busy").number == pytest.approx(busy / span)
    assert tile(profile, "GPU busy").value == f"{busy / span:.1%}"
    assert tile(profile, "Kernel launches").number == recorded_kernels == len(kernels) == 361
    assert tile(profile, "Distinct kernels").number == 14
    assert tile(profile, "NVTX range instances").number == 20
    assert tile(profile, "Host-to-Device copies").value == "64.00 MiB"
    assert tile(profile, "Device-to-Host copies").value == "64.00 MiB"
    assert tile(profile, "Device-to-Device copies").detail.startswith("20 operations")
    assert tile(profile, "Memsets").detail.startswith("40 operations")
    assert tile(profile, "NCCL share").number == 0.0
    assert profile.trace is not None and profile.trace.devices == 1
    assert profile.trace.copy_count == 22 + 40  # memcpy rows + memset rows in the export
    assert [i.name for i in profile.trace.nvtx] == [f"step_{n}" for n in range(20)]
    # The busy timeline adds up to the same union (buckets partition the span).
    assert sum((b.end_ns - b.start_ns) * b.kernel_fraction for b in profile.trace.timeline) == pytest.approx(busy)


def test_overlapping_streams_count_once_in_gpu_busy(tmp_path: Path, nsys: Nsys) -> None:
    """A real H200 region with two streams of concurrent matmuls (bench/gpu/streams.py): kernel
    time summed per kernel exceeds the time the GPU was busy, and the report shows the busy time."""
    rep = tmp_path / "two_streams.nsys-rep"
    rep.write_bytes((FIXTURES / "h200-two-streams" / "two_streams.nsys-rep").read_bytes())
    profile = build_profile(rep)
    nsys.export(rep, tmp_path / "two_streams.sqlite", "sqlite")
    with sqlite3.connect(tmp_path / "two_streams.sqlite") as db:
        kernels = db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
        streams = db.execute("SELECT COUNT(DISTINCT streamId) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    summed = sum(end - start for start, end in kernels)
    busy = union_length(kernels)

    assert (len(kernels), streams) == (80, 2)
    assert busy < 0.8 * summed, "the recording must really overlap, or this test proves nothing"
    assert tile(profile, "GPU kernel time").number == busy
    assert sum(k.total_time_ns for k in profile.stats.kernels) == summed
    assert tile(profile, "GPU busy").number == pytest.approx(busy / tile(profile, "Capture span").number)
    assert tile(profile, "NVTX range instances").number == 10


def test_one_export_per_capture(h200_copy: Path, nsys: Nsys) -> None:
    """One arrow export, reused by the next report; no SQLite export and no `nsys stats` for the default reports."""
    build_profile(h200_copy / "evaluation.nsys-rep")
    export = h200_copy / "evaluation.arrowdir"
    first = export.stat().st_mtime_ns
    again = build_profile(h200_copy / "evaluation.nsys-rep", title="again")
    assert export.stat().st_mtime_ns == first
    assert not (h200_copy / "evaluation.sqlite").exists() and not (h200_copy / "evaluation.stats").exists()
    assert again.title == "again"
    assert tile(again, "Kernel launches").number == csv_instances(
        h200_copy / "evaluation_cuda_gpu_kern_sum.csv", "Instances")


def test_sqlite_and_arrow_exports_give_the_same_profile(h200_copy: Path, nsys: Nsys) -> None:
    from_rep = build_profile(h200_copy / "training.nsys-rep")
    nsys.export(h200_copy / "training.nsys-rep", h200_copy / "training.sqlite", "sqlite")
    from_sqlite = build_profile(h200_copy / "training.sqlite")
    from_arrow = build_profile(h200_copy / "training.arrowdir")
    assert from_sqlite.tiles == from_rep.tiles == from_arrow.tiles
    # The same numbers; only the capture says which export nsight chose for it (an export passed says nothing).
    assert from_rep.stats.export is not None and from_rep.stats.export.kind == "arrowdir"
    assert from_sqlite.stats == from_rep.stats.model_copy(update={"export": None}) == from_arrow.stats


def test_recorded_csvs_say_which_tiles_need_the_trace(h200: Path) -> None:
    paths = capture_paths(h200)
    assert paths == [h200 / "evaluation", h200 / "training"]
    profile = build_profile(paths[0])
    assert profile.trace is None
    for label in ("Capture span", "GPU kernel time", "GPU busy"):
        assert tile(profile, label).value is None
        assert "event trace" in (tile(profile, label).missing or "")
    assert tile(profile, "Kernel launches").number == 20
    assert "empty report" in (tile(profile, "Host-to-Device copies").missing or "")


def test_cpu_only_capture_has_no_cuda_tables_and_says_so(tmp_path: Path, nsys: Nsys) -> None:
    script = tmp_path / "cpu.py"
    script.write_text(textwrap.dedent("""
        import time, nvtx
        for _ in range(3):
            with nvtx.annotate("cpu_step"):
                time.sleep(0.01)
    """))
    result = Session(trace=("nvtx",), sample="none", output_dir=tmp_path / "out").run(
        [sys.executable, str(script)], capture="process")
    assert result.returncode == 0 and len(result.reports) == 1
    profile = build_profile(result.reports[0])
    assert profile.trace is not None and profile.trace.kernel_count == 0
    assert tile(profile, "NVTX range instances").number == 3
    # One tile says why there is no GPU data, instead of a wall of grey GPU tiles; what was traced shows.
    labels = [t.label for t in profile.tiles]
    assert labels == ["Capture span", "GPU activity", "NVTX range instances", "OS runtime calls"]
    assert "no GPU activity" in (tile(profile, "GPU activity").missing or "")
    assert "add osrt" in (tile(profile, "OS runtime calls").missing or "")
    assert profile.stats.skipped["cuda_gpu_kern_sum"] == "no data: the capture does not contain CUDA kernel data."
    assert tile(profile, "Capture span").number and tile(profile, "Capture span").number > 20_000_000
    # The timeline shows what there is: the NVTX lane only, no empty kernel or copy lanes.
    timeline = timeline_chart(profile.trace).spec
    assert timeline is not None and [lane["mark"]["type"] for lane in timeline["vconcat"]] == ["rect"]
    assert timeline["vconcat"][0]["encoding"]["y"]["field"] == "row"  # one row per thread (and nesting level)
    assert timeline["vconcat"][0]["encoding"]["color"]["title"] == "NVTX, per thread"


def test_partial_export_reads_as_no_data_and_keeps_the_span_in_the_collection_window(tmp_path: Path) -> None:
    """An export with no CUPTI tables (CPU-only) and a blocking OS call that began before collection."""
    export = tmp_path / "cpu.sqlite"
    with sqlite3.connect(export) as db:
        db.execute("CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER, duration INTEGER, startTime INTEGER, "
                   "stopTime INTEGER)")
        db.execute("INSERT INTO ANALYSIS_DETAILS VALUES (1, 300000000, 5000000000, 5300000000)")
        db.execute("CREATE TABLE OSRT_API (start INTEGER, end INTEGER)")
        db.executemany("INSERT INTO OSRT_API VALUES (?, ?)", [(-4_500_000_000, 10_000_000), (20_000_000, 30_000_000)])
        db.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
        db.execute("INSERT INTO StringIds VALUES (7, 'registered <name>')")
        db.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, "
                   "textId INTEGER, globalTid INTEGER)")
        db.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?)", [
            (50_000_000, 250_000_000, 59, "outer", None, 1),
            (60_000_000, 70_000_000, 60, None, 7, 1),
            (80_000_000, None, 34, "a mark", None, 1),
        ])
    trace = load_trace(export)
    assert trace.kernels.height == trace.memcpy.height == trace.memset.height == 0
    # NVTX (the user's work) bounds the span; OS calls, which include the profiler's own waits, do not.
    summary = summarize_trace(trace)
    assert (summary.first_event_ns, summary.span_ns, summary.recorded_ns) == (50_000_000, 200_000_000, 300_000_000)
    assert [(i.name, i.depth) for i in summary.nvtx] == [("outer", 0), ("registered <name>", 1)]
    assert summary.kernel_busy_ns == 0
    assert trace.nvtx_marks["name"].to_list() == ["a mark"]
    with sqlite3.connect(export) as db:
        db.execute("DROP TABLE NVTX_EVENTS")
    # Without CUDA or NVTX events the user's window is the collection window (less a settle wait, none here).
    osrt_only = summarize_trace(load_trace(export))
    assert (osrt_only.first_event_ns, osrt_only.span_ns) == (0, 300_000_000)
