"""Large captures: the five default reports streamed from a spilled SQLite export equal nsys' own and the whole-frame
path's on the representative H200 fixtures (every one in `make test-all`), the Parquet copies are removed, and a
capture over the threshold takes that path.

The streamed path is what a trace over ``STREAM_ABOVE_BYTES`` (128 MiB) gets; the fixtures are far smaller, so the
tests build it directly (SpilledTables over a real nsys SQLite export) or lower the threshold. Its memory on a
30 M-range capture is tested in tests/core/test_large_capture.py (slow: `make bench`); its summary and completeness in
tests/core/test_streamed_summary.py.
"""

from __future__ import annotations

import gc
import shutil
import sqlite3
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from fixture_sets import fanned

import nsight_core
from nsight_core import NotEnoughMemoryError, memory
from nsight_core.nsys import Nsys
from nsight_core.profile import build_profile
from nsight_core.stats import exact
from nsight_core.stats.load import stats_from_csv_dir, stats_of_trace
from nsight_core.stats.models import ProfileStats
from nsight_core.stats.reports import DEFAULT_REPORTS
from nsight_core.trace import export as export_module
from nsight_core.trace.export import ExportChoice, export, export_choice
from nsight_core.trace.model import Trace
from nsight_core.trace.spill import SPILL_PREFIX, SpilledTables
from nsight_core.trace.streamed import events, is_streamed
from nsight_core.trace.tables import SqliteTables

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPORTS_2023 = sorted(p for p in FIXTURES.rglob("*.nsys-rep") if "2025" not in p.parent.name)
SQLITE_2025 = sorted(FIXTURES.rglob("*.sqlite"))
TABLES = ("kernels", "api_calls", "memory_time", "memory_size", "nvtx_ranges")
STREAMED = ExportChoice(kind="sqlite", streamed=True, reason="large", trace_bytes=0)
FRAMES = ("kernels", "graphs", "memcpy", "memset", "sync", "cuda_api", "osrt", "nvtx", "nvtx_marks", "threads")


def rows(stats: ProfileStats) -> dict[str, Any]:
    return {table: [row.model_dump() for row in getattr(stats, table)] for table in (*TABLES, "graphs")}


def spills(folder: Path) -> list[Path]:
    return sorted(folder.glob(f".{SPILL_PREFIX}*"))


def sqlite_of(capture: Path, tmp_path: Path, nsys: Nsys) -> Path:
    """A writable SQLite export of CAPTURE: nsys 2025.3's own beside a 2025 fixture, else made by the real nsys."""
    copy = tmp_path / capture.name
    shutil.copyfile(capture, copy)
    return copy if copy.suffix == ".sqlite" else export(copy, "sqlite", nsys)


@pytest.mark.nsys
@pytest.mark.parametrize("capture", fanned(REPORTS_2023 + SQLITE_2025))  # every fixture: make test-all
def test_streamed_reports_equal_nsys_and_the_whole_frames(capture: Path, nsys: Nsys, tmp_path: Path) -> None:
    sqlite = sqlite_of(capture, tmp_path, nsys)
    whole_trace = nsight_core.load_trace(sqlite)
    whole = stats_of_trace(whole_trace)
    tables = SpilledTables(SqliteTables(sqlite), STREAMED)
    streamed_trace = Trace(tables)
    streamed = stats_of_trace(streamed_trace)
    assert rows(streamed) == rows(whole)
    for frame in FRAMES:  # the frames the summary and analysis read whole, through the same Parquet copies
        assert getattr(streamed_trace, frame).equals(getattr(whole_trace, frame)), frame
    assert streamed.skipped == whole.skipped and streamed.notes == whole.notes
    if list(capture.parent.glob(f"{capture.stem}_*.csv")):  # nsys' own, where recorded (the whole frames' equality
        # with nsys on every fixture is tests/core/test_stats_from_events.py's)
        recorded = stats_from_csv_dir(capture.parent / capture.stem, list(DEFAULT_REPORTS))
        for table in TABLES:
            assert rows(streamed)[table] == [row.model_dump() for row in getattr(recorded, table)], table
    assert any(rows(streamed)[table] for table in TABLES)
    # Copied to Parquet beside the export, and removed when the tables close.
    [spill] = spills(sqlite.parent)
    assert list(spill.rglob("*.parquet"))
    tables.close()
    assert not spills(sqlite.parent)


def test_the_parquet_copies_go_with_the_trace(tmp_path: Path) -> None:
    """Nobody closes the tables: the copies go when the trace is collected."""
    sqlite = tmp_path / "graph_node.sqlite"
    shutil.copyfile(FIXTURES / "h200-2025-graph-node" / "graph_node.sqlite", sqlite)
    trace = Trace(SpilledTables(SqliteTables(sqlite), STREAMED))
    assert stats_of_trace(trace).kernels
    assert spills(tmp_path)
    del trace
    gc.collect()
    assert not spills(tmp_path)


