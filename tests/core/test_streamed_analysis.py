"""A large capture's "What to fix": over every step where its steps are on the GPU's clock, streamed in windows
(analysis/whole_steps.py, whole_budget.py, whole_findings.py), else from its first steps that fit the memory allowed,
read whole from the SQLite export (trace/head.py, profile.first_part); its NVTX range table and drawn steps from those
first steps in any case, with a note saying what covers what.

Steps are local in time: the first steps, read alone, get the analysis they get inside the whole capture, and every
step's analysis made window by window is the capture's read whole, number for number.
"""

from __future__ import annotations

import logging
import re
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

import nsight_core
from nsight_core import compare, memory
from nsight_core import profile as profile_module
from nsight_core.analysis import whole_budget
from nsight_core.analysis.analyze import Analysis, Analyzed, analyze_steps, withhold_savings
from nsight_core.analysis.diff import TraceDiff
from nsight_core.analysis.footprint import capture_window
from nsight_core.analysis.step_events import StepDrawing, drawing_for, streamed_drawing
from nsight_core.analysis.steps import StepFamily, family_stats, find_steps, kernel_period_steps, period_steps
from nsight_core.analysis.whole_budget import STEP_EVENTS, StepTooLarge, whole_capture_budget
from nsight_core.analysis.whole_findings import whole_capture_analysis
from nsight_core.analysis.whole_ranges import whole_capture_ranges
from nsight_core.analysis.whole_steps import EveryStep, capture_as_step, every_step, whole_capture_steps
from nsight_core.errors import NotEnoughMemoryError
from nsight_core.nsys import Nsys
from nsight_core.profile import CaptureProfile, build_profile
from nsight_core.render.diff import render_diff
from nsight_core.render.html import render_page
from nsight_core.report import stats_json
from nsight_core.trace import export as export_module
from nsight_core.trace.export import ExportChoice, export
from nsight_core.trace.head import head
from nsight_core.trace.model import Trace
from nsight_core.trace.spill import SpilledTables
from nsight_core.trace.streamed import Events, events
from nsight_core.trace.tables import SqliteTables

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BEYOND = 1 << 62
"""A cut after every event: the part is the whole capture."""


@pytest.mark.nsys
@pytest.mark.parametrize("capture", ["h200-torch-mlp/training.nsys-rep", "h200-fix-pairs/dataloader-problem.nsys-rep",
                                     "h200-two-streams/two_streams.nsys-rep"])
def test_a_part_up_to_the_end_is_analysed_as_the_whole(capture: str, nsys: Nsys, tmp_path: Path) -> None:
    copy = tmp_path / Path(capture).name
    shutil.copyfile(FIXTURES / capture, copy)
    sqlite = export(copy, "sqlite", nsys)
    whole, part = analyze_steps(nsight_core.load_trace(sqlite)), analyze_steps(head(SqliteTables(sqlite), BEYOND))
    # The part's collection window is its events' span: the profiler's time before them is the capture summary's.
    expected = whole.analysis.model_copy(update={"window": whole.analysis.window.model_copy(update={"profiler_ns": 0})})
    assert part.analysis == expected
    assert part.budgets.equals(whole.budgets)
    assert whole.analysis.findings and whole.analysis.steps.family is not None


