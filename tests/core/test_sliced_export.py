"""A streamed capture's SQLite export made in slices of time side by side (trace/export.py): every event of the
one-file export is in exactly one slice, every other table whole in each, and what nsight reads from the slices (every
table, every frame, the statistics, the streamed profile) is what it reads from one file. Real nsys throughout: the
slices are `nsys export --times` of the H200 fixtures nsys 2023.4.4 recorded and of a CPU capture recorded here, and,
with NSIGHT_NSYS set to nsys 2025.3, those of both versions (docs/development.md). `make test` slices the
representative fixtures (tests/fixture_sets.py), `make test-all` every one.

The fixtures are far below the size that gets slices (``SLICE_ABOVE_BYTES``), so the tests ask for them
(``export(..., "sqlitedir", slices=3)``, ``NSIGHT_EXPORT_SLICES``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from capture_helpers import nsight_here
from fixture_sets import fanned

import nsight_core
from nsight_core import memory
from nsight_core.analysis.steps import FamilySteps
from nsight_core.errors import NsysCommandError, StatsError
from nsight_core.nsys import SLICED_EXPORT_VERSIONS, Nsys
from nsight_core.profile import build_profile
from nsight_core.trace import export as export_module
from nsight_core.trace.export import (
    MAX_SLICES,
    SLICE_PATTERN,
    ExportChoice,
    export,
    export_choice,
    export_slices,
    is_current,
    parquet_slices,
    usable_cores,
)
from nsight_core.trace.model import Trace
from nsight_core.trace.sliced import TIMED_COLUMNS, SlicedSqliteTables
from nsight_core.trace.spill import SpilledTables
from nsight_core.trace.tables import SqliteTables, Wanted

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPORTS = sorted(FIXTURES.rglob("*.nsys-rep"))
"""nsys 2023.4.4's fixtures, and nsys 2025.3's where NSIGHT_NSYS is a 2025 nsys (on the H200 machine): each version's
slices are checked on every capture it can read (``SLICED_EXPORT_VERSIONS``)."""
FRAMES = ("strings", "kernels", "graphs", "memcpy", "memset", "sync", "cuda_api", "api_names", "osrt", "samples",
          "nvtx", "nvtx_marks", "diagnostics", "cuda_contexts", "gpus", "processes", "threads")


def declared(path: Path) -> dict[str, Wanted]:
    """Every table of the SQLite file PATH with every column, as the type its declaration says."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        names = [name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {name: {column: pl.String if kind.upper() == "TEXT" else pl.Float64 if kind.upper() == "REAL"
                       else pl.Int64 for _, column, kind, *_ in connection.execute(f'PRAGMA table_info("{name}")')}
                for name in names}


def present(frame: pl.DataFrame | None) -> pl.DataFrame:
    assert frame is not None
    return frame


def rows(frame: pl.DataFrame | None) -> pl.DataFrame:
    """FRAME's rows in an order of their own (slices keep nsys' order within each, not across them)."""
    return present(frame).sort(pl.all(), nulls_last=True)


@pytest.mark.nsys
@pytest.mark.parametrize("report", fanned(REPORTS))
def test_every_event_is_in_one_slice_and_every_other_table_in_each(report: Path, nsys: Nsys,
                                                                   tmp_path: Path) -> None:
    if "2025" in report.parent.name and nsys.version < "2025":
        pytest.skip(f"recorded by nsys 2025.3, which nsys {nsys.version} cannot read")
    capture = tmp_path / report.name
    shutil.copyfile(report, capture)
    check_slices(capture, nsys)


@pytest.mark.nsys
def test_a_cpu_capture_is_sliced_as_the_gpu_ones(cpu_steps: Path, nsys: Nsys, tmp_path: Path) -> None:
    """NVTX and OS-runtime calls (the shared CPU capture), sliced like the fixtures' CUDA tables."""
    capture = tmp_path / cpu_steps.name
    shutil.copyfile(cpu_steps, capture)
    check_slices(capture, nsys)