def test_copies_a_killed_process_left_are_removed(tmp_path: Path) -> None:
    """A process killed mid-summary cannot remove its copies: the next one that copies tables there does."""
    sqlite = tmp_path / "graph_node.sqlite"
    shutil.copyfile(FIXTURES / "h200-2025-graph-node" / "graph_node.sqlite", sqlite)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftover = tmp_path / f".{SPILL_PREFIX}{int(gone.stdout)}-abc"
    (leftover / "NVTX_EVENTS-0").mkdir(parents=True)
    alive = tmp_path / f".{SPILL_PREFIX}1-abc"  # pid 1 never ends
    alive.mkdir()
    tables = SpilledTables(SqliteTables(sqlite), STREAMED)
    assert not leftover.exists() and alive.exists()
    tables.close()
    assert spills(tmp_path) == [alive]


def test_graph_launches_whose_nodes_are_kernels_are_left_out_alike(tmp_path: Path) -> None:
    """A graph launch whose nodes were recorded as kernels (the same correlation id) is no graph row: the streamed
    frames find those launches from the launches' side (a hash of their ids, the kernels streamed past it), the whole
    frames from the kernels'. Made so: the process capture's 85 launches, 30 of them given a kernel's id."""
    sqlite = tmp_path / "process.sqlite"
    shutil.copyfile(FIXTURES / "h200-2025-process" / "nsight-0013a405.sqlite", sqlite)
    with sqlite3.connect(sqlite) as connection:
        connection.execute("UPDATE CUPTI_ACTIVITY_KIND_GRAPH_TRACE SET correlationId = (SELECT correlationId FROM "
                           "CUPTI_ACTIVITY_KIND_KERNEL k WHERE k.rowid = CUPTI_ACTIVITY_KIND_GRAPH_TRACE.rowid) "
                           "WHERE rowid <= 30")
    connection.close()
    whole = nsight_core.load_trace(sqlite)
    tables = SpilledTables(SqliteTables(sqlite), STREAMED)
    streamed = Trace(tables)
    assert whole.graphs.height == 85 - 30 and events(streamed).graphs.collect().height == 85 - 30
    assert rows(stats_of_trace(streamed)) == rows(stats_of_trace(whole))
    tables.close()


EDITS = {
    "a column of another type": [
        'ALTER TABLE NVTX_EVENTS ADD COLUMN "_text" TEXT', 'UPDATE NVTX_EVENTS SET "_text" = "end" || \' ns\'',
        'ALTER TABLE NVTX_EVENTS DROP COLUMN "end"', 'ALTER TABLE NVTX_EVENTS RENAME COLUMN "_text" TO "end"'],
    "a renamed column": ['ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN "start" TO "startNs"'],
    "a missing table": ["DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME"],
}


@pytest.mark.parametrize("edit", EDITS)
def test_a_schema_nsight_has_not_seen_streams_as_it_reads_whole(edit: str, tmp_path: Path) -> None:
    """An export edited as another nsys might write it: the streamed reports skip, note and keep exactly what the
    whole frames do (the table falls back to the Trace, whose notes say what was left out)."""
    sqlite = tmp_path / "quick_start.sqlite"
    shutil.copyfile(FIXTURES / "h200-fix-pairs-2025" / "quick_start-as_is.sqlite", sqlite)
    with sqlite3.connect(sqlite) as connection:
        for statement in EDITS[edit]:
            connection.execute(statement)
    connection.close()
    whole = stats_of_trace(nsight_core.load_trace(sqlite))
    tables = SpilledTables(SqliteTables(sqlite), STREAMED)
    streamed = stats_of_trace(Trace(tables))
    assert whole.skipped and streamed.skipped == whole.skipped
    assert streamed.notes == whole.notes and rows(streamed) == rows(whole)
    tables.close()
    assert not spills(tmp_path)