@pytest.mark.nsys
def test_a_streamed_capture_too_large_to_read_whole_gets_what_to_fix_over_every_step(
        nsys: Nsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    capture = tmp_path / "training.nsys-rep"
    shutil.copyfile(FIXTURES / "h200-torch-mlp" / "training.nsys-rep", capture)
    whole = build_profile(capture)
    assert whole.analysis is not None and whole.analysis.steps.family is not None and whole.steps_drawn is not None

    # Streamed (larger than STREAM_ABOVE_BYTES), read whole refused (a summary would need more than 34 MiB), a
    # streamed summary allowed; the analysis may read a third of the event tables' bytes.
    monkeypatch.setattr(export_module, "STREAM_ABOVE_BYTES", capture.stat().st_size - 1)
    monkeypatch.setattr(memory, "STREAMED_SUMMARY_BYTES", 1 << 20)
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "34M")
    event_bytes = nsight_core.load_trace(capture).event_bytes
    monkeypatch.setattr(profile_module, "affordable_event_bytes", lambda: event_bytes // 3)
    with caplog.at_level(logging.INFO, logger="nsight"):
        profile = build_profile(capture)
    # Minutes on a large capture: each stage says so as it starts (the CLI shows the logger "nsight" on stderr).
    progress = [record.getMessage() for record in caplog.records]
    assert re.fullmatch(r"training.nsys-rep is streamed from disk: the whole capture's analysis reads whole frames "
                        r"\(about [\d.]+ MiB\) and NSIGHT_SUMMARY_MEMORY=34M allows 34.00 MiB", progress[0]), progress
    assert [re.sub(r"\(\d+ s in\)", "(N s in)", line) for line in progress[1:]] == [
        "statistics, summary and completeness done (N s in)",
        f"What to fix: the time budget of each of {whole.analysis.steps.family.count} steps, streamed (N s in)",
        "What to fix: findings and NVTX ranges over every step (N s in)"], progress
    caplog.clear()

    assert profile.stats.export is not None and profile.stats.export.streamed
    assert profile.analysis is not None and profile.steps_drawn is not None
    all_steps = whole.analysis.steps.family
    # "What to fix" is the capture's read whole, every step streamed: steps, budget, window, NVTX range table and
    # findings; the first steps that fit (the note says how many) chose the step family.
    expected = whole.analysis.model_copy(update={"steps": whole.analysis.steps.model_copy(update={"candidates": []})})
    assert profile.analysis == expected and expected.findings and expected.ranges and expected.steps.clock == "gpu"
    first = int(re.search(r"chosen by its first ([\d,]+) steps", note_line(profile))[1].replace(",", ""))  # type: ignore[index]
    assert 2 <= first < all_steps.count
    # The steps drawn in full are the capture's median and slowest of all its steps, with their events and idle
    # stretches; the chart of steps draws every step's budget.
    assert_same_drawing(profile.steps_drawn, whole.steps_drawn)
    note = f"What to fix covers all {whole.analysis.budget.steps:,} steady steps, streamed from disk"
    assert note_line(profile).startswith(note) and any(line.startswith(note) for line in profile.stats.notes)
    assert note in render_page([profile])
    assert stats_json(profile)["steps"]["family"]["count"] == all_steps.count
    assert stats_json(profile)["findings"] == stats_json(whole)["findings"]
    assert profile.whole_steps is None and "whole_capture_steps" not in stats_json(profile)

    # Should the pass over every step's findings fail, "What to fix" is the first steps', with every step's times.
    def fails(*_: object) -> None:
        raise RuntimeError("injected")
    monkeypatch.setattr(profile_module, "whole_capture_analysis", fails)
    with caplog.at_level(logging.WARNING, logger="nsight"):
        fallback = build_profile(capture)
    assert "could not analyse every step of" in caplog.text and "injected" in caplog.text
    assert fallback.analysis is not None and fallback.analysis.steps.family is not None
    assert fallback.analysis.steps.family.count == first
    assert note_line(fallback).startswith(f"What to fix covers its first {first:,} steps")
    assert fallback.whole_steps == whole.analysis.steps.model_copy(update={"candidates": [], "bound": "unknown"})
    assert stats_json(fallback)["whole_capture_steps"]["family"]["count"] == all_steps.count
    assert whole.whole_steps is None and "whole_capture_steps" not in stats_json(whole)
    # So too where the memory allowed reads too few events at once for what each step holds over every step (millions
    # of steps; a step holding more than that, an epoch as one step, likewise): never read.
    monkeypatch.setattr(profile_module, "step_rows", lambda _: 1)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="nsight"):
        too_large = build_profile(capture)
    assert re.search(r"could not analyse every step of \S+ \(StepTooLarge: its [\d,]+ steps take about [\d,]+ events' "
                     r"memory over every step, and the memory allowed reads 1 at once\)", caplog.text), caplog.text
    assert note_line(too_large) == note_line(fallback) and too_large.analysis == fallback.analysis
    # The statistics, summary and completeness are the whole capture's.
    assert profile.trace == whole.trace and profile.completeness == whole.completeness
    assert pl.DataFrame([row.model_dump() for row in profile.stats.nvtx_ranges]).equals(
        pl.DataFrame([row.model_dump() for row in whole.stats.nvtx_ranges]))

    # Nothing fits: no analysis, and a note that says why.
    monkeypatch.setattr(profile_module, "affordable_event_bytes", lambda: 0)
    nothing = build_profile(capture)
    assert nothing.analysis is None
    assert any(line.startswith("No 'What to fix' for a capture this large") for line in nothing.stats.notes)


def assert_same_drawing(drawing: StepDrawing | None, expected: StepDrawing | None) -> None:
    """DRAWING draws what EXPECTED does: the same steps, spans, events, idle stretches, budgets and thread names."""
    assert drawing is not None and expected is not None
    assert (drawing.median_step, drawing.slowest_step, drawing.clock, drawing.warmup_steps, drawing.thread_names) == (
        expected.median_step, expected.slowest_step, expected.clock, expected.warmup_steps, expected.thread_names)
    assert drawing.budgets.equals(expected.budgets)
    assert [step.model_dump(exclude={"events", "idle"}) for step in drawing.steps] == [
        step.model_dump(exclude={"events", "idle"}) for step in expected.steps]
    for step, other in zip(drawing.steps, expected.steps, strict=True):
        assert step.events.equals(other.events) and step.idle.equals(other.idle), step.step


