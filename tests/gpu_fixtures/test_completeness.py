"""Incomplete-trace detection on real H200 recordings (tests/fixtures, README there says how each was made).

The whole-task CUDA 13 captures made by nsys 2023.4.4 lost almost all CUDA activity; the region captures
and the diagnosis fixture, made by the same nsys on the same machine, are complete and must stay quiet.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from capture_helpers import nsight_here
from fixture_sets import exports_2025

import nsight_core
from nsight_core.analysis.completeness import _ranges_with_cuda, capture_facts, check_completeness
from nsight_core.trace.export import export as export_capture
from nsight_core.trace.streamed import events

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RECORDING_NSYS = "2023.4.4.54"

pytestmark = pytest.mark.nsys

COMPLETE = ["h200-torch-mlp/training.nsys-rep", "h200-torch-mlp/evaluation.nsys-rep",
            "h200-two-streams/two_streams.nsys-rep", "h200-diagnosis/diagnosis.nsys-rep"]


def private_copy(rel: str, tmp_path: Path, with_stream: bool = True) -> Path:
    """The fixture REL (and its leftover .qdstrm, if asked and recorded) copied into TMP_PATH."""
    source = FIXTURES / rel
    target = tmp_path / source.name
    shutil.copyfile(source, target)
    stream = source.with_suffix(".qdstrm")
    if with_stream and stream.exists():
        shutil.copyfile(stream, target.with_suffix(".qdstrm"))
    return target


def stop_output(rel: str) -> str:
    """What `nsys stop` printed when the fixture was recorded."""
    return ((FIXTURES / rel).parent / "nsys-stop.txt").read_text()


def test_whole_task_cuda13_capture_is_flagged_with_cause_and_fix(tmp_path):
    rel = "h200-quick-start-cuda13-incomplete/train.nsys-rep"
    report = private_copy(rel, tmp_path)
    result = check_completeness(nsight_core.load_trace(report),
                                capture_facts(report, stop_output(rel), RECORDING_NSYS))

    assert not result.complete
    assert [w.code for w in result.warnings] == [
        "nsys_older_than_cuda", "importer_errors", "raw_stream_left", "cuda_ends_early"]
    first = result.warnings[0]
    assert first.message == "nsys 2023.4.4.54 cannot fully import CUDA 13 traces"
    assert "at least as new as the CUDA runtime" in first.fix and "NGC image" in first.fix
    assert result.cuda_version == "13.0"
    importer = result.warnings[1]
    assert "Importation succeeded with non-fatal errors" in str(importer.evidence["nsys_said"])
    assert importer.evidence["unknown_call"] == "runtime API function index 468"
    truncated = result.warnings[3]
    assert truncated.evidence["ranges"] == 20 and truncated.evidence["ranges_with_cuda"] == 0
    gap = int(truncated.evidence["nvtx_end_ns"]) - int(truncated.evidence["cuda_end_ns"])
    assert round(gap / 1e6) == 370  # ms: CUDA activity ends that long before the NVTX ranges


def test_the_trace_alone_is_enough_to_say_it_looks_truncated(tmp_path):
    """A .nsys-rep passed around without its nsys output or raw stream still gets the warning."""
    report = private_copy("h200-quick-start-cuda13-incomplete/train.nsys-rep", tmp_path, with_stream=False)
    result = check_completeness(nsight_core.load_trace(report))

    assert not result.complete
    assert [w.code for w in result.warnings][-1] == "cuda_ends_early"
    assert "raw_stream_left" not in [w.code for w in result.warnings]


def test_ddp_whole_task_capture_is_flagged(tmp_path):
    rel = "h200-ddp-cuda13-incomplete/train_ddp.nsys-rep"
    report = private_copy(rel, tmp_path)
    result = check_completeness(nsight_core.load_trace(report),
                                capture_facts(report, stop_output(rel), RECORDING_NSYS))

    assert [w.code for w in result.warnings] == ["nsys_older_than_cuda", "importer_errors", "cuda_ends_early"]


@pytest.mark.parametrize("rel", COMPLETE)
def test_complete_captures_get_no_warning(rel, tmp_path):
    """Same old nsys, same CUDA 13: regions opened after CUDA initialised are complete, so no warning."""
    report = private_copy(rel, tmp_path)
    result = check_completeness(nsight_core.load_trace(report), capture_facts(report, "", RECORDING_NSYS))

    assert result.complete and result.warnings == []
    assert result.cuda_version == "13.0"


def test_nsys_saying_so_is_enough(tmp_path):
    """Importer errors in nsys' output flag even a trace that looks whole, with the version as the cause."""
    report = private_copy("h200-two-streams/two_streams.nsys-rep", tmp_path)
    output = stop_output("h200-quick-start-cuda13-incomplete/train.nsys-rep")
    result = check_completeness(nsight_core.load_trace(report), capture_facts(report, output, RECORDING_NSYS))

    assert [w.code for w in result.warnings] == ["nsys_older_than_cuda", "importer_errors"]
    assert "nsys_older_than_cuda" not in [w.code for w in check_completeness(
        nsight_core.load_trace(report), capture_facts(report, output, "2025.3.1")).warnings]


