"""Large captures: the trace summary (span, GPU busy time, timeline, NVTX instances and buckets, OS calls) and the
completeness checks streamed from a spilled SQLite export equal the whole-frame path's on every H200 fixture, in one
window or in windows of a few events (what a capture of millions of events gets: analysis/intervals.py).

The fixtures are small, so the windows are made small (``window_rows``) to cross many window boundaries: NVTX ranges
open across a boundary, kernels overlapping one. The streamed trace, the one the product windows, is summarised in
windows of a few events; the same code over frames in memory in windows of 50. Each window is a query of its own:
windows of 4 over the 5-8 k kernels of the two 2025 captures took 7-10 s of CPU each, so a table that large is cut
into WINDOWS windows instead: still forty boundaries in it (a hundred took 37 CPU-s for this file, forty 20). The
nsys 2023 fix pairs are windowed through their nsys 2025 recordings (h200-fix-pairs-2025: the same programs, the same
event counts table for table, but for graph-fixed, whose graph launches nsys 2023 did not record); the 2023 ones are
compared in one window, which reads their export.
A 1 M-range capture is compared in tests/core/test_large_capture.py (slow: `make bench`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixture_sets import fanned

import nsight_core
from nsight_core.analysis.completeness import check_completeness
from nsight_core.analysis.trace_summary import summarize_trace
from nsight_core.nsys import Nsys
from nsight_core.trace.export import ExportChoice, export
from nsight_core.trace.model import Trace
from nsight_core.trace.spill import SpilledTables
from nsight_core.trace.streamed import events
from nsight_core.trace.tables import SqliteTables

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CAPTURES = sorted(p for p in FIXTURES.rglob("*.nsys-rep") if "2025" not in p.parent.name) + \
    sorted(FIXTURES.rglob("*.sqlite"))
STREAMED = ExportChoice(kind="sqlite", streamed=True, reason="large", trace_bytes=0)
RECORDED_AGAIN = FIXTURES / "h200-fix-pairs-2025"  # the nsys 2023 fix pairs (h200-fix-pairs), recorded with nsys 2025
FEW = 4  # events per window of the streamed trace...
WINDOWS = 40  # ...or its largest table in this many windows, where that makes them larger
IN_MEMORY_ROWS = 50  # events per window of the frames in memory


@pytest.mark.nsys
@pytest.mark.parametrize("capture", fanned(CAPTURES))  # every fixture: make test-all
def test_streamed_summary_and_completeness_equal_the_whole_frames(capture: Path, nsys: Nsys, tmp_path: Path) -> None:
    copy = tmp_path / capture.name
    shutil.copyfile(capture, copy)
    sqlite = copy if copy.suffix == ".sqlite" else export(copy, "sqlite", nsys)
    whole_trace = nsight_core.load_trace(sqlite)
    whole = summarize_trace(whole_trace)
    verdict = check_completeness(whole_trace)
    streamed_trace = Trace(SpilledTables(SqliteTables(sqlite), STREAMED))
    assert events(streamed_trace).streamed and not events(whole_trace).streamed
    assert summarize_trace(streamed_trace) == whole
    assert check_completeness(streamed_trace) == verdict
    assert whole.span_ns > 0 and (whole.nvtx or whole.osrt or whole.kernel_count)
    if capture.parent.name == "h200-fix-pairs" and (RECORDED_AGAIN / f"{capture.stem}.sqlite").exists():
        return  # windowed through its nsys 2025 recording
    # Windows of a few events: their results add up to the same numbers, exactly.
    rows = max(FEW, max(whole.kernel_count, whole.copy_count, whole.nvtx_total, whole.osrt_calls) // WINDOWS)
    assert summarize_trace(streamed_trace, window_rows=rows) == whole, rows
    assert summarize_trace(whole_trace, window_rows=IN_MEMORY_ROWS) == whole