def largest_step(frames: list[pl.DataFrame], steps: pl.DataFrame) -> int:
    """The most events of FRAMES that start inside one of STEPS (step, start_ns, end_ns), counted read whole."""
    inside = pl.concat([frame.select("start_ns") for frame in frames]).join_where(
        steps, pl.col("start_ns") >= pl.col("start_ns_right"), pl.col("start_ns") < pl.col("end_ns"))
    return int(inside.group_by("step").len()["len"].max())  # type: ignore[arg-type]


def note_line(profile: CaptureProfile) -> str:
    [line] = [line for line in profile.notes if line.startswith("What to fix covers")]
    return line


SQLITE_CAPTURES = sorted(FIXTURES.rglob("*.sqlite"))
STREAMED = ExportChoice("sqlite", True, "large", 0)
WINDOWS = 40
"""Windows of correlation id per capture: each a query of its own (windows of 3 calls took 4 s on a fix pair)."""


@pytest.mark.parametrize("capture", SQLITE_CAPTURES, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_what_to_fix_over_every_step_streamed_in_windows_is_the_whole_capture_read_whole(
        capture: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a streamed capture says of all its steps: their times (analysis/whole_steps.py), budget (the page's
    chart of steps, analysis/whole_budget.py), "What to fix" (analysis/whole_findings.py) and the steps it draws in
    full (their events and idle stretches, analysis/step_events.py) is what the capture read whole gives, in one
    window and in ~40 windows of correlation id (launches and GPU work) and of start time (the host's ranges,
    dispatch runs, syncs), its steps budgeted a few pieces of GPU work at a time."""
    loaded = nsight_core.load_trace(capture)
    read_whole = analyze_steps(loaded)
    drawn = drawing_for(loaded, read_whole.analysis, read_whole)
    steps = read_whole.analysis.steps
    assert steps.source == "nvtx" and steps.clock == "gpu"
    trace = Trace(SpilledTables(SqliteTables(capture), STREAMED))
    streamed = events(trace)
    events_ = sum(frame.select(pl.len()).collect().item() for frame in (streamed.cuda_api, streamed.kernels))
    expected = read_whole.analysis.model_copy(update={"steps": steps.model_copy(update={"candidates": []})})
    for rows in (None, max(3, events_ // WINDOWS)):
        every = every_step(streamed, steps, rows)
        assert every is not None and every.stats == steps.model_copy(update={"candidates": [], "bound": "unknown"})
        budget = whole_capture_budget(streamed, every, rows)
        assert budget is not None and budget.budget == read_whole.analysis.budget, rows
        assert budget.steps.equals(read_whole.budgets) and budget.bound == steps.bound, rows
        assert whole_capture_analysis(trace, every, budget, window_rows=rows) == expected, rows
        assert every.windows is not None
        assert_same_drawing(streamed_drawing(streamed, read_whole.analysis, every.windows, budget), drawn)
        monkeypatch.setattr(whole_budget, "STREAMED_BATCH_WORK", 7)  # then batches of a few pieces of work
    # A step whose GPU window holds more GPU work than the memory allowed reads at once is refused before any is read.
    assert every is not None and every.windows is not None
    largest = largest_step([loaded.kernels, loaded.memcpy, loaded.memset, loaded.graphs], every.windows)
    limited = whole_capture_budget(streamed, every, step_rows=largest)
    assert limited is not None and limited.budget == read_whole.analysis.budget
    with pytest.raises(StepTooLarge, match=rf"step \d+ holds {largest:,} events"):
        whole_capture_budget(streamed, every, step_rows=largest - 1)
    # As are more steps than the memory allowed holds what each needs over every step of (STEP_EVENTS each).
    steps_held = every.windows.height * STEP_EVENTS
    assert whole_capture_budget(streamed, every, held_rows=steps_held) is not None
    with pytest.raises(StepTooLarge, match=rf"its {every.windows.height:,} steps take about {steps_held:,} events'"):
        whole_capture_budget(streamed, every, held_rows=steps_held - 1)
    # The NVTX range table in 7 windows (of ranges, calls and GPU work): most ranges' parents are carried into them.
    counted = sum(frame.select(pl.len()).collect().item()
                  for frame in (streamed.nvtx, streamed.cuda_api, streamed.kernels, streamed.memcpy, streamed.memset))
    assert whole_capture_ranges(streamed, read_whole.analysis.window.span_ns, counted // 7) == \
        read_whole.analysis.ranges


@pytest.mark.nsys
@pytest.mark.parametrize("recorded", ["cpu-steps", "h200-quick-start-cuda13-incomplete/train.nsys-rep",
                                      "h200-ddp-cuda13-incomplete/train_ddp.nsys-rep"])
def test_steps_on_the_cpus_clock_streamed_in_windows_get_what_to_fix_over_every_step_as_read_whole(
        recorded: str, nsys: Nsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
) -> None:
    """Steps on the CPU's clock: a real nsys capture of a loop that sleeps and spins in ranges (OS-runtime calls
    traced, no GPU), and two H200 captures whose CUDA 13 work nsys 2023.4.4 mostly missed (a few kernels and copies,
    too few steps launched any). Their budget (analysis/whole_budget.py, batches of steps with every event overlapping
    them), "What to fix" and drawn steps streamed are the capture's read whole, in one window and in windows of a few
    events; and a streamed profile of it says so."""
    source = request.getfixturevalue("cpu_steps") if recorded == "cpu-steps" else FIXTURES / recorded
    capture = Path(shutil.copy(source, tmp_path / source.name))
    sqlite = export(capture, "sqlite", nsys)
    loaded = nsight_core.load_trace(sqlite)
    read_whole = analyze_steps(loaded)
    steps = read_whole.analysis.steps
    assert steps.source == "nvtx" and steps.clock == "cpu" and steps.family is not None
    # What the host did while the GPU idled (its sleeps, its ranges, its calls) is what the budget says.
    assert read_whole.analysis.budget.idle_activities and read_whole.analysis.ranges
    every, streamed, expected = assert_cpu_clock_streamed_as_read_whole(sqlite, loaded, read_whole)
    # A step holding more events than the memory allowed reads at once is refused before any is read.
    largest = largest_step([loaded.kernels, loaded.memcpy, loaded.memset, loaded.cuda_api, loaded.osrt, loaded.nvtx],
                           every.ranges)
    limited = whole_capture_budget(streamed, every, step_rows=largest)
    assert limited is not None and limited.budget == read_whole.analysis.budget
    with pytest.raises(StepTooLarge, match=rf"step \d+ holds {largest:,} events, and the memory allowed reads "
                                           rf"{largest - 1:,} at once"):
        whole_capture_budget(streamed, every, step_rows=largest - 1)

    # Streamed end to end: the profile's "What to fix" is every step's.
    monkeypatch.setattr(export_module, "STREAM_ABOVE_BYTES", 0)
    monkeypatch.setattr(memory, "STREAMED_SUMMARY_BYTES", 1 << 20)
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "8M")
    # The part that fits is half the events: the H200 captures spend more than that before their loops, so their step
    # family is chosen from all their NVTX ranges, which fit read alone.
    monkeypatch.setattr(profile_module, "affordable_event_bytes", lambda: loaded.event_bytes // 2)
    profile = build_profile(capture)
    assert profile.stats.export is not None and profile.stats.export.streamed
    chosen_by = ("its first part that fits has no NVTX steps" in note_line(profile),
                 bool(re.search(r"chosen by its first [\d,]+ steps", note_line(profile))))
    assert chosen_by == ((False, True) if recorded == "cpu-steps" else (True, False)), note_line(profile)
    assert note_line(profile).startswith(f"What to fix covers all {expected.budget.steps:,} steady steps")
    assert profile.analysis == withhold_savings(expected, profile.completeness)  # a trace that lost data: no savings


NO_STEP_RANGES = {"deleted": "DELETE FROM NVTX_EVENTS",
                  "open": 'UPDATE NVTX_EVENTS SET "end" = (SELECT max("end") FROM NVTX_EVENTS) WHERE "end" NOT NULL'}
"""Two ways to take a capture's NVTX steps away: no ranges, or every range open to the end (none a step: they
overlap), each enclosing what the steps' host calls did after it began."""
KERNEL_PERIOD_CAPTURES = [("h200-fix-pairs-2025/sync_log-problem.sqlite", "deleted"),
                          ("h200-fix-pairs-2025/sync_log-problem.sqlite", "open"),
                          ("h200-fix-pairs-2025/graph-problem.sqlite", "deleted"),
                          ("h200-2025-process/nsight-0013a405.sqlite", "deleted")]


