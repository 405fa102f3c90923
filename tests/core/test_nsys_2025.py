"""The loader on nsys 2025.3's export schema: real H200 captures, exported by nsys 2025.3 there.

This machine's nsys (2023.4.4) cannot open a 2025.3 .nsys-rep, so each capture is read through the
SQLite export nsys 2025.3 made of it, and the oracle is the `nsys stats` CSVs nsys 2025.3 wrote there
(tests/fixtures/README.md). Every default report must equal them: every row, field and order.

A schema nsight-core has not seen (a table missing, a column renamed or of another type) must degrade to a
named skipped report or a note, never a crash: tested on trimmed copies of a real export.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from capture_helpers import nsight_here
from fixture_sets import exports_2025

import nsight_core
from nsight_core.stats.load import stats_from_csv_dir, stats_of_trace
from nsight_core.stats.models import ProfileStats
from nsight_core.stats.reports import DEFAULT_REPORTS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXPORTS = exports_2025()
WITH_STATS = [export for export in EXPORTS if export.with_name(f"{export.stem}_cuda_api_sum.csv").exists()]
"""The exports nsys 2025.3's own `nsys stats` CSVs were recorded beside (all of them: the packed sets have none)."""
TABLES = {"cuda_gpu_kern_sum": "kernels", "cuda_gpu_mem_time_sum": "memory_time",
          "cuda_gpu_mem_size_sum": "memory_size", "cuda_api_sum": "api_calls", "nvtx_pushpop_sum": "nvtx_ranges"}
GRAPH_FIXED = FIXTURES / "h200-fix-pairs-2025" / "graph-fixed.sqlite"
QUICK_START = FIXTURES / "h200-fix-pairs-2025" / "quick_start-as_is.sqlite"


def _id(export: Path) -> str:
    return f"{export.parent.name}/{export.name}"


def rows(stats: ProfileStats, report: str) -> list[dict[str, Any]]:
    return [row.model_dump() for row in getattr(stats, TABLES[report])]


def recorded(export: Path) -> ProfileStats:
    """What nsys 2025.3's own `nsys stats` wrote for EXPORT's capture (CSVs beside it)."""
    return stats_from_csv_dir(export.with_suffix(""), list(DEFAULT_REPORTS))


