"""Incomplete-trace detection on real H200 recordings (tests/fixtures, README there says how each was made).

The whole-task CUDA 13 captures made by nsys 2023.4.4 lost almost all CUDA activity; the region captures
and the diagnosis fixture, made by the same nsys on the same machine, are complete and must stay quiet.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import nsight_core
from nsight_core.analysis.completeness import capture_facts, check_completeness

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
    assert "Importation succeeded with non-fatal errors" in importer.message
    assert importer.evidence["unknown_call"] == "runtime API function index 468"
    truncated = result.warnings[3]
    assert truncated.evidence["ranges"] == 20 and truncated.evidence["ranges_with_cuda"] == 0
    assert "370 ms before its NVTX ranges" in truncated.message


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