def check_slices(capture: Path, nsys: Nsys) -> None:
    """CAPTURE's export in 3 slices: each event in the slice it starts in, every other table whole in each, and the
    same tables, Parquet copies and frames as its one-file export."""
    whole_file = export(capture, "sqlite", nsys)
    folder = export(capture, "sqlitedir", nsys, slices=3)
    assert folder == capture.with_suffix(".sqlitedir") and is_current(folder, capture)
    parts = sorted(folder.glob(SLICE_PATTERN))
    assert len(parts) == 3
    whole, sliced = SqliteTables(whole_file), SlicedSqliteTables(folder)
    # The window [0, duration] in three: part I holds the events that start in its third, the first and last open.
    duration = present(whole.read("ANALYSIS_DETAILS", {"duration": pl.Int64}))["duration"][0]
    bounds = [-(2**63), duration // 3, duration * 2 // 3, 2**63 - 1]
    for table, wanted in declared(whole_file).items():
        if table == "META_DATA_EXPORT":  # the export's own output name, options and time
            continue
        expected = whole.read(table, wanted)
        assert expected is not None
        if TIMED_COLUMNS & wanted.keys():
            assert rows(sliced.read(table, wanted)).equals(rows(expected)), table
            time = "start" if "start" in wanted else "timestamp"
            for number, part in enumerate(parts):
                found = SqliteTables(part).read(table, wanted)
                inside = expected.filter(pl.col(time).is_between(bounds[number], bounds[number + 1], closed="left"))
                assert rows(found if found is not None else expected.clear()).equals(rows(inside)), (table, number)
        else:  # whole in every part, in nsys' order
            for part in parts:
                assert (found := SqliteTables(part).read(table, wanted)) is not None and found.equals(expected), table
            assert present(sliced.read(table, wanted)).equals(expected), table

    # Copied to disk in slices of the slices, in order: the parts one after the other.
    spilled = SpilledTables(SlicedSqliteTables(folder), ExportChoice(kind="sqlitedir", streamed=True, reason="large",
                                                                   trace_bytes=0, slices=3))
    for table, wanted in declared(whole_file).items():
        copy = spilled.scan(table, wanted)
        assert copy is not None and copy.collect().equals(present(sliced.read(table, wanted))), table
    spilled.close()

    traces = Trace(whole), Trace(sliced)
    for frame in FRAMES:
        assert rows(getattr(traces[1], frame)).equals(rows(getattr(traces[0], frame))), frame
    # META_DATA_EXPORT says how each file was exported (its name, its time range, when): the rest is the capture's.
    capture_meta = [{key: value for key, value in trace.meta.items()
                     if not key.startswith(("EXPORT_PARAM", "EXPORT_TIME"))} for trace in traces]
    assert capture_meta[1] == capture_meta[0] and traces[1].window == traces[0].window
    assert traces[1].notes == traces[0].notes


@pytest.mark.nsys
def test_a_streamed_capture_exported_in_slices_gets_the_profile_of_one_file(
        nsys: Nsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Statistics, summary, completeness and What to fix over every step, scanned from the slices (a kernel may lie
    in the slice after the call that launched it), SQLite or Parquet, as from one SQLite file; the slices are reused,
    and a folder of them passed as it is reads the same."""
    monkeypatch.setattr(export_module, "STREAM_ABOVE_BYTES", 0)
    # A streamed summary allowed 1 MiB and an nsys export 1 MiB (8 slices side by side fit), the capture read whole not.
    monkeypatch.setattr(memory, "STREAMED_SUMMARY_BYTES", 1 << 20)
    monkeypatch.setattr(memory, "EXPORT_BASE_BYTES", 1 << 20)
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "34M")
    profiles = {}
    parquet = Nsys.exports_parquet_slices
    # Its work runs from 0.26 s to 0.47 s of a 0.51 s window: cut at 0.34 s.
    cases = [("1", "sqlite", 1), ("3", "sqlitedir", 3)] + [("parquet", "parquetdir", 3)] * nsys.exports_parquet_slices
    for folder_name, kind, slices in cases:
        capture = tmp_path / folder_name / "host_load-problem.nsys-rep"
        capture.parent.mkdir()
        shutil.copyfile(FIXTURES / "h200-fix-pairs" / "host_load-problem.nsys-rep", capture)
        monkeypatch.setenv("NSIGHT_EXPORT_SLICES", str(slices))
        # Parquet where this nsys makes it (the fewest slices that fit), unless the case is SQLite's.
        monkeypatch.setattr(Nsys, "exports_parquet_slices", parquet if kind == "parquetdir" else False)
        size = capture.stat().st_size
        assert export_choice(capture, nsys) == ExportChoice(kind=kind, streamed=True, reason="large", trace_bytes=size,
                                                            stream_above_bytes=0, slices=slices)
        profiles[kind] = build_profile(capture)
        read = profiles[kind].stats.export
        assert read is not None and read.model_dump() == ExportChoice(
            kind=kind, streamed=True, reason="large", trace_bytes=size, stream_above_bytes=0, slices=slices)._asdict()
    one = profiles["sqlite"]
    folder = tmp_path / "3" / "host_load-problem.sqlitedir"
    assert len(list(folder.glob(SLICE_PATTERN))) == 3 and not (tmp_path / "3" / "host_load-problem.sqlite").exists()
    holding = [part for part in sorted(folder.glob(SLICE_PATTERN))
               if (kernels := SqliteTables(part).read("CUPTI_ACTIVITY_KIND_KERNEL", {"start": pl.Int64})) is not None
               and kernels.height]
    assert len(holding) > 1
    assert one.analysis is not None and one.analysis.findings and isinstance(one.analysis.steps, FamilySteps)
    for sliced in [profiles[kind] for kind in ("sqlitedir", "parquetdir") if kind in profiles]:
        assert sliced.analysis == one.analysis and one.steps_drawn is not None and sliced.steps_drawn is not None
        assert sliced.steps_drawn.budgets.equals(one.steps_drawn.budgets)
        assert (sliced.steps_drawn.median_step, sliced.steps_drawn.slowest_step) == (one.steps_drawn.median_step,
                                                                                     one.steps_drawn.slowest_step)
        # The same but for the estimate of the frames' size read whole (from each part's pages, or rows), and so
        # how many first steps fit it.
        assert sliced.stats.model_dump(exclude={"export", "notes"}) == one.stats.model_dump(exclude={"export", "notes"})
        assert [re.sub(r"[\d.,]+", "N", note) for note in sliced.stats.notes] == [re.sub(r"[\d.,]+", "N", note)
                                                                                for note in one.stats.notes]
        assert sliced.completeness == one.completeness and sliced.tiles == one.tiles and sliced.title == one.title
    if "parquetdir" in profiles:  # how it was recorded (META_DATA_CAPTURE, which nsys' Parquet export leaves out)
        traces = [nsight_core.load_trace(tmp_path / name / "host_load-problem.nsys-rep") for name in ("1", "parquet")]
        recorded = [{key: value for key, value in trace.meta.items() if not key.startswith("EXPORT")}
                    for trace in traces]
        assert recorded[1] == recorded[0] and any(key.startswith("PROCESS_0") for key in recorded[0])
        del traces
        # The folder of Parquet slices passed as it is: the same statistics.
        passed = nsight_core.load_stats(tmp_path / "parquet" / "host_load-problem.parquetdir")
        assert passed.kernels == one.stats.kernels and passed.nvtx_ranges == one.stats.nvtx_ranges
    parquet_parts = sorted((tmp_path / "parquet" / "host_load-problem.parquetdir").glob("part-*/"))
    assert len(parquet_parts) == 3 * nsys.exports_parquet_slices and not list(tmp_path.glob("parquet/*.sqlite*"))

    # Made once: a later command (any NSIGHT_EXPORT_SLICES) reads the slices there; the folder passed as it is too.
    monkeypatch.setenv("NSIGHT_EXPORT_SLICES", "1")
    made = {part.name: part.stat().st_mtime_ns for part in folder.glob(SLICE_PATTERN)}
    trace = nsight_core.load_trace(tmp_path / "3" / "host_load-problem.nsys-rep")
    assert trace.source == folder
    assert {part.name: part.stat().st_mtime_ns for part in folder.glob(SLICE_PATTERN)} == made
    del trace
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "off")
    passed = nsight_core.load_stats(folder)
    assert passed.export is None and passed.nvtx_ranges == one.stats.nvtx_ranges and passed.kernels == one.stats.kernels
    cli = nsight_here("stats", folder, "--json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["kernels"] == [row.model_dump() for row in one.stats.kernels]


def test_slices_follow_the_cores_the_memory_and_the_setting(tmp_path: Path, nsys: Nsys,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    affinity = len(os.sched_getaffinity(0))
    v2 = tmp_path / "v2"
    v2.mkdir()
    for quota, cores in (("max 100000", affinity), ("150000 100000", 1),
                         (f"{100000 * (affinity + 4)} 100000", affinity)):
        (v2 / "cpu.max").write_text(quota + "\n")
        assert usable_cores(v2) == cores, quota
    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    for quota, cores in (("-1", affinity), ("100000", 1)):
        (v1 / "cpu.cfs_quota_us").write_text(quota + "\n")
        assert usable_cores(v1.parent) == cores, quota

    monkeypatch.delenv("NSIGHT_EXPORT_SLICES", raising=False)
    monkeypatch.setattr(export_module, "usable_cores", lambda: 16)
    monkeypatch.setattr(memory, "allowed_memory", lambda: (None, ""))
    big = export_module.SLICE_ABOVE_BYTES
    assert export_slices(big - 1, nsys) == 1 and export_slices(big, nsys) == MAX_SLICES
    monkeypatch.setattr(memory, "allowed_memory", lambda: (100 << 20, "a test"))  # 32 MiB an nsys process
    assert export_slices(big, nsys) == 3
    monkeypatch.setenv("NSIGHT_EXPORT_SLICES", "2")
    assert export_slices(1, nsys) == 2
    # Only an nsys whose slices were checked against its one-file export (this test file) makes them: 2023.4 and
    # 2025.3, not a version between them.
    assert nsys.exports_time_slices and nsys.version.startswith(SLICED_EXPORT_VERSIONS)
    assert export_slices(big, Nsys(nsys.path, "2025.3.1.0")) == 2
    assert export_slices(big, Nsys(nsys.path, "2024.1.1.0")) == 1
    # Parquet: the fewest slices from two per core and one per 16 MiB of trace whose processes, one per core at a
    # time, fit; none where none do.
    monkeypatch.delenv("NSIGHT_EXPORT_SLICES")
    monkeypatch.setattr(export_module, "usable_cores", lambda: 2)
    monkeypatch.setattr(memory, "allowed_memory", lambda: (None, ""))
    assert parquet_slices(48 << 20, nsys) == 4 and parquet_slices(100 << 20, nsys) == 7
    assert parquet_slices(1 << 20, nsys) == 1, "below SLICE_ABOVE_BYTES: one piece"
    monkeypatch.setattr(memory, "allowed_memory", lambda: (400 << 20, "a test"))  # 2 x (32 MiB + 20 x 48 MiB / N)
    assert parquet_slices(48 << 20, nsys) == 6 and parquet_slices(400 << 20, nsys) is None
    assert parquet_slices(48 << 20, Nsys(nsys.path, "2025.3.1.0")) is None
    monkeypatch.setenv("NSIGHT_EXPORT_SLICES", "2")
    assert parquet_slices(5 << 20, nsys) == 2 and parquet_slices(48 << 20, nsys) is None
    for wrong in ("0", "two", "-1"):
        monkeypatch.setenv("NSIGHT_EXPORT_SLICES", wrong)
        with pytest.raises(StatsError, match=rf"NSIGHT_EXPORT_SLICES='{wrong}' is not a number of slices: set it to 1"):
            export_slices(big, nsys)


@pytest.mark.nsys
def test_a_failed_or_damaged_slice_is_never_read_and_the_export_is_made_again(nsys: Nsys, tmp_path: Path) -> None:
    """One slice's nsys failing fails the export and leaves nothing beside the capture; a slice damaged later (a
    truncated file) makes the export not current, and the next one is made whole."""
    capture = tmp_path / "capture" / "host_load-problem.nsys-rep"
    capture.parent.mkdir()
    shutil.copyfile(FIXTURES / "h200-fix-pairs" / "host_load-problem.nsys-rep", capture)
    failing = tmp_path / "fake" / "nsys"  # the last slice's export fails: its time range is open at the end
    failing.parent.mkdir()
    failing.write_text(f'#!/bin/sh\nfor a in "$@"; do case "$a" in */:) echo "Error: out of disk" >&2; exit 1;; esac; '
                       f'done\nexec "{nsys.path}" "$@"\n')
    failing.chmod(0o755)
    with pytest.raises(NsysCommandError, match=r"nsys export of .* failed .*out of disk"):
        export(capture, "sqlitedir", Nsys(failing, nsys.version), slices=3)
    assert [path.name for path in capture.parent.iterdir()] == [capture.name]

    folder = export(capture, "sqlitedir", nsys, slices=3)
    part = folder / "part-001.sqlite"
    made = part.stat().st_size
    with part.open("r+b") as file:
        file.truncate(made // 2)
    assert not is_current(folder, capture)
    assert export(capture, "sqlitedir", nsys, slices=3) == folder and is_current(folder, capture)
    assert part.stat().st_size == made and len(list(folder.glob(SLICE_PATTERN))) == 3




@pytest.mark.nsys
def test_a_failed_parquet_export_falls_back_to_sqlite(nsys: Nsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """nsys' Parquet export failing (a slice out of memory, say) costs the capture nothing: it is exported to SQLite,
    which streams in a fixed memory, and profiled the same, with a warning that says so."""
    if not nsys.exports_parquet_slices:
        pytest.skip(f"nsys {nsys.version} streams from SQLite only")
    capture = tmp_path / "capture" / "host_load-problem.nsys-rep"
    capture.parent.mkdir()
    shutil.copyfile(FIXTURES / "h200-fix-pairs" / "host_load-problem.nsys-rep", capture)
    failing = tmp_path / "fake" / "nsys"  # a real nsys whose Parquet exports fail
    failing.parent.mkdir()
    failing.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = parquetdir ] && { echo "std::bad_alloc" >&2; exit 1; }; '
                       f'done\nexec "{nsys.path}" "$@"\n')
    failing.chmod(0o755)
    monkeypatch.setattr(export_module, "STREAM_ABOVE_BYTES", 0)
    monkeypatch.setenv("NSIGHT_EXPORT_SLICES", "3")
    faulty = Nsys(failing, nsys.version)
    assert export_choice(capture, faulty).kind == "parquetdir"
    trace = nsight_core.load_trace(capture, faulty)
    assert trace.source == capture.with_suffix(".sqlitedir") and trace.tables.choice is not None
    assert trace.tables.choice.kind == "sqlitedir" and trace.tables.choice.slices == 3
    assert "Parquet export of host_load-problem.nsys-rep failed" in caplog.text
    assert not list(capture.parent.glob("*.parquetdir")) and not list(capture.parent.glob(".*tmp*"))
    read_whole = tmp_path / "whole" / capture.name
    read_whole.parent.mkdir()
    shutil.copyfile(capture, read_whole)
    monkeypatch.undo()
    assert nsight_core.analyze(trace) == nsight_core.analyze(nsight_core.load_trace(read_whole))