def copy_of(export: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / export.name
    shutil.copyfile(export, target)
    return target


def test_every_2025_fixture_is_here() -> None:
    names = {_id(p) for p in EXPORTS}
    assert len(names) == 45 and len(WITH_STATS) == 45
    assert {"h200-fix-pairs-2025/graph-fixed.sqlite", "h200-2025-graph-node/graph_node.sqlite",
            "h200-2025-process/nsight-0013a405.sqlite"} <= names
    for export in EXPORTS:
        with sqlite3.connect(f"file:{export}?mode=ro", uri=True) as connection:
            [(version,)] = connection.execute(
                "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_PRODUCT_VERSION'").fetchall()
        connection.close()
        assert version.startswith("2025.3"), export


@pytest.mark.parametrize("export", WITH_STATS, ids=lambda p: _id(p))
def test_reports_equal_nsys_2025_stats(export: Path, tmp_path: Path) -> None:
    """Every default report from the events equals nsys 2025.3's own CSV, rounding included (2025.3 rounds the
    double's exact value, 2023.4.4 like SQLite), NVTX names without 2025.3's ':' of the default domain."""
    trace = nsight_core.load_trace(copy_of(export, tmp_path))
    ours, theirs = stats_of_trace(trace), recorded(export)
    for report in DEFAULT_REPORTS:
        assert rows(ours, report) == rows(theirs, report), report
    assert ours.skipped.keys() == theirs.skipped.keys()
    assert ours.notes == [] and trace.notes == {}
    assert any(rows(theirs, report) for report in DEFAULT_REPORTS)


def test_frames_of_a_2025_export_match_what_ran() -> None:
    """The quick start region: 20 step ranges (no ':' in their names), the kernels nsys counted, one H200."""
    trace = nsight_core.load_trace(QUICK_START)
    theirs = recorded(QUICK_START)
    assert sorted(trace.nvtx["name"].unique()) == sorted(f"step_{n}" for n in range(20))
    assert trace.kernels.height == sum(row.instances for row in theirs.kernels)
    assert trace.cuda_api.height == sum(row.instances for row in theirs.api_calls)
    assert trace.gpus["name"].to_list() == ["NVIDIA H200"]
    assert trace.meta["EXPORT_PRODUCT_VERSION"].startswith("2025.3")


def test_nsight_stats_json_equals_nsys_2025(tmp_path: Path) -> None:
    """The CLI's --json on a 2025.3 export: the same rows as nsys 2025.3's CSVs, nothing skipped that nsys ran."""
    export = copy_of(FIXTURES / "h200-2025-process" / "nsight-0013a405.sqlite", tmp_path)
    done = nsight_here("stats", "--json", export)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    theirs = recorded(FIXTURES / "h200-2025-process" / "nsight-0013a405.sqlite")
    for report, table in TABLES.items():
        assert printed[table] == rows(theirs, report), report
    assert printed["skipped"] == {}
    # the analysis reads frames in a thread of its own, beside the reports: one SQLite connection serves both
    assert printed["steps"]["family"]["count"] == 60 and "could not diagnose" not in done.stderr


# -- a schema nsight-core has not seen: trimmed copies of a real 2025.3 export ------------------------------

def trimmed(tmp_path: Path, *statements: str, source: Path = QUICK_START) -> Path:
    """A copy of SOURCE changed by STATEMENTS (SQLite), as a newer or older nsys might write it."""
    target = copy_of(source, tmp_path / "trimmed")
    with sqlite3.connect(target) as connection:
        for statement in statements:
            connection.execute(statement)
    connection.close()
    return target


def retyped(table: str, column: str) -> list[str]:
    """Statements that give TABLE's COLUMN text values (the number with a unit), as another schema might."""
    return [f'ALTER TABLE {table} ADD COLUMN "_text" TEXT', f'UPDATE {table} SET "_text" = "{column}" || \' ns\'',
            f'ALTER TABLE {table} DROP COLUMN "{column}"', f'ALTER TABLE {table} RENAME COLUMN "_text" TO "{column}"']


def stats_cli(export: Path) -> dict[str, Any]:
    done = nsight_here("stats", "--json", export)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    printed: dict[str, Any] = json.loads(done.stdout)
    return printed


def test_a_missing_table_is_a_report_without_data(tmp_path: Path) -> None:
    export = trimmed(tmp_path, "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    printed = stats_cli(export)
    assert printed["skipped"] == {"cuda_gpu_kern_sum": "no data: the capture does not contain CUDA kernel data."}
    assert printed["kernels"] == [] and printed["nvtx_ranges"] and printed["api_calls"]


def test_a_renamed_column_skips_its_report_by_name(tmp_path: Path) -> None:
    """CUPTI_ACTIVITY_KIND_KERNEL.start renamed: the kernel report is skipped, saying which column is missing;
    the other reports are whole."""
    export = trimmed(tmp_path, 'ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN "start" TO "startNs"')
    printed = stats_cli(export)
    reason = "CUPTI_ACTIVITY_KIND_KERNEL has no column start: its events are left out"
    assert printed["skipped"] == {"cuda_gpu_kern_sum": f"unreadable: {reason}"}
    assert printed["notes"] == [reason]
    theirs = recorded(QUICK_START)
    assert printed["api_calls"] == rows(theirs, "cuda_api_sum")
    assert printed["nvtx_ranges"] == rows(theirs, "nvtx_pushpop_sum")


def test_a_column_of_another_type_skips_its_report_by_name(tmp_path: Path) -> None:
    """NVTX_EVENTS.end as text ("123 ns"): the NVTX report is skipped naming the column and its type."""
    export = trimmed(tmp_path, *retyped("NVTX_EVENTS", "end"))
    printed = stats_cli(export)
    assert printed["skipped"] == {"nvtx_pushpop_sum": "unreadable: NVTX_EVENTS has columns of another type than "
                                                      "nsight-core reads: end (text): its events are left out"}
    assert printed["kernels"] == rows(recorded(QUICK_START), "cuda_gpu_kern_sum")
    assert printed["steps"] is not None


def test_an_optional_column_of_another_type_is_a_note(tmp_path: Path) -> None:
    """A kernel name id as text: the kernels are kept (unnamed) and a note says which column was left empty."""
    export = trimmed(tmp_path, *retyped("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"))
    trace = nsight_core.load_trace(export)
    theirs = recorded(QUICK_START)
    assert trace.kernels.height == sum(row.instances for row in theirs.kernels)
    assert set(trace.kernels["name"]) == {""}
    assert trace.notes == {"CUPTI_ACTIVITY_KIND_KERNEL": "CUPTI_ACTIVITY_KIND_KERNEL has columns of another type "
                           "than nsight-core reads: demangledName (text): demangledName left empty"}
    printed = stats_cli(export)
    assert printed["notes"] == list(trace.notes.values())
    assert [row["instances"] for row in printed["kernels"]] == [sum(row.instances for row in theirs.kernels)]


def test_a_renamed_string_table_column_leaves_names_empty(tmp_path: Path) -> None:
    """StringIds.value renamed: nothing can be named, the numbers stand, a note says why."""
    export = trimmed(tmp_path, 'ALTER TABLE StringIds RENAME COLUMN "value" TO "text"')
    printed = stats_cli(export)
    assert printed["notes"] == ["StringIds has no column value: its events are left out"]
    assert {row["name"] for row in printed["kernels"]} == {""}
    assert printed["kernels"][0]["instances"] == sum(row.instances for row in recorded(QUICK_START).kernels)


def test_the_page_of_a_trimmed_export_is_written(tmp_path: Path) -> None:
    """`nsight report` on an export whose kernel table lacks its start column: a page, no crash."""
    export = trimmed(tmp_path, 'ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN "start" TO "startNs"',
                     *retyped("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId"))
    page = tmp_path / "page.html"
    done = nsight_here("report", export, "-o", page)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert page.stat().st_size > 10_000