# -- nsys 2025.3's own diagnostics, CUDA graphs and CUDA contexts -----------------------------------------------

PAIRS_2025 = FIXTURES / "h200-fix-pairs-2025"
NOT_ALL_CUDA = "Not all CUDA events might have been collected."


def edited_copy(source: Path, tmp_path: Path, *statements: str) -> Path:
    """A copy of the SQLite export SOURCE changed by STATEMENTS."""
    target = Path(shutil.copyfile(source, tmp_path / source.name))
    with sqlite3.connect(target) as connection:
        for statement in statements:
            connection.execute(statement)
    connection.close()
    return target


def test_graph_launches_without_gpu_work_are_incomplete(tmp_path):
    """nsys 2023.4.4 recorded the 20 CUDAGraph.replay() steps of graph-fixed with their cudaGraphLaunch calls and no
    GPU work at all: a red box, which nsight stats prints before any number."""
    report = private_copy("h200-fix-pairs/graph-fixed.nsys-rep", tmp_path)
    result = check_completeness(nsight_core.load_trace(report))
    assert not result.complete
    assert [w.code for w in result.warnings] == ["nsys_older_than_cuda", "graph_work_missing"]
    missing = result.warnings[1]
    assert (missing.evidence["graph_launches"], missing.evidence["launches_without_gpu_work"]) == (20, 20)
    assert missing.evidence["graph_rows"] == 0 and missing.evidence["kernels"] == 0
    assert "cuda_graph_trace='node'" in missing.fix and "2025.3" in missing.fix
    done = nsight_here("stats", report)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("== WARNING: this trace is incomplete")
    assert "20 of 20 CUDA graph launches have no GPU work" in done.stdout


@pytest.mark.parametrize("export", exports_2025(), ids=lambda p: p.name)
def test_nsys_2025_captures_are_complete_with_nsys_warnings_kept(export):
    """Every 2025.3 capture is complete (graph-fixed too: its launches are on the GPU as graph rows); nsys'
    warnings are kept with their text, none of them a loss."""
    result = check_completeness(nsight_core.load_trace(export))
    assert result.complete and result.warnings == [], result.warnings
    assert result.nsys_version is not None and result.nsys_version.startswith("2025.3")
    assert all(d.severity in {"Warning", "Error"} and d.text and not d.lost_data for d in result.diagnostics)


def test_region_warnings_of_nsys_2025_are_kept_as_said():
    result = check_completeness(nsight_core.load_trace(PAIRS_2025 / "graph-fixed.sqlite"))
    assert [(d.severity, d.source, d.text) for d in result.diagnostics] == [
        ("Warning", "Analysis", "Not all NVTX events might have been collected."),
        ("Warning", "Analysis", NOT_ALL_CUDA)]


def test_warnings_about_another_process_are_no_loss():
    """The whole-process capture: nsys warns that the launcher (not the CUDA program) used no CUDA or NVTX."""
    trace = nsight_core.load_trace(FIXTURES / "h200-2025-process" / "nsight-0013a405.sqlite")
    result = check_completeness(trace)
    assert result.complete
    assert {d.text for d in result.diagnostics} == {
        "No NVTX events collected. Does the process use NVTX?", "CUDA profiling might have not been started correctly.",
        "No CUDA events collected. Does the process use CUDA?"}
    assert {d.pid for d in result.diagnostics}.isdisjoint(set(trace.cuda_contexts["pid"]))


