"""The five default reports computed from a capture's events equal what `nsys stats` prints for it.

The oracle is always real `nsys stats` on the same capture: run here on the representative captures
(tests/fixture_sets.py; on every fixture in `make test-all`), and recorded beside every fixture where it was made,
its CSV files read back with the project's own parser (``stats_from_csv_dir``), or its JSON (``-f json``) where a
test needs a second reading. Every
row is compared, every field exactly (name, instances, total, avg, med, min, max, stddev, time %), and the
order too. Where nsys' SQL leaves ties in order (cuda_api_sum, nvtx_pushpop_sum and the memory reports
sort by the total alone), nsys' SQLite returns tied rows in the order of the grouping key (the name; for
CUDA API calls nsys' string id of the function); the derived reports do the same, and
``test_edge_cases_of_an_edited_export`` puts ties there on purpose.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from capture_helpers import run_captured
from fixture_sets import fanned

import nsight_core
from nsight_core.nsys import Nsys
from nsight_core.stats.load import stats_from_csv_dir, stats_of_trace
from nsight_core.stats.models import NvtxRangeRow, ProfileStats
from nsight_core.stats.reports import DEFAULT_REPORTS

pytestmark = pytest.mark.nsys

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
CAPTURES = sorted(p for p in FIXTURES.rglob("*.nsys-rep") if "2025" not in p.parent.name)
"""Captures this machine's nsys (2023.4.4) can export; those recorded by nsys 2025.3 are compared through the
SQLite exports 2025.3 made of them (tests/core/test_nsys_2025.py)."""
TABLES = {"cuda_gpu_kern_sum": "kernels", "cuda_gpu_mem_time_sum": "memory_time",
          "cuda_gpu_mem_size_sum": "memory_size", "cuda_api_sum": "api_calls", "nvtx_pushpop_sum": "nvtx_ranges"}


def nsys_stats(nsys: Nsys, source: Path, reports: tuple[str, ...] = DEFAULT_REPORTS, fmt: str = "csv") -> Path:
    """Run real `nsys stats` on SOURCE (a fresh SQLite export of a .nsys-rep, or an .sqlite as it is);
    the output prefix (files PREFIX_<report>.<fmt>)."""
    prefix = source.parent / f"nsys-stats-{fmt}" / source.stem
    prefix.parent.mkdir(exist_ok=True)
    export = ["--force-export=true"] if source.suffix == ".nsys-rep" else []
    done = subprocess.run(
        [str(nsys.path), "stats", *export, "--force-overwrite=true", "-r", ",".join(reports), "-f", fmt,
         "-o", str(prefix), str(source)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return prefix


def rows(stats: ProfileStats, report: str) -> list[dict[str, Any]]:
    return [row.model_dump() for row in getattr(stats, TABLES[report])]


def assert_equal_reports(ours: ProfileStats, theirs: ProfileStats) -> None:
    """Every default report: the same rows in the same order, or skipped by both."""
    differing = [report for report in DEFAULT_REPORTS if rows(ours, report) != rows(theirs, report)]
    for report in differing:
        assert rows(ours, report) == rows(theirs, report), f"{report} (differing: {', '.join(differing)})"
    assert ours.skipped.keys() == theirs.skipped.keys()


def capture_copy(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    shutil.copyfile(source, target)
    return target


def test_every_fixture_is_compared() -> None:
    assert {p.relative_to(FIXTURES).as_posix() for p in CAPTURES} >= {
        "h200-torch-mlp/training.nsys-rep", "h200-torch-mlp/evaluation.nsys-rep",
        "h200-two-streams/two_streams.nsys-rep", "h200-diagnosis/diagnosis.nsys-rep",
        "h200-quick-start-cuda13-incomplete/train.nsys-rep", "h200-ddp-cuda13-incomplete/train_ddp.nsys-rep"}


@pytest.mark.parametrize("capture", fanned(CAPTURES))
def test_h200_fixture_reports_equal_nsys_stats(capture: Path, nsys: Nsys, tmp_path: Path) -> None:
    copy = capture_copy(capture, tmp_path)
    ours = stats_of_trace(nsight_core.load_trace(copy))
    theirs = stats_from_csv_dir(nsys_stats(nsys, copy), list(DEFAULT_REPORTS))
    assert_equal_reports(ours, theirs)
    assert any(rows(theirs, report) for report in DEFAULT_REPORTS)


RECORDED = [p for p in CAPTURES if p.with_name(f"{p.stem}_cuda_api_sum.csv").exists()]
"""The captures recorded with their `nsys stats` CSVs (nsys 2025.3's: tests/core/test_nsys_2025.py)."""


@pytest.mark.parametrize("capture", RECORDED, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_every_fixture_reports_equal_the_nsys_stats_recorded_beside_it(capture: Path) -> None:
    """Read where it lies (its export made once per checkout, shared with the analysis tests), against the CSVs
    nsys wrote where it was recorded."""
    ours = stats_of_trace(nsight_core.load_trace(capture))
    assert_equal_reports(ours, stats_from_csv_dir(capture.parent / capture.stem, list(DEFAULT_REPORTS)))
    assert any(rows(ours, report) for report in DEFAULT_REPORTS)


# -- hostile NVTX names, recorded here with real nsys ---------------------------------------------------

UNICODE = "\u03c3-step \u2713"
"""Greek sigma, "-step ", a check mark."""
HOSTILE = ["comma, inside", 'double "quotes"', "single 'quotes'", '"x,y"', "new\nline", "tab\there",
           "<script>alert(1)</script>", UNICODE, "x" * 300, " padded ", "comma,\nand newline"]
DOMAIN = "mydomain"
SCRIPT = """\
import time, nvtx, nsight_core
NAMES = {names!r}
with nsight_core.range("work"):
    for _ in range(3):
        for name in NAMES:
            with nvtx.annotate(name):
                with nvtx.annotate("inner"):
                    time.sleep(0.0005)
        with nvtx.annotate("a,b", domain={domain!r}):
            with nvtx.annotate({unicode!r}, domain={domain!r}):
                time.sleep(0.0005)
"""


def capture_hostile(folder: Path) -> Path:
    """A CPU capture (NVTX, OS runtime) whose ranges have HOSTILE names, nested, repeated, in a domain."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "hostile.py"
    script.write_text(SCRIPT.format(names=HOSTILE, domain=DOMAIN, unicode=UNICODE), encoding="utf-8")
    done = run_captured(
        [sys.executable, "-m", "nsight_core.cli", "run", "--capture", "manual", "--trace", "nvtx,osrt",
         "--sample", "none", "-o", str(folder / "out"), "--", sys.executable, str(script)], timeout=240)
    assert done.returncode == 0, done.stderr
    [report] = sorted((folder / "out").glob("*.nsys-rep"))
    return report


JSON_FIELDS = {"Time (%)": "time_pct", "Total Time (ns)": "total_time_ns", "Instances": "instances",
               "Avg (ns)": "avg_ns", "Med (ns)": "med_ns", "Min (ns)": "min_ns", "Max (ns)": "max_ns",
               "StdDev (ns)": "stddev_ns", "Range": "name"}


def json_rows(prefix: Path) -> list[dict[str, Any]]:
    """nsys' JSON nvtx_pushpop_sum as rows. nsys writes a newline or tab inside a name raw (not valid
    strict JSON), hence strict=False."""
    text = Path(f"{prefix}_nvtx_pushpop_sum.json").read_text(encoding="utf-8")
    return [NvtxRangeRow(**{JSON_FIELDS[k]: v for k, v in row.items()}).model_dump()
            for row in json.loads(text, strict=False)]


def test_hostile_nvtx_names_equal_nsys_stats(nsys: Nsys, tmp_path: Path) -> None:
    """nvtx_pushpop_sum of a capture whose names have commas, quotes, a newline, a tab, `<script>`, unicode,
    300 characters, a custom domain, nesting and repeats: the derived rows equal nsys' rows.

    Compared twice: with nsys' JSON (unambiguous for every name) and with nsys' CSV through the project's
    parser. nsys' CSV writes a newline inside a name raw and quotes only names with a comma (never
    escaping inner quotes); the parser reads both back (a line too short to be a row continues the name
    above it).
    """
    report = capture_hostile(tmp_path / "hostile")
    ours = rows(stats_of_trace(nsight_core.load_trace(report), ["nvtx_pushpop_sum"]), "nvtx_pushpop_sum")
    expected_names = {*HOSTILE, "inner", f"{DOMAIN}:a,b", f"{DOMAIN}:{UNICODE}"}
    assert expected_names <= {row["name"] for row in ours}
    assert {row["name"]: row["instances"] for row in ours if row["name"] in expected_names} == {
        **dict.fromkeys(HOSTILE, 3), "inner": 3 * len(HOSTILE), f"{DOMAIN}:a,b": 3, f"{DOMAIN}:{UNICODE}": 3}

    assert ours == json_rows(nsys_stats(nsys, report, ("nvtx_pushpop_sum",), fmt="json"))
    from_csv = stats_from_csv_dir(nsys_stats(nsys, report, ("nvtx_pushpop_sum",)), ["nvtx_pushpop_sum"])
    assert ours == rows(from_csv, "nvtx_pushpop_sum")


# -- what no capture hits by chance: an export edited to put the edge cases there -----------------------

def _sql(db: Path, *statements: tuple[str, tuple[Any, ...]]) -> None:
    with sqlite3.connect(db) as connection:
        for statement, parameters in statements:
            connection.execute(statement, parameters)
    connection.close()


def _query(db: Path, statement: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        found = connection.execute(statement, parameters).fetchall()
    connection.close()
    return found


def _tie(table: str, column: str, groups: list[tuple[Any, int]]) -> list[tuple[str, tuple[Any, ...]]]:
    """Statements giving the two GROUPS (value of COLUMN, count) of TABLE equal total time, A's calls lasting
    B's count in µs and B's A's count."""
    (a, count_a), (b, count_b) = groups
    return [(f'UPDATE {table} SET "end" = start + ? WHERE {column} = ?', (1000 * count_b, a)),
            (f'UPDATE {table} SET "end" = start + ? WHERE {column} = ?', (1000 * count_a, b))]