@pytest.mark.parametrize(("recorded", "ranges"), KERNEL_PERIOD_CAPTURES)
def test_kernel_period_steps_streamed_get_what_to_fix_over_every_step_as_read_whole(
        recorded: str, ranges: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop without NVTX steps (the H200 captures with their NVTX events deleted, or all left open: 19 steps of 35
    kernels, 300 CUDA graph replays of 3, a whole process's 86 periods of 18): its steps are the kernel sequence's
    periods. Streamed, every step is found by the kernel the first steps start with, and its steps, budget, "What to
    fix" (its sync calls named by the ranges they lie in, which began steps before) and drawn steps are the capture's
    read whole, in one window and in windows of a few events; a streamed profile says so."""
    capture = without_nvtx(FIXTURES / recorded, tmp_path, NO_STEP_RANGES[ranges])
    loaded = nsight_core.load_trace(capture)
    read_whole = analyze_steps(loaded)
    steps = read_whole.analysis.steps
    assert steps.source == "kernel-period" and steps.family is not None and steps.anchor_kernel
    assert read_whole.analysis.findings and bool(loaded.nvtx.height) == (ranges == "open")
    expected = assert_cpu_clock_streamed_as_read_whole(capture, loaded, read_whole)[2]

    # Streamed end to end: the steps chosen by the first half of the events, "What to fix" over every one of them.
    monkeypatch.setattr(memory, "STREAMED_SUMMARY_BYTES", 1 << 20)
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "4M")
    monkeypatch.setattr(profile_module, "affordable_event_bytes", lambda: loaded.event_bytes // 2)
    profile = build_profile(capture)
    assert profile.stats.export is not None and profile.stats.export.streamed
    assert re.search(r"chosen by its first [\d,]+ steps", note_line(profile)), note_line(profile)
    assert note_line(profile).startswith(f"What to fix covers all {expected.budget.steps:,} steady steps")
    assert profile.completeness is not None
    assert profile.analysis == withhold_savings(expected, profile.completeness)
    assert_same_drawing(profile.steps_drawn, drawing_for(loaded, read_whole.analysis, read_whole))


NO_STEP_CAPTURES = [("h200-fix-pairs-2025/tf32-problem.sqlite", "deleted"),
                    ("h200-2025-graph-node/graph_node.sqlite", "deleted"),
                    ("h200-fix-pairs-2025/dataloader-problem.sqlite", "open")]


@pytest.mark.parametrize(("recorded", "ranges"), NO_STEP_CAPTURES)
def test_a_capture_without_steps_streamed_gets_what_to_fix_over_all_of_it_as_read_whole(
        recorded: str, ranges: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A capture without steps (H200 captures without NVTX steps whose kernels do not repeat: 80 of one name, 7,788
    CUDA-graph nodes, a data loader's loop with its ranges left open) is one step, its user window, as read whole.
    Streamed, that step is cut where the GPU is busy into ~40 pieces, read a batch at a time, and its
    budget and "What to fix" are the capture's read whole; a streamed profile says so, and so does its progress."""
    capture = without_nvtx(FIXTURES / recorded, tmp_path, NO_STEP_RANGES[ranges])
    loaded = nsight_core.load_trace(capture)
    read_whole = analyze_steps(loaded)
    assert read_whole.analysis.steps.source == "none" and read_whole.analysis.budget_scope == "capture"
    assert {finding.kind for finding in read_whole.analysis.findings} > {"no_steps"}
    trace = Trace(SpilledTables(SqliteTables(capture), STREAMED))
    streamed = events(trace)
    window = capture_window(trace, streamed)
    expected = read_whole.analysis.model_copy(update={"steps": read_whole.analysis.steps.model_copy(
        update={"candidates": []})})
    counted = sum(frame.select(pl.len()).collect().item() for frame in (
        streamed.kernels, streamed.memcpy, streamed.memset, streamed.cuda_api, streamed.osrt, streamed.nvtx))
    for rows in (None, max(3, counted // WINDOWS)):
        every = capture_as_step(streamed, read_whole.analysis.steps, window.start_ns, window.end_ns, rows)
        assert every.pieces is not None
        assert (every.pieces.height > 10) == (rows is not None), every.pieces.height
        budget = whole_capture_budget(streamed, every, rows)
        assert budget is not None and budget.budget == read_whole.analysis.budget, rows
        assert budget.steps.equals(read_whole.budgets), rows
        assert whole_capture_analysis(trace, every, budget, window_rows=rows) == expected, rows
    # A piece holding more events than the memory allowed reads at once is refused before any is read.
    with pytest.raises(StepTooLarge, match=r"piece \d+ of the capture \(cut where the GPU is busy\) holds"):
        whole_capture_budget(streamed, every, 3, step_rows=1)

    # Streamed end to end: "What to fix" covers all of it, nothing drawn (no steps), as read whole. The analysis may
    # read two thirds of the events at once (the 83 events before the tf32 capture's first kernel, in one piece).
    monkeypatch.setattr(memory, "STREAMED_SUMMARY_BYTES", 1 << 20)
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "4M")
    monkeypatch.setattr(profile_module, "affordable_event_bytes", lambda: loaded.event_bytes * 2 // 3)
    with caplog.at_level(logging.INFO, logger="nsight"):
        profile = build_profile(capture)
    progress = [re.sub(r"\d+ s in", "N s in", record.getMessage()) for record in caplog.records
                if record.getMessage().startswith("What to fix:")]
    assert len(progress) == 2 and re.fullmatch(r"What to fix: the time budget of the capture as one step, in "
                                               r"[\d,]+ pieces, streamed \(N s in\)", progress[0]), progress
    assert progress[1] == "What to fix: findings and NVTX ranges over all of it (N s in)"
    assert profile.stats.export is not None and profile.stats.export.streamed
    assert note_line(profile).startswith("What to fix covers all of it as one step (its first part that fits has "
                                         "no steps), streamed from disk"), note_line(profile)
    assert profile.completeness is not None
    assert profile.analysis == withhold_savings(expected, profile.completeness)
    assert profile.steps_drawn is None and profile.whole_steps is None


def test_kernel_period_steps_streamed_are_cut_as_read_whole() -> None:
    """Every period's start and end (:func:`steps.period_steps`, the one cut of kernels read whole and streamed, the
    streamed table's rows not in order of start): an anchor followed by fewer kernels than a period starts no step, and
    the last step ends when the kernels through its period's last have all ended, one that started earlier and ended
    later among them."""
    names = ["a", "b", "c"] * 12 + ["a", "b"] + ["eval"] * 3
    starts = [10 * position for position in range(len(names))]
    ends = [start + 5 for start in starts]
    ends[31] = 10_000  # a kernel of the eleventh period outlasts every kernel after it
    kernels = pl.DataFrame({"start_ns": starts, "end_ns": ends, "name": names})
    shuffled = kernels.sample(fraction=1.0, shuffle=True, seed=3)  # a table's rows are not in order of start
    # After the loop (its last anchor followed by a period's count of kernels), the loop's end, a partial iteration.
    for upto, count in ((len(names), 13), (36, 12), (38, 12)):
        expected, period, anchor, _ = kernel_period_steps(kernels.head(upto))
        assert period == 3 and anchor == "a" and expected.height == count
        found = period_steps(shuffled.filter(pl.col("start_ns") < 10 * upto).lazy(), 3, "a")
        assert found.equals(expected), upto
        assert found["end_ns"][-1] == 10_000


def assert_cpu_clock_streamed_as_read_whole(sqlite: Path, loaded: Trace, read_whole: Analyzed,
                                            ) -> tuple[EveryStep, Events, Analysis]:
    """Every step of SQLITE streamed (its steps on the CPU's clock), in one window and in windows of 3 events: its
    steps, budget, "What to fix" and drawn steps are those of LOADED, the capture read whole (READ_WHOLE). Returns the
    last pass's steps, the streamed frames and the analysis expected of a streamed capture."""
    drawn = drawing_for(loaded, read_whole.analysis, read_whole)
    trace = Trace(SpilledTables(SqliteTables(sqlite), STREAMED))
    streamed = events(trace)
    steps = read_whole.analysis.steps
    expected = read_whole.analysis.model_copy(update={"steps": steps.model_copy(update={"candidates": []})})
    for rows in (None, 3):
        every = every_step(streamed, steps, rows)
        assert every is not None and every.windows is None and every.stats == expected.steps
        budget = whole_capture_budget(streamed, every, rows)
        assert budget is not None and budget.budget == read_whole.analysis.budget, rows
        assert budget.steps.equals(read_whole.budgets), rows
        assert whole_capture_analysis(trace, every, budget, window_rows=rows) == expected, rows
        assert_same_drawing(streamed_drawing(streamed, read_whole.analysis, every.drawn, budget), drawn)
    assert every is not None
    return every, streamed, expected


def test_ranges_that_overlap_somewhere_are_no_steps() -> None:
    """A family whose ranges overlap across the whole capture, though not in its first steps, is not what the whole
    capture's analysis would take as steps: no statement on all of them."""
    family = StepFamily(pattern="step_{n}", domain="", thread=1, depth=0, count=2, total_ns=20, p50_ns=10, p95_ns=10,
                        min_ns=10, max_ns=10, first_ns=10, sequential=True)
    ranges = pl.DataFrame({"step": [0, 1, 2], "start_ns": [0, 10, 25], "end_ns": [10, 20, 30]})
    stated = family_stats(ranges, family)
    assert stated is not None and stated.family is not None and stated.family.count == 3
    assert family_stats(ranges.with_columns(pl.Series("end_ns", [10, 30, 40])), family) is None


def test_steps_that_launched_no_gpu_work_are_stated_on_the_cpus_clock() -> None:
    """A capture without GPU work (a CPU loop, or CUDA that nsys did not see): all its steps as their ranges' own
    times, as :func:`find_steps` states them read whole."""
    nvtx = pl.DataFrame({"start_ns": [0, 5, 100, 250, 400], "end_ns": [90, 20, 240, 390, 700],
                         "name": ["step_0", "op", "step_1", "step_2", "step_3"], "domain": [""] * 5,
                         "thread": [7] * 5, "depth": [0, 1, 0, 0, 0]})
    none = pl.DataFrame(schema={"start_ns": pl.Int64, "end_ns": pl.Int64, "correlation_id": pl.Int64})
    kernels = none.with_columns(pl.lit(None, pl.String).alias("name"))
    frames = SimpleNamespace(nvtx=nvtx.lazy(), cuda_api=none.lazy(), kernels=kernels.lazy(), memcpy=none.lazy(),
                             memset=none.lazy(), graphs=none.lazy())
    read_whole, _ = find_steps(nvtx, none)
    every = whole_capture_steps(frames, read_whole, 2)  # type: ignore[arg-type]  # the lazy frames it reads
    assert every == read_whole.model_copy(update={"candidates": []})
    assert every is not None and every.clock == "cpu" and every.family is not None and every.family.count == 4


@pytest.mark.parametrize("capture", ["h200-fix-pairs-2025/dataloader-problem.sqlite",
                                     "h200-fix-pairs-2025/sync_log-problem.sqlite"])
def test_a_part_read_from_the_statistics_copies_is_the_part_sqlite_gives(
        capture: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first part is read after the statistics copied the big tables to Parquet: from those copies (a scan that
    skips what lies after the cut, where each SQLite read scans the whole table: 3 M NVTX ranges, 13.5 -> 9.6 s for
    the profile), with every frame and the analysis as the SQLite export gives them."""
    from nsight_core.analysis.timeline import summarize_trace
    from nsight_core.stats.load import stats_of_trace
    from nsight_core.trace.export import ExportChoice
    from nsight_core.trace.model import Trace
    from nsight_core.trace.spill import SpilledTables

    sqlite = tmp_path / Path(capture).name
    shutil.copyfile(FIXTURES / capture, sqlite)
    tables = SpilledTables(SqliteTables(sqlite), ExportChoice("sqlite", True, "large", sqlite.stat().st_size))
    whole = Trace(tables)
    stats_of_trace(whole, nsight_core.DEFAULT_REPORTS), summarize_trace(whole)  # what a streamed profile does first
    cut, kernels = int(whole.cuda_api["start_ns"].median()), whole.kernels.height  # type: ignore[arg-type]

    from_sqlite = head(SqliteTables(sqlite), cut)
    frames = ("kernels", "memcpy", "memset", "cuda_api", "nvtx", "nvtx_marks", "osrt")
    expected = {frame: getattr(from_sqlite, frame) for frame in frames}
    read_from_sqlite = []
    real_read = SqliteTables.read
    monkeypatch.setattr(SqliteTables, "read", lambda self, table, *args, **kwargs: (
        read_from_sqlite.append(table), real_read(self, table, *args, **kwargs))[1])
    from_copies = head(tables, cut)
    for frame in frames:
        assert getattr(from_copies, frame).equals(expected[frame]), frame
    assert 0 < from_copies.kernels.height < kernels
    assert not {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"} & set(read_from_sqlite)
    assert analyze_steps(from_copies).analysis == analyze_steps(from_sqlite).analysis


def test_captures_too_large_to_analyse_whole_are_compared_on_every_step_streamed(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """`nsight diff` of two captures whose events would not fit read whole compares what streams: the gate on every
    step's p50 (analysis/whole_steps.py), every step's budget and the user window (analysis/whole_findings.py), the
    kernels, NVTX ranges and GPU busy time, each what the comparison of the captures read whole gives."""
    pairs = FIXTURES / "h200-fix-pairs-2025"
    problem, fixed = pairs / "dataloader-problem.sqlite", pairs / "dataloader-fixed.sqlite"
    whole, streamed = diffed_whole_and_streamed(problem, fixed, monkeypatch, 3)
    assert whole.gate.metric == "step_p50" and whole.verdict == "faster" and not whole.streamed
    assert streamed.streamed == ["a", "b"]
    assert (streamed.gate, streamed.verdict, streamed.reasons) == (whole.gate, whole.verdict, whole.reasons)
    assert (streamed.kernels, streamed.ranges) == (whole.kernels, whole.ranges)
    assert streamed.deltas == whole.deltas
    assert {d.name for d in whole.deltas} >= {"step_count", "step_p50", "gpu_busy", "kernel_time_sum", "user_window",
                                              "gpu_idle_per_step", "compute_per_step"}
    text = render_diff(streamed)
    assert text.startswith(render_diff(whole).splitlines()[0])
    assert "A is too large to analyse whole in the memory allowed: its step times and budget (all its steps)" in text
    assert "B is too large" in text and "its budget is not" not in text
    # Steps the memory allowed cannot hold over every step: compared on every step's time, not budget.
    monkeypatch.setattr(compare, "step_rows", lambda _: 1)
    with caplog.at_level(logging.WARNING, logger="nsight"):
        steps_only = compare.diff(problem, fixed)
    assert re.search(r"dataloader-problem.sqlite: compared on every step's time, not its budget \(its [\d,]+ steps "
                     r"take about [\d,]+ events' memory over every step, and the memory allowed reads 1 at once\)",
                     caplog.text), caplog.text
    assert (steps_only.gate, steps_only.verdict) == (whole.gate, whole.verdict)
    assert not any(delta.group == "budget" for delta in steps_only.deltas)
    assert "A is too large to analyse whole in the memory allowed: its step times (all its steps), kernels, NVTX " \
           "ranges and GPU busy time are compared, streamed from disk; its budget is not." in render_diff(steps_only)

    # Not even the first steps, which pick the family, fit: refused, as before (a gate on GPU busy time instead would
    # pass a slower step).
    monkeypatch.setattr(profile_module, "affordable_event_bytes", lambda: 0)
    with pytest.raises(NotEnoughMemoryError, match=r"comparing dataloader-problem.sqlite needs about .* \(its events "
                                                   r"take 460.00 KiB in the export\) and NSIGHT_SUMMARY_MEMORY=8M"):
        compare.diff(problem, fixed)
    # Too little even for streaming: refused, with the numbers.
    monkeypatch.setattr(memory, "STREAMED_SUMMARY_BYTES", 16 << 20)
    with pytest.raises(NotEnoughMemoryError, match=r"comparing dataloader-problem.sqlite needs about 16.00 MiB "
                                                   r"of memory \(streamed from disk, its size aside\)"):
        compare.diff(problem, fixed)


@pytest.mark.nsys
def test_cpu_loops_too_large_to_analyse_whole_are_compared_on_every_steps_budget(
        loops: dict[str, Path], nsys: Nsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`nsight diff` of two CPU loops (real nsys captures, steps on the CPU's clock) that are streamed compares every
    step's budget too, each delta what the comparison of the captures read whole gives."""
    fast, slow = (export(Path(shutil.copy(loops[name], tmp_path / f"{name}.nsys-rep")), "sqlite", nsys)
                  for name in ("fast", "slow"))
    whole, streamed = diffed_whole_and_streamed(fast, slow, monkeypatch, 2)
    assert whole.verdict == "slower" and not whole.streamed
    assert any(delta.group == "budget" for delta in whole.deltas)
    assert streamed.streamed == ["a", "b"]
    assert (streamed.gate, streamed.verdict, streamed.deltas) == (whole.gate, whole.verdict, whole.deltas)
    text = render_diff(streamed)
    assert "its step times and budget (all its steps)" in text and "its budget is not" not in text


def test_loops_without_nvtx_too_large_to_analyse_whole_are_compared_on_every_kernel_period(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`nsight diff` of two streamed captures whose steps are their kernel sequence's periods (a fix pair with its NVTX
    events deleted) compares every period's time and budget, each delta what the comparison read whole gives."""
    a, b = (without_nvtx(FIXTURES / "h200-fix-pairs-2025" / f"host_load-{name}.sqlite", tmp_path)
            for name in ("problem", "fixed"))
    whole, streamed = diffed_whole_and_streamed(a, b, monkeypatch, 2)
    assert whole.gate.metric == "step_p50" and not whole.streamed
    assert any(delta.group == "budget" for delta in whole.deltas)
    assert streamed.streamed == ["a", "b"]
    assert (streamed.gate, streamed.verdict, streamed.reasons, streamed.deltas) == (
        whole.gate, whole.verdict, whole.reasons, whole.deltas)
    assert "its step times and budget (all its steps)" in render_diff(streamed)


def test_captures_without_steps_too_large_to_analyse_whole_are_compared_on_all_of_it_as_read_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`nsight diff` of two streamed captures without steps (the TF32 fix pair without NVTX: 80 kernels of one name)
    compares their budget as one step and their user window, each delta what the comparison read whole gives."""
    a, b = (without_nvtx(FIXTURES / "h200-fix-pairs-2025" / f"tf32-{name}.sqlite", tmp_path)
            for name in ("problem", "fixed"))
    # Two thirds of A's events may be read at once: the 83 before its first kernel, one piece, among them.
    whole, streamed = diffed_whole_and_streamed(a, b, monkeypatch, 1.5)
    assert not whole.streamed and {"budget", "summary"} <= {delta.group for delta in whole.deltas}
    assert not any(delta.group == "steps" for delta in whole.deltas)
    assert streamed.streamed == ["a", "b"]
    assert (streamed.gate, streamed.verdict, streamed.reasons, streamed.deltas) == (
        whole.gate, whole.verdict, whole.reasons, whole.deltas)
    assert "A is too large to analyse whole in the memory allowed: its budget (all of it as one step), kernels, NVTX " \
           "ranges and GPU busy time are compared, streamed from disk." in render_diff(streamed)


def without_nvtx(capture: Path, folder: Path, change: str = NO_STEP_RANGES["deleted"]) -> Path:
    """A copy of CAPTURE (an SQLite export) in FOLDER without NVTX steps (CHANGE, of :data:`NO_STEP_RANGES`): by
    default its NVTX events deleted, a loop nothing marks."""
    copy = Path(shutil.copy(capture, folder / capture.name))
    with closing(sqlite3.connect(copy)) as db, db:
        db.execute(change)
    return copy


def diffed_whole_and_streamed(a: Path, b: Path, monkeypatch: pytest.MonkeyPatch,
                              share: float) -> tuple[TraceDiff, TraceDiff]:
    """`nsight diff A B` read whole, then with reading whole refused (it would need more than 8 MiB) and streaming
    allowed (1 MiB), the first part, which picks the step family, reading 1/SHARE of A's event tables' bytes."""
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "off")
    whole = compare.diff(a, b)
    monkeypatch.setattr(memory, "STREAMED_SUMMARY_BYTES", 1 << 20)
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "8M")
    event_bytes = nsight_core.load_trace(a).event_bytes
    monkeypatch.setattr(profile_module, "affordable_event_bytes", lambda: int(event_bytes / share))
    return whole, compare.diff(a, b)