def test_an_nsys_error_is_lost_data_with_its_text(tmp_path):
    """graph-fixed's export with nsys' "Not all CUDA events" raised to an error (as when nsys drops events): the
    trace is incomplete, nsys' own words in the message and in what nsight stats prints."""
    export = edited_copy(PAIRS_2025 / "graph-fixed.sqlite", tmp_path,
                         f"UPDATE DIAGNOSTIC_EVENT SET severity = 3 WHERE text = '{NOT_ALL_CUDA}'")
    result = check_completeness(nsight_core.load_trace(export))
    assert [w.code for w in result.warnings] == ["nsys_lost_data"]
    assert result.warnings[0].message == f"nsys reported that the capture lost data: {NOT_ALL_CUDA}"
    assert result.warnings[0].evidence["nsys_said"] == f"Error: {NOT_ALL_CUDA}"
    done = nsight_here("stats", export)
    assert f"- nsys said (error, lost data): {NOT_ALL_CUDA}" in done.stdout


def test_a_cuda_context_without_cuda_calls_is_incomplete(tmp_path):
    """graph-fixed as nsys 2023.4.4 wrote it, without its CUDA API table (what a region around graph replays came
    back as in an earlier H200 run): a CUDA context under trace=cuda and no CUDA call is a red box."""
    report = private_copy("h200-fix-pairs/graph-fixed.nsys-rep", tmp_path)
    (tmp_path / "edited").mkdir()
    export = edited_copy(export_capture(report, "sqlite"), tmp_path / "edited",
                         "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    trace = nsight_core.load_trace(export)
    assert trace.cuda_contexts.height == 1 and trace.cuda_api.height == 0
    result = check_completeness(trace)
    assert [w.code for w in result.warnings] == ["nsys_older_than_cuda", "cuda_calls_missing"]
    assert result.warnings[1].message.startswith(
        f"process {trace.cuda_contexts['pid'][0]} created a CUDA context while CUDA was traced, yet the trace holds "
        "no CUDA API call")


@pytest.mark.parametrize("rel", ["h200-quick-start-cuda13-incomplete/train.nsys-rep",
                                 "h200-ddp-cuda13-incomplete/train_ddp.nsys-rep"])
def test_the_truncation_check_in_windows_gives_the_same_verdict(rel, tmp_path):
    """A streamed capture checks its ranges against its CUDA events in windows (bounded memory): windows of 3
    positions give the verdict of all at once, evidence and all."""
    trace = nsight_core.load_trace(private_copy(rel, tmp_path, with_stream=False))
    whole = check_completeness(trace)
    assert "cuda_ends_early" in [w.code for w in whole.warnings]
    assert check_completeness(trace, window_rows=3) == whole


@pytest.mark.parametrize("name", ["two-problem", *(pytest.param(name, marks=pytest.mark.exhaustive)
                                                   for name in ("graph-problem", "dataloader-fixed"))])
def test_ranges_holding_cuda_are_counted_alike_in_windows(name, tmp_path):
    """The count behind the truncation check, on complete H200 captures where most ranges hold CUDA work: windows of
    a few positions, each carrying the reach of the events before it, count exactly what all at once does."""
    frames = events(nsight_core.load_trace(private_copy(f"h200-fix-pairs-2025/{name}.sqlite", tmp_path)))
    ranges = frames.nvtx.select("start_ns", "end_ns", "thread").drop_nulls()
    api = frames.cuda_api.select("start_ns", "end_ns", "thread")
    gpu = pl.concat([f.select("start_ns", "end_ns") for f in (frames.kernels, frames.memcpy, frames.memset)])
    whole = _ranges_with_cuda(ranges, api, gpu, None)
    assert whole > 0
    assert [_ranges_with_cuda(ranges, api, gpu, rows) for rows in (5, 37, 400)] == [whole] * 3