def test_edge_cases_of_an_edited_export(nsys: Nsys, tmp_path: Path) -> None:
    """The diagnosis capture's SQLite export, edited so that every rule of nsys' reports is exercised,
    then read by both: `nsys stats` on the edited export and ``load_trace`` of it.

    - ties of total time: NVTX ranges (4 x "repeated" against 1 x "tied"), memory copies (16 D2H against
      8 H2D), CUDA API functions (ordered by string id, where name order differs), kernels (fewer
      instances first, then name, where name order differs);
    - rounding to one decimal, halves away from zero (avg 1001.25 -> 1001.3), the median of an even count
      (1001.5), the sample standard deviation;
    - sizes in MB as nsys prints them: 4500 and 9500 bytes are 0.004 and 0.009 MB (the doubles lie just
      below the half), 3500 bytes 0.004;
    - a range never ended, counted to the NVTX table's last timestamp, here a domain's creation.
    """
    copy = capture_copy(FIXTURES / "h200-diagnosis" / "diagnosis.nsys-rep", tmp_path)
    nsys_stats(nsys, copy)  # its SQLite export, made by nsys stats itself
    db = copy.with_suffix(".sqlite")
    edited = tmp_path / "edited" / "edited.sqlite"
    edited.parent.mkdir()
    shutil.copyfile(db, edited)

    steps = [rowid for (rowid,) in _query(edited, "SELECT rowid FROM NVTX_EVENTS WHERE eventType = 59 AND "
                                                  "domainId = 0 ORDER BY start")]
    copies = [rowid for (rowid,) in _query(edited, "SELECT rowid FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start")]
    assert len(steps) == 12 and len(copies) == 24
    statements: list[tuple[str, tuple[Any, ...]]] = []
    for rowid, duration in zip(steps[:4], (1000, 1001, 1002, 1002), strict=True):
        statements.append(('UPDATE NVTX_EVENTS SET text = ?, textId = NULL, "end" = start + ? WHERE rowid = ?',
                           ("repeated", duration, rowid)))
    statements.append(('UPDATE NVTX_EVENTS SET text = ?, textId = NULL, "end" = start + ? WHERE rowid = ?',
                       ("tied", 4005, steps[4])))
    statements.append(('UPDATE NVTX_EVENTS SET "end" = NULL WHERE rowid = ?', (steps[5],)))
    statements.append(('UPDATE NVTX_EVENTS SET start = (SELECT max(max(start), max("end")) FROM NVTX_EVENTS) + '
                       "1000000 WHERE eventType = 75", ()))
    for index, rowid in enumerate(copies):
        h2d = index < 8
        size = 4500 if h2d else (9500 if index % 2 else 3500)
        statements.append(('UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET copyKind = ?, bytes = ?, "end" = start + ? '
                           "WHERE rowid = ?", (1 if h2d else 2, size, 3000 if h2d else 1500, rowid)))
    # CUDA API: two functions where string-id order and name order disagree.
    api = _query(edited, "SELECT r.nameId, s.value, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r JOIN "
                         "StringIds AS s ON s.id = r.nameId GROUP BY 1 ORDER BY 1")
    api_pair = next([(a[0], a[2]), (b[0], b[2])] for a in api for b in api if a[0] < b[0] and a[1] > b[1])
    statements += _tie("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId", api_pair)
    # Kernels: the one with fewer launches has the later name.
    kernels = _query(edited, "SELECT k.demangledName, s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
                             "JOIN StringIds AS s ON s.id = k.demangledName GROUP BY 1")
    kernel_pair = next([(a[0], a[2]), (b[0], b[2])] for a in kernels for b in kernels
                       if a[2] < b[2] and a[1] > b[1])
    statements += _tie("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName", kernel_pair)
    _sql(edited, *statements)

    ours = stats_of_trace(nsight_core.load_trace(edited))
    theirs = stats_from_csv_dir(nsys_stats(nsys, edited), list(DEFAULT_REPORTS))
    assert_equal_reports(ours, theirs)

    # The edits reached the reports (so the comparison above covered them).
    ranges = {r.name: r for r in theirs.nvtx_ranges}
    assert (ranges["repeated"].avg_ns, ranges["repeated"].med_ns) == (1001.3, 1001.5)
    names = [r.name for r in theirs.nvtx_ranges]
    assert names.index("repeated") + 1 == names.index("tied")
    assert [(r.name, r.instances) for r in theirs.memory_time] == [
        ("[CUDA memcpy Device-to-Host]", 16), ("[CUDA memcpy Host-to-Device]", 8)]
    sizes = {r.name: r for r in theirs.memory_size}
    assert (sizes["[CUDA memcpy Host-to-Device]"].max_mb, sizes["[CUDA memcpy Device-to-Host]"].max_mb,
            sizes["[CUDA memcpy Device-to-Host]"].min_mb) == (0.004, 0.009, 0.004)
    totals = [r.total_time_ns for r in theirs.api_calls]
    assert len(totals) != len(set(totals))
    tied_kernels = [r for r in theirs.kernels if r.total_time_ns == kernel_pair[0][1] * kernel_pair[1][1] * 1000]
    assert [r.instances for r in tied_kernels] == sorted(count for _, count in kernel_pair)