@pytest.mark.nsys
def test_a_large_capture_or_little_memory_streams(nsys: Nsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The choice by size and by the memory allowed, recorded in the statistics; a profile of a streamed capture
    whose whole frames do not fit gets its statistics, summary and completeness (those of the capture read whole)
    and a note for its 'What to fix', where one read whole is refused as before."""
    capture = tmp_path / "training.nsys-rep"
    shutil.copyfile(FIXTURES / "h200-torch-mlp" / "training.nsys-rep", capture)
    recorded = stats_from_csv_dir(FIXTURES / "h200-torch-mlp" / "training", list(DEFAULT_REPORTS))
    size = capture.stat().st_size
    assert export_choice(capture, nsys) == ExportChoice(kind="arrowdir", streamed=False, reason="small",
                                                         trace_bytes=size)
    export_read = nsight_core.load_stats(capture).export
    assert export_read is not None
    assert export_read.model_dump() == ExportChoice(kind="arrowdir", streamed=False, reason="small",
                                                    trace_bytes=size)._asdict()

    with monkeypatch.context() as patched:
        patched.setattr(export_module, "STREAM_ABOVE_BYTES", size - 1)
        # nsys' Parquet export in one piece (a small trace) where this nsys makes it, else SQLite.
        kind = "parquetdir" if nsys.exports_parquet_slices else "sqlite"
        assert export_choice(capture, nsys) == ExportChoice(kind=kind, streamed=True, reason="large",
                                                            trace_bytes=size, stream_above_bytes=size - 1)
        trace = nsight_core.load_trace(capture)
        assert is_streamed(trace) and trace.source == capture.with_suffix(f".{kind}")
        del trace

    # Its arrow and Parquet exports would take 32 MiB and 20x the trace (each slice of the Parquet one 32 MiB at least,
    # two at once), the SQLite one 32 MiB, the summary over 64 MiB; a streamed
    # summary (hundreds of MiB for any capture) allowed 1 MiB here, on this small one.
    monkeypatch.setattr(memory, "STREAMED_SUMMARY_BYTES", 1 << 20)
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "34M")  # the streamed export made above, reused
    assert export_choice(capture, nsys) == ExportChoice(kind=kind, streamed=True, reason="memory", trace_bytes=size)
    profile = build_profile(capture)
    assert profile.stats.export is not None and profile.stats.export.reason == "memory"
    assert rows(profile.stats)["nvtx_ranges"] == [row.model_dump() for row in recorded.nvtx_ranges]
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "off")
    whole = build_profile(capture)
    assert whole.stats.export is not None and not whole.stats.export.streamed and whole.analysis is not None
    # What to fix is the same however little memory: the same pipeline over windows scanned from disk.
    assert profile.analysis == whole.analysis and not profile.notes and not profile.stats.notes
    assert profile.trace == whole.trace and profile.completeness == whole.completeness
    assert profile.tiles == whole.tiles and profile.title == whole.title
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "34M")
    del profile, whole
    gc.collect()
    assert not spills(tmp_path)

    # The arrow export fits, the frames read whole might not (EVENT_BYTES_PER_TRACE_BYTE), a streamed summary would:
    # streamed from the start.
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "40M")
    assert export_choice(capture, nsys) == ExportChoice(kind=kind, streamed=True, reason="memory", trace_bytes=size)
    monkeypatch.undo()
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "40M")  # a streamed summary would not fit either: read whole, refused
    assert not export_choice(capture, nsys).streamed
    with pytest.raises(NotEnoughMemoryError):
        build_profile(capture)


def test_an_sqlite_passed_streams_where_it_would_not_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A .sqlite passed as it is: read whole with memory to spare (nothing said), streamed where its events would not
    fit the memory allowed, with the same numbers as nsys' recorded CSVs."""
    capture = FIXTURES / "h200-2025-graph-node" / "graph_node.sqlite"
    sqlite = tmp_path / capture.name
    shutil.copyfile(capture, sqlite)
    assert not is_streamed(nsight_core.load_trace(sqlite))
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "34M")
    trace = nsight_core.load_trace(sqlite)
    assert is_streamed(trace)
    stats = stats_of_trace(trace)
    assert stats.export is not None and (stats.export.streamed, stats.export.reason) == (True, "memory")
    recorded = stats_from_csv_dir(capture.parent / capture.stem, list(DEFAULT_REPORTS))
    for table in TABLES:
        assert rows(stats)[table] == [row.model_dump() for row in getattr(recorded, table)], table
    del trace
    gc.collect()
    assert not spills(tmp_path)


@pytest.mark.parametrize("values", [
    [7], [3, 1], [5, 5, 5, 5], [-4, 10, 2**40, 0, 3],
    [1000] * 999 + [2**41, 2**33, 1, 1001],  # most values in one narrow bucket of a wide range
    [*range(0, 3_000_000, 7), 2**45],
])
def test_medians_by_selection_are_exact(values: list[int]) -> None:
    frame = pl.LazyFrame({"key": ["a"] * len(values) + ["b", "b"], "value": [*values, 9, 2**50]})
    groups = frame.group_by("key").agg(*exact.sums(pl.col("value")), pl.col("value").min().alias("_min"),
                                       pl.col("value").max().alias("_max")).collect()
    medians = dict(exact.medians(frame, "key", "value", groups).iter_rows())
    assert medians == {"a": statistics.median(values), "b": statistics.median([9, 2**50])}
    finished = exact.finish(groups.sort("key"), "mean", "stddev").row(0, named=True)
    assert finished["mean"] == pytest.approx(statistics.fmean(values), rel=1e-15)
    assert finished["stddev"] == (pytest.approx(statistics.stdev(values), rel=1e-15) if len(values) > 1 else 0.0)
