"""`nsight report` and `stats` as a user runs them: real nsys, progress on stderr, clear errors, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from capture_helpers import nsight_here

from nsight_core.nsys import Nsys

pytestmark = pytest.mark.nsys


def nsight(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`nsight ARGS` as its own process: the errors and help a user's shell shows. What a command answers on a
    capture is read in the test's process (nsight_here), which spares an interpreter importing Polars per call."""
    return subprocess.run([sys.executable, "-m", "nsight_core.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, stdin=subprocess.DEVNULL)


def test_report_of_a_capture_and_a_recorded_directory(h200_copy: Path, tmp_path: Path, nsys: Nsys) -> None:
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    for csv in h200_copy.glob("*.csv"):
        (recorded / csv.name).write_bytes(csv.read_bytes())
    out = tmp_path / "page.html"
    done = nsight_here("report", str(h200_copy / "training.nsys-rep"), str(recorded), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    assert "export" in done.stderr.lower() and "Traceback" not in done.stderr
    page = out.read_text()
    assert [title for title in ("<h2>training</h2>", "<h2>evaluation</h2>") if title in page] == [
        "<h2>training</h2>", "<h2>evaluation</h2>"]
    assert page.count('<section class="nsr-section"') == 3  # the capture, then each recorded prefix
    assert "41.7%" in page  # GPU busy of the H200 training region, from the union of kernel intervals


def test_any_report_name_gets_a_table_and_unknown_ones_a_reason(h200_copy: Path, tmp_path: Path, nsys: Nsys) -> None:
    out = tmp_path / "page.html"
    done = nsight_here("report", str(h200_copy / "evaluation.nsys-rep"), "-o", str(out),
                  "--reports", "cuda_gpu_kern_sum,cuda_kern_exec_sum,no_such_report")
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert "<h3>cuda_kern_exec_sum</h3><div class=\"nsr-table-wrap\"><table" in page
    assert "<b>no_such_report</b>: unknown report" in page


def test_missing_input_is_a_clear_error(tmp_path: Path) -> None:
    done = nsight("report", str(tmp_path / "nope.nsys-rep"), "-o", str(tmp_path / "x.html"))
    assert done.returncode == 1
    assert "nope.nsys-rep does not exist: pass a .nsys-rep" in done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "x.html").exists()


def test_unwritable_output_is_a_clear_error(h200: Path, tmp_path: Path) -> None:
    done = nsight("report", str(h200 / "evaluation"), "-o", str(tmp_path / "no" / "dir" / "x.html"))
    assert done.returncode == 1
    assert "cannot write the report" in done.stderr and "Traceback" not in done.stderr


def test_help_explains_the_inputs() -> None:
    done = nsight("report", "--help")
    assert done.returncode == 0
    assert ".nsys-rep" in done.stdout and "recorded CSVs" in done.stdout and "-o OUTPUT" in done.stdout


def test_a_directory_of_captures_points_at_its_reports(h200_copy: Path, tmp_path: Path) -> None:
    captures = tmp_path / "captures"
    captures.mkdir()
    (captures / "training.nsys-rep").write_bytes((h200_copy / "training.nsys-rep").read_bytes())
    done = nsight_here("report", str(captures), "-o", str(tmp_path / "x.html"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().endswith(f"holds no recorded CSVs; pass its captures instead: {captures}/*.nsys-rep")


def private(source: Path, target_dir: Path, *siblings: str) -> Path:
    """A writable copy of the trace SOURCE (and the named SIBLINGS beside it) in TARGET_DIR."""
    target_dir.mkdir(parents=True, exist_ok=True)
    for name in (source.name, *siblings):
        (target_dir / name).write_bytes((source.parent / name).read_bytes())
    return target_dir / source.name


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_stats_json_says_what_to_fix_with_steps_and_savings(tmp_path: Path, nsys: Nsys) -> None:
    """The H200 diagnosis recording: 12 steps, a warm-up step, pageable 64 MiB copies, a CPU sleep per step."""
    trace = private(FIXTURES / "h200-diagnosis" / "diagnosis.nsys-rep", tmp_path)
    done = nsight_here("stats", str(trace), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["steps"]["mode"] == "nvtx-gpu" and result["steps"]["family"]["pattern"] == "step_{n}"
    assert result["steps"]["family"]["count"] == 12 and result["steps"]["warmup"] is True
    kinds = [finding["kind"] for finding in result["findings"]]
    assert {"pageable_copy", "untraced_host", "warmup"} <= set(kinds)
    pageable = next(f for f in result["findings"] if f["kind"] == "pageable_copy")
    assert pageable["saving"]["per_step_ns"] > 0 and pageable["suggestion"]
    parts = {part["part"]: part["total_ns"] for part in result["budget"]["parts"]}
    assert sum(parts.values()) == result["budget"]["wall_ns"]
    assert result["completeness"]["complete"] is True
    assert [row["name"] for row in result["nvtx_ranges"]][:1] == ["step_0"]  # nsys' own table stays


def test_stats_and_page_warn_on_the_incomplete_cuda13_capture(tmp_path: Path, nsys: Nsys) -> None:
    trace = private(FIXTURES / "h200-quick-start-cuda13-incomplete" / "train.nsys-rep", tmp_path, "train.qdstrm")
    done = nsight_here("stats", str(trace))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("== WARNING: this trace is incomplete")
    assert "raw stream train.qdstrm is still beside the report" in done.stdout
    assert "CUDA activity ends" in done.stdout
    out = tmp_path / "page.html"
    assert nsight_here("report", str(trace), "-o", str(out)).returncode == 0
    page = out.read_text()
    assert page.index('class="nsr-incomplete"') < page.index('class="nsr-tiles"')


def test_complete_capture_has_no_incomplete_warning(h200_copy: Path, tmp_path: Path, nsys: Nsys) -> None:
    out = tmp_path / "page.html"
    assert nsight_here("report", str(h200_copy / "training.nsys-rep"), "-o", str(out)).returncode == 0
    page = out.read_text()
    assert 'class="nsr-incomplete"' not in page
    assert page.index("<h3>What to fix</h3>") < page.index('class="nsr-tiles"')
    assert "NVTX ranges by self time (top 20 families)" in page


def test_unknown_report_names_get_a_suggestion_and_exit_1(h200_copy: Path, nsys: Nsys) -> None:
    done = nsight_here("stats", str(h200_copy / "evaluation.nsys-rep"), "--reports", "cuda_gpu_kern_sm")
    assert done.returncode == 1
    assert "did you mean 'cuda_gpu_kern_sum'" in done.stderr
    assert "none of the requested reports exists" in done.stderr
    partly = nsight_here("stats", str(h200_copy / "evaluation.nsys-rep"), "--reports", "cuda_api_sum,cuda_gpu_kern_sm")
    assert partly.returncode == 0 and "did you mean 'cuda_gpu_kern_sum'" in partly.stderr


def test_a_reader_that_goes_away_ends_it_quietly(h200_copy: Path, nsys: Nsys) -> None:
    """`nsight stats … | head`: the reader closes the pipe before the tables come; no traceback."""
    process = subprocess.Popen([sys.executable, "-m", "nsight_core.cli", "stats", str(h200_copy / "training.nsys-rep")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=300) == 141, stderr
    assert "Traceback" not in stderr and "Error" not in stderr, stderr


# `nsight` as the program itself, with an audit hook that prints the allocator setting Polars' jemalloc reads as it is
# imported (os._exit ends `nsight stats` before any atexit could say it).
ALLOCATOR_AT_IMPORT = (
    "import os, runpy, sys\n"
    "def seen(event, args):\n"
    "    if event == 'import' and args[0] == 'polars':\n"
    "        print('allocator:', os.environ.get('_RJEM_MALLOC_CONF'), file=sys.stderr, flush=True)\n"
    "sys.addaudithook(seen)\n"
    "sys.argv[0] = 'nsight'\n"
    "runpy.run_module('nsight_core.cli', run_name='__main__', alter_sys=True)\n")


POLARS_DEFAULTS = "dirty_decay_ms:500,muzzy_decay_ms:1000"
"""What `import polars` writes into _RJEM_MALLOC_CONF, where a process it starts finds it."""


@pytest.mark.parametrize(("inherited", "users"), [(None, None), (POLARS_DEFAULTS, None), ("narenas:2", "narenas:2"),
                                                   (f"{POLARS_DEFAULTS},narenas:2", f"{POLARS_DEFAULTS},narenas:2")],
                         ids=["clean", "from a Polars process", "the user's", "the user's through Polars"])
def test_stats_gives_polars_one_arena_that_returns_memory_unless_the_user_chose(inherited: str | None,
                                                                                users: str | None) -> None:
    """`nsight stats` and `report` free each stage's frames; with jemalloc's defaults the process kept them all (a
    report's peak ~15 % higher). nsight's own process sets one arena that hands pages back, before
    Polars is imported, also when started by a process that imported Polars (which leaves its defaults in the
    environment); a setting the user made is theirs."""
    from nsight_core.cli import ANALYSIS_ALLOCATOR

    env = {key: value for key, value in os.environ.items() if key != "_RJEM_MALLOC_CONF"}
    if inherited:
        env["_RJEM_MALLOC_CONF"] = inherited
    capture = Path(__file__).resolve().parents[1] / "fixtures" / "h200-fix-pairs-2025" / "dataloader-fixed.sqlite"
    done = subprocess.run([sys.executable, "-c", ALLOCATOR_AT_IMPORT, "stats", str(capture), "--reports",
                           "cuda_gpu_kern_sum"], capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert f"allocator: {users or ANALYSIS_ALLOCATOR}\n" in done.stderr
    assert "vectorized_elementwise_kernel" in done.stdout  # the kernels report, read as usual