# -- osrt_sum: the user's block where a region marked it --------------------------------------------------

OWN_MARKS = ("collection live", "collection stopping")


def test_osrt_sum_counts_the_users_block_as_the_tile_does_and_equals_nsys_without_marks(nsys: Nsys, cpu_steps: Path,
                                                                                          tmp_path: Path) -> None:
    """`nsys stats` counts every OS call of a region's collection, nsight's own among them: the 0.25 s settle wait
    after `nsys start`, and the start's subprocess. The OS-runtime tile counts the user's block; the table said 21
    sleeps and 322 ms beside the tile's 20 and 72 ms. Computed from events, osrt_sum counts what the tile counts;
    without the region's marks (a whole-process capture) it is nsys' own table, row for row."""
    from capture_helpers import CPU_STEPS

    from nsight_core.analysis.trace_summary import summarize_trace
    from nsight_core.marks import START_SETTLE_SECONDS

    # A copy of the shared region capture (tests/conftest.py): `nsys stats --force-export` writes beside it.
    (tmp_path / "region").mkdir()
    capture = Path(shutil.copy(cpu_steps, tmp_path / "region"))
    trace = nsight_core.load_trace(capture)
    ours = stats_of_trace(trace, ["osrt_sum"]).other["osrt_sum"]
    tile = {call.name: call for call in summarize_trace(trace).osrt}
    assert ours and {row["Name"]: (row["Num Calls"], row["Total Time (ns)"]) for row in ours
                     if row["Name"] in tile} == {name: (call.calls, call.total_ns) for name, call in tile.items()}
    sleeps = {row["Name"]: row for row in ours}["clock_nanosleep"]
    # The user's sleeps (10 ms, which load may stretch many times), not the settle wait: START_SETTLE_SECONDS or more.
    assert sleeps["Num Calls"] == CPU_STEPS[0] and sleeps["Max (ns)"] < START_SETTLE_SECONDS * 1e9
    theirs = stats_from_csv_dir(nsys_stats(nsys, capture, ("osrt_sum",)), ["osrt_sum"]).other["osrt_sum"]
    assert {row["Name"]: row for row in theirs}["clock_nanosleep"]["Max (ns)"] >= 0.2e9

    sqlite = tmp_path / "unmarked.sqlite"
    nsys.export(capture, sqlite, "sqlite")
    with sqlite3.connect(sqlite) as db:
        marks = ",".join("?" * len(OWN_MARKS))
        removed = db.execute(f"DELETE FROM NVTX_EVENTS WHERE text IN ({marks}) OR textId IN "
                             f"(SELECT id FROM StringIds WHERE value IN ({marks}))", OWN_MARKS * 2).rowcount
    assert removed == len(OWN_MARKS)
    unmarked = stats_of_trace(nsight_core.load_trace(sqlite), ["osrt_sum"]).other["osrt_sum"]
    assert unmarked == stats_from_csv_dir(nsys_stats(nsys, sqlite, ("osrt_sum",)), ["osrt_sum"]).other["osrt_sum"]

    # An export without the event class (none seen so far): every row is read, and no note says a column is missing.
    with sqlite3.connect(sqlite) as db:
        rows_in_table = db.execute("SELECT count(*) FROM OSRT_API").fetchone()[0]
        db.execute("ALTER TABLE OSRT_API DROP COLUMN eventClass")
    classless = nsight_core.load_trace(sqlite)
    assert classless.osrt.height == rows_in_table and "OSRT_API" not in classless.notes
