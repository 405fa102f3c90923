"""`make bench`: how fast and how lean `nsight stats` and `nsight report` are on large real captures.

Each command runs as its own process on a fresh copy of the trace in a fresh folder (so nothing is
cached), three times; the table gives the median wall time, its ratio against the reference measured
in the same run (machines are noisy: only ratios compare across runs), and peak memory. The reference
is what one does without nsight: `nsys stats --force-export=true -r R TRACE` once per default report
(5 calls, each exporting the trace to SQLite again). A bare `nsys export --type sqlite` is measured too:
that is the floor of every approach that goes through SQLite; and the `nsys export --type arrowdir` that
nsight runs itself, the floor of nsight's own time on a fresh capture.

Captures:
- CPU: 1,000,000 NVTX ranges pushed from Python (bench/nvtx_ranges.py), recorded at the start of the
  run with the real nsys under `nsight run --trace nvtx --sample none` (and 10,000 and 100,000 for
  the finalize scaling below);
- GPU: the largest recorded GPU capture in tests/fixtures (no GPU here), plus any .nsys-rep named
  with --trace (e.g. a 200,000-kernel capture recorded on an H200 with bench/gpu/tiny_kernels.py).

Peak memory ("peak RSS") is the largest resident set of the command's process tree (`/usr/bin/time -f
%M`: the biggest of nsight's Python process and the nsys processes it starts); for nsight the Python
process's own peak is given as well. Per capture, in a process of its own on an exported copy: the
analysis (`analyze(trace)`) in events per second over the events it reads (the fastest of ANALYSIS_RUNS
runs in each of --repeat processes, timeit's convention, with the median), and the bytes of the
Trace's frames a report reads (Polars' ``estimated_size``), which `nsight report`'s Python peak is
compared with. Then: the finalize (everything `nsight report`
does after the export: the five reports, summary, completeness, analysis, page) on NVTX captures of
10,000 to 1,000,000 ranges, in one warm process; import times (the CLI with and without bytecode
caches, `nsight_core`, and `flyteplugins.nsight` over `import flyte, flyte.io`); 10,000 distinct
kernels from recorded CSVs.

Targets, each verdict saying met or NOT met and by how much: `nsight report` on the large captures at most
0.2x the reference's time and at most 1.2x one bare SQLite export's; the analysis at least 5 M events/s;
`nsight report`'s peak RSS at most 2x the bytes of the columns read; `import flyteplugins.nsight` at most 50 ms
over `import flyte, flyte.io`; the finalize no worse than linear from 10 k to 1 M events. Then NVTX captures of
10 k to 10 M ranges with no settings, each command once on a fresh copy, the peak of its whole process tree (nsys'
export included: resident sets summed, sampled every 50 ms from /proc), seconds per million events, and the ratio
against one bare SQLite export (targets for traces over 100 MB: at most 1.2x; the peak under 2 GiB and at most 3x
the 1 M-range capture's).

The results replace docs/performance.md as a whole (or --output); `--quick` (100,000 ranges, one repetition)
writes only where --output is given.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsight_core import DEFAULT_REPORTS, find_nsys, load_stats
from nsight_core.nsys import Nsys
from nsight_core.trace.writer import release, writer_version

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FIXTURES = REPO / "tests" / "fixtures"
OUT = REPO / "docs" / "performance.md"
PY = sys.executable
KERNELS = 10_000
ARROW_ROW = "bare `nsys export --type arrowdir` (what nsight runs)"
LARGE_EVENTS = 100_000
"""The targets concern large captures: below this many events nsight's fixed costs (imports) dominate."""
FINALIZE_SIZES = (10_000, 100_000, 1_000_000)
"""NVTX ranges of the captures the finalize's scaling is measured on (up to --ranges)."""
REFERENCE_TARGET, EXPORT_TARGET = 0.2, 1.2
"""`nsight report`'s wall time at most these times the reference's and a bare SQLite export's."""
EVENTS_PER_S_TARGET = 5e6
ANALYSIS_RUNS = 9
"""Runs of analyze() per capture (at least --repeat): cheap, and the fastest of more runs is less noisy."""
RSS_TARGET = 2.0
"""`nsight report`'s Python peak at most this many times the bytes of the Trace's frames it reads."""
IMPORT_TARGET_S = 0.050
LINEAR_SLACK = 1.1
"""The finalize counts as no worse than linear while time grows at most as events^1.1 (timing noise)."""
SCALE_SIZES = (10_000, 100_000, 1_000_000, 3_000_000, 10_000_000)
"""NVTX ranges of the captures of "Memory and time against capture size"; the 30 M-range capture is the slow
test's (tests/core/test_large_capture.py): recording it alone takes minutes."""
SCALE_MEMORY = "2G"
"""NSIGHT_SUMMARY_MEMORY of the long GPU captures' table: a task allowed 2 GiB, the bound on the whole pipeline's
peak."""
SCALE_BOUND_MB = 2048
SCALE_LARGE_BYTES = 100_000_000
"""Traces over this many bytes have the target of at most EXPORT_TARGET times a bare SQLite export's time."""
SCALE_PEAK_GROWTH = 3.0
"""The largest capture's peak (process tree) at most this many times the 1 M-range capture's: the memory a summary
takes does not grow with the capture."""
HEADER = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
# Runs `nsight` like `python -m nsight_core.cli` and writes the Python process's own peak RSS (KiB) to argv[1],
# at exit or just before the os._exit with which `nsight stats`/`report` skip Python's teardown.
LAUNCHER = ("import atexit, os, resource, runpy, sys\n"
            "out = sys.argv.pop(1)\n"
            "def record():\n"
            "    open(out, 'w').write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))\n"
            "exit_now = os._exit\n"
            "def recorded_exit(code):\n"
            "    record()\n"
            "    exit_now(code)\n"
            "os._exit = recorded_exit\n"
            "atexit.register(record)\n"
            "sys.argv[0] = 'nsight'\n"
            "runpy.run_module('nsight_core.cli', run_name='__main__', alter_sys=True)\n")


@dataclass
class Run:
    seconds: float
    tree_mb: float
    python_mb: float | None = None


@dataclass
class Row:
    label: str
    command: str
    runs: list[Run] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return statistics.median(run.seconds for run in self.runs)

    @property
    def tree_mb(self) -> float:
        return max(run.tree_mb for run in self.runs)

    @property
    def python_mb(self) -> float | None:
        values = [run.python_mb for run in self.runs if run.python_mb is not None]
        return max(values) if values else None


# Starts a command and writes the peak RSS (KiB) of its process tree to argv[1]: the fallback for
# /usr/bin/time -f %M. A small intermediary either way: a child's peak RSS counts the RSS of the process
# that forked it at that moment, so a command started straight from this (large) process would read high.
WAITER = ("import os, subprocess, sys\n"
          "process = subprocess.Popen(sys.argv[2:])\n"
          "_, status, usage = os.wait4(process.pid, 0)\n"
          "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
          "sys.exit(os.waitstatus_to_exitcode(status))\n")


# Starts a command (stdout to argv[2]) and writes to argv[1] the largest SUM of the resident sets of its process tree
# (sampled every 50 ms from /proc: nsys' export running beside nsight's Python counts with it; shared pages count in
# each process, so it errs high) and the largest resident set of one process (KiB, exact: wait4's ru_maxrss).
TREE = ("import os, subprocess, sys, time\n"
        "process = subprocess.Popen(sys.argv[3:], stdout=open(sys.argv[2], 'wb'))\n"
        "page, peak = os.sysconf('SC_PAGE_SIZE'), 0\n"
        "def tree_bytes():\n"
        "    children = {}\n"
        "    for entry in os.listdir('/proc'):\n"
        "        if not entry.isdigit():\n"
        "            continue\n"
        "        try:\n"
        "            parent = int(open(f'/proc/{entry}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "        except (OSError, ValueError, IndexError):\n"
        "            continue\n"
        "        children.setdefault(parent, []).append(int(entry))\n"
        "    pids, total = [process.pid], 0\n"
        "    while pids:\n"
        "        pid = pids.pop()\n"
        "        try:\n"
        "            total += int(open(f'/proc/{pid}/statm').read().split()[1]) * page\n"
        "        except (OSError, ValueError, IndexError):\n"
        "            pass\n"
        "        pids += children.get(pid, [])\n"
        "    return total\n"
        "while True:\n"
        "    pid, status, usage = os.wait4(process.pid, os.WNOHANG)\n"
        "    if pid:\n"
        "        break\n"
        "    peak = max(peak, tree_bytes())\n"
        "    time.sleep(0.05)\n"
        "open(sys.argv[1], 'w').write(f'{peak // 1024} {usage.ru_maxrss}')\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n")


# Prints, as JSON, what the analysis of argv[1] costs: it builds what `nsight report` builds from the Trace
# (the frames it reads are then cached on it), then times analyze() argv[2] times: the seconds of each.
ANALYSIS = ("import json, sys, time\n"
            "import polars as pl\n"
            "from nsight_core.analysis.analyze import analyze\n"
            "from nsight_core.analysis.completeness import CaptureFacts, check_completeness\n"
            "from nsight_core.analysis.trace_summary import summarize_trace\n"
            "from nsight_core.stats.load import stats_of_trace\n"
            "from nsight_core.trace.load import load_trace\n"
            "trace = load_trace(sys.argv[1])\n"
            "stats_of_trace(trace); summarize_trace(trace); check_completeness(trace, CaptureFacts()); analyze(trace)\n"
            "read = sum(v.estimated_size() for v in vars(trace).values() if isinstance(v, pl.DataFrame))\n"
            "events = sum(getattr(trace, name).height for name in\n"
            "             ('kernels', 'memcpy', 'memset', 'cuda_api', 'osrt', 'nvtx', 'nvtx_marks'))\n"
            "seconds = []\n"
            "for _ in range(int(sys.argv[2])):\n"
            "    start = time.perf_counter(); analyze(trace); seconds.append(time.perf_counter() - start)\n"
            "print(json.dumps({'events': events, 'bytes_read': read, 'event_bytes': trace.event_bytes,\n"
            "                  'seconds': seconds}))\n")
# Prints, as JSON, the median seconds of the finalize (the profile and its page, the export made before)
# of each of argv[2:], argv[1] times each, in one process warmed by one untimed finalize first.
FINALIZE = ("import json, statistics, sys, time\n"
            "from nsight_core.profile import build_profile\n"
            "from nsight_core.render.html import render_page\n"
            "from nsight_core.trace.load import load_trace\n"
            "paths = sys.argv[2:]\n"
            "for path in paths:\n"
            "    load_trace(path)\n"
            "render_page([build_profile(paths[0])])\n"
            "medians = []\n"
            "for path in paths:\n"
            "    seconds = []\n"
            "    for _ in range(int(sys.argv[1])):\n"
            "        start = time.perf_counter(); render_page([build_profile(path)])\n"
            "        seconds.append(time.perf_counter() - start)\n"
            "    medians.append(statistics.median(seconds))\n"
            "print(json.dumps(medians))\n")


def run(argv: Sequence[str | Path], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Run ARGV to completion: (wall seconds, peak RSS in MB of its process tree). Fails loudly."""
    rss_file = cwd / ".tree-peak"
    if Path("/usr/bin/time").exists():
        wrapper = ["/usr/bin/time", "-f", "%M", "-o", str(rss_file)]
    else:
        wrapper = [PY, "-S", "-c", WAITER, str(rss_file)]
    start = time.perf_counter()
    done = subprocess.run([*wrapper, *map(str, argv)], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"bench: {' '.join(map(str, argv))} exited {done.returncode}:\n"
                         f"{done.stderr.decode()[-3000:]}")
    peak_kib = int(rss_file.read_text().split()[-1])
    rss_file.unlink()
    return seconds, peak_kib / 1024


@dataclass
class TreeRun:
    """One command's wall time, the largest sum of its process tree's resident sets, and its largest process's."""

    seconds: float
    tree_mb: float
    largest_mb: float
    stdout: str

    def cell(self) -> str:
        return f"{self.seconds:.1f} s, {self.tree_mb:.0f} MB"


def tree_run(argv: Sequence[str | Path], cwd: Path, env: dict[str, str] | None = None,
             stderr: Path | None = None) -> TreeRun:
    """Run ARGV to completion under TREE. Fails loudly. Its stderr goes to the file STDERR where given (to follow a
    long run's progress as it goes), else into the failure's message."""
    peak_file, out_file = cwd / ".tree-sum", cwd / ".stdout"
    start = time.perf_counter()
    with open(stderr or os.devnull, "wb") as err:
        done = subprocess.run([PY, "-S", "-c", TREE, peak_file, out_file, *map(str, argv)], cwd=cwd, env=env,
                              stdout=subprocess.DEVNULL, stderr=err if stderr else subprocess.PIPE)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        said = stderr.read_bytes() if stderr else done.stderr
        raise SystemExit(f"bench: {' '.join(map(str, argv))} exited {done.returncode}:\n{said.decode()[-3000:]}")
    tree_kib, largest_kib = map(int, peak_file.read_text().split())
    stdout = out_file.read_text()
    peak_file.unlink()
    out_file.unlink()
    # A spike between two samples is missed: the tree's peak is at least its largest process's (exact).
    return TreeRun(seconds, max(tree_kib, largest_kib) / 1024, largest_kib / 1024, stdout)


def scaling_section(traces: list[tuple[int, Path]], nsys: Nsys, scratch: Path) -> list[str]:
    """The whole pipeline's peak (process tree) and time against the capture's size, per million events, and against
    one bare SQLite export of the same capture; with no settings (``NSIGHT_SUMMARY_MEMORY`` unset: the default
    budget)."""
    env = {name: value for name, value in os.environ.items() if name != "NSIGHT_SUMMARY_MEMORY"}
    lines = ["## Memory and time against capture size", "",
             "CPU captures of N NVTX ranges recorded by this run; each command once on a fresh copy, with no "
             "settings (`NSIGHT_SUMMARY_MEMORY` unset). \"Peak\": the largest sum of the resident sets of the "
             "command's process tree (nsys' export and nsight together), sampled every 50 ms. \"Read as\": the "
             "export nsight chose (`nsight stats --json`'s `export`). \"Per M\": `nsight report`'s seconds per "
             "million events; \"vs export\": its time over the bare SQLite export's.", "",
             "| NVTX ranges | trace | read as | bare `nsys export --type sqlite` | `nsight stats --json` "
             "| `nsight report` | per M | vs export |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    worst, ratios, per_million, peaks = 0.0, [], [], {}
    for ranges, trace in traces:
        copy = fresh_copy(trace, scratch)
        export = tree_run([nsys.path, "export", "--type", "sqlite", copy], copy.parent)
        copy = fresh_copy(trace, scratch)
        stats = tree_run([PY, "-m", "nsight_core.cli", "stats", copy, "--json"], copy.parent, env)
        payload = json.loads(stats.stdout)
        counted = sum(row["instances"] for row in payload["nvtx_ranges"])
        if counted != ranges:
            raise SystemExit(f"bench: nsight stats counted {counted:,} of {ranges:,} NVTX ranges")
        chosen = payload["export"]
        sliced = f" in {chosen['slices']} slices" if chosen.get("slices", 1) > 1 else ""
        read_as = (f"{'Parquet' if chosen['kind'] == 'parquetdir' else 'SQLite'}{sliced}, streamed ({chosen['reason']})"
                   if chosen["streamed"] else
                   f"{'arrow' if chosen['kind'] == 'arrowdir' else 'SQLite'}, whole")
        copy = fresh_copy(trace, scratch)
        report = tree_run([PY, "-m", "nsight_core.cli", "report", copy, "-o", copy.parent / "page.html"],
                          copy.parent, env)
        worst = max(worst, stats.tree_mb, report.tree_mb, export.tree_mb)
        peaks[ranges] = max(stats.tree_mb, report.tree_mb)
        per_million.append((ranges, report.seconds / ranges * 1e6))
        if trace.stat().st_size > SCALE_LARGE_BYTES:
            ratios.append((ranges, report.seconds / export.seconds))
        lines.append(f"| {ranges:,} | {trace.stat().st_size / 1e6:.1f} MB | {read_as} | {export.cell()} "
                     f"| {stats.cell()} | {report.cell()} | {report.seconds / ranges * 1e6:.1f} s "
                     f"| {report.seconds / export.seconds:.2f}x |")
        print(f"bench: {ranges:,} ranges: export {export.cell()}, stats {stats.cell()}, report {report.cell()}",
              file=sys.stderr)
    large = per_million[-1]
    verdicts = [f"Peak of the whole pipeline at most {worst:.0f} MB (target under {SCALE_BOUND_MB} MB, 2 GiB: "
                f"{_met(worst < SCALE_BOUND_MB, f'{worst - SCALE_BOUND_MB:.0f} MB over')}).",
                f"`nsight report` per million events: {large[1]:.1f} s at {large[0]:,} ranges; from "
                f"{per_million[-2][0]:,} to {large[0]:,} ranges "
                f"{large[1] / per_million[-2][1]:.2f}x per event (1.0: linear)." if len(per_million) > 1 else ""]
    if 1_000_000 in peaks and large[0] > 1_000_000:
        growth = peaks[large[0]] / peaks[1_000_000]
        verdicts.append(f"Peak at {large[0]:,} ranges {growth:.2f}x the peak at 1,000,000 (target at most "
                        f"{SCALE_PEAK_GROWTH:.0f}x: {_met(growth <= SCALE_PEAK_GROWTH, f'{growth:.2f}x')}).")
    verdicts += [f"`nsight report` {ratio:.2f}x a bare SQLite export's time at {ranges:,} ranges (a trace over "
                 f"{SCALE_LARGE_BYTES / 1e6:.0f} MB: target at most {EXPORT_TARGET}x, "
                 f"{_met(ratio <= EXPORT_TARGET, f'{ratio / EXPORT_TARGET:.2f}x the target')})."
                 for ranges, ratio in ratios]
    return [*lines, "", *[f"- {line}" for line in verdicts if line], ""]


def fresh_copy(trace: Path, scratch: Path) -> Path:
    folder = Path(tempfile.mkdtemp(dir=scratch))
    copy = folder / trace.name
    shutil.copyfile(trace, copy)
    return copy


def nsight_run(args: Sequence[str | Path], cwd: Path, env: dict[str, str] | None = None) -> Run:
    rss_file = cwd / ".python-peak"
    seconds, tree = run([PY, "-c", LAUNCHER, rss_file, *args], cwd, env)
    python = int(rss_file.read_text()) / 1024
    rss_file.unlink()
    return Run(seconds, tree, python)


def python_run(code: str, cwd: Path) -> Run:
    rss_file = cwd / ".python-peak"
    wrapped = (f"import atexit, resource\natexit.register(lambda: open({str(rss_file)!r}, 'w').write("
               f"str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))\n{code}\n")
    seconds, tree = run([PY, "-c", wrapped], cwd)
    python = int(rss_file.read_text()) / 1024
    rss_file.unlink()
    return Run(seconds, tree, python)


def measure(trace: Path, nsys: Nsys, scratch: Path, repeat: int) -> list[Row]:
    """The rows of one capture's table, each the median of REPEAT runs on fresh copies."""
    rows = {
        "reference": Row("reference: 5 x `nsys stats --force-export=true -r R`", "`nsys stats --force-export=true "
                         f"-r R TRACE` for R in {', '.join(DEFAULT_REPORTS)}, one after the other"),
        "export": Row("bare `nsys export --type sqlite`", "`nsys export --type sqlite TRACE`"),
        "arrow": Row(ARROW_ROW, "`nsys export --type arrowdir --force-overwrite=true --quiet=true -o DIR TRACE`, "
                     "the export nsight itself runs"),
        "stats": Row("`nsight stats --json`", "`nsight stats TRACE --json`"),
        "report": Row("`nsight report`", "`nsight report TRACE -o page.html`"),
        "load_stats": Row("`load_stats(TRACE)`: the five reports alone (Python API, no analysis)",
                          "`python -c 'import nsight_core; nsight_core.load_stats(\"TRACE\")'`"),
        "stats again": Row("`nsight stats --json`, export reused",
                           "`nsight stats TRACE --json` again, in the same folder"),
        "report again": Row("`nsight report`, export reused",
                            "`nsight report TRACE -o page.html` again, in the same folder"),
    }
    for _ in range(repeat):
        copy = fresh_copy(trace, scratch)
        total, peak = 0.0, 0.0
        for report in DEFAULT_REPORTS:
            seconds, tree = run([nsys.path, "stats", "--force-export=true", "-r", report, copy], copy.parent)
            total, peak = total + seconds, max(peak, tree)
        rows["reference"].runs.append(Run(total, peak))
        copy = fresh_copy(trace, scratch)
        rows["export"].runs.append(Run(*run([nsys.path, "export", "--type", "sqlite", copy], copy.parent)))
        copy = fresh_copy(trace, scratch)
        rows["arrow"].runs.append(Run(*run([nsys.path, "export", "--type", "arrowdir", "--force-overwrite=true",
                                            "--quiet=true", "-o", copy.with_suffix(".arrowdir"), copy], copy.parent)))
        copy = fresh_copy(trace, scratch)
        rows["stats"].runs.append(nsight_run(["stats", copy, "--json"], copy.parent))
        rows["stats again"].runs.append(nsight_run(["stats", copy, "--json"], copy.parent))
        copy = fresh_copy(trace, scratch)
        rows["load_stats"].runs.append(python_run(f"import nsight_core; nsight_core.load_stats({str(copy)!r})",
                                                  copy.parent))
        copy = fresh_copy(trace, scratch)
        rows["report"].runs.append(nsight_run(["report", copy, "-o", copy.parent / "page.html"], copy.parent))
        rows["report again"].runs.append(nsight_run(["report", copy, "-o", copy.parent / "page.html"], copy.parent))
        print(f"bench: {trace.name}: " + ", ".join(f"{key} {row.runs[-1].seconds:.2f} s" for key, row in rows.items()),
              file=sys.stderr)
    return list(rows.values())


def contents(trace: Path, scratch: Path) -> str:
    """What the capture holds, from nsight's own stats (a check that the measured path reads it all)."""
    stats = load_stats(fresh_copy(trace, scratch))
    parts = []
    for label, rows in (("kernels", stats.kernels), ("CUDA API calls", stats.api_calls),
                        ("NVTX ranges", stats.nvtx_ranges)):
        if count := sum(row.instances for row in rows):
            parts.append(f"{count:,} {label}")
    return ", ".join(parts) or "no events"


def record_nvtx_capture(ranges: int, scratch: Path) -> tuple[Path, float]:
    """Record bench/nvtx_ranges.py under `nsight run` with the real nsys: the CPU capture."""
    folder = scratch / f"nvtx-capture-{ranges}"
    start = time.perf_counter()
    done = subprocess.run([PY, "-m", "nsight_core.cli", "run", "--trace", "nvtx", "--sample", "none", "-o", folder,
                           "--", PY, HERE / "nvtx_ranges.py", str(ranges)], capture_output=True, text=True)
    if done.returncode != 0 or len(done.stdout.split()) != 1:
        raise SystemExit(f"bench: recording the NVTX capture failed ({done.returncode}):\n{done.stderr[-3000:]}")
    recorded = Path(done.stdout.strip())
    target = scratch / f"nvtx-{ranges // 1000}k.nsys-rep"
    recorded.rename(target)
    seconds = time.perf_counter() - start
    print(f"bench: recorded {ranges:,} NVTX ranges in {seconds:.1f} s", file=sys.stderr)
    return target, seconds


def largest_gpu_fixture() -> Path:
    """The biggest GPU capture in tests/fixtures whose trace is complete (its kernels were recorded) and that this
    machine's nsys can export (the nsys 2025.3 fixtures' reports cannot be: their SQLite exports are read instead)."""
    installed = release(find_nsys().version)
    traces = [p for p in FIXTURES.glob("*/*.nsys-rep") if "incomplete" not in p.parent.name
              and (release(writer_version(p) or "") or (0, 0)) <= (installed or (0, 0))]
    return max(traces, key=lambda p: p.stat().st_size)


def import_times(repeat: int) -> list[tuple[str, float]]:
    """Median whole-process seconds of `python -c CODE`, with the installed .pyc and with none at all.

    The commands take turns, round after round: a slow spell of the machine (start-up varies by 50 ms from
    one run to the next here) then slows each of them alike instead of the few runs of one.
    """
    with tempfile.TemporaryDirectory() as empty:
        no_pyc = {**os.environ, "PYTHONPYCACHEPREFIX": empty, "PYTHONDONTWRITEBYTECODE": "1"}
        commands = (
            ("`python -c pass` (interpreter start)", "pass", None, repeat),
            ("`import nsight_core.cli`", "import nsight_core.cli", None, repeat),
            ("`import nsight_core.cli`, no .pyc anywhere", "import nsight_core.cli", no_pyc, 3),
            ("`import nsight_core.cli, nsight_core.stats.load` (what `nsight stats` loads)",
             "import nsight_core.cli, nsight_core.stats.load", None, repeat),
            ("the same, no .pyc anywhere", "import nsight_core.cli, nsight_core.stats.load", no_pyc, 3),
            ("`import nsight_core` (the public API; Polars loads on first use)", "import nsight_core", None, repeat),
            (FLYTE, "import flyte, flyte.io", None, repeat),
            (PLUGIN, "import flyte, flyte.io, flyteplugins.nsight", None, repeat),
        )
        seconds: dict[str, list[float]] = {label: [] for label, *_ in commands}
        for turn in range(repeat):
            for label, code, env, times in commands:
                if turn < times:
                    seconds[label].append(run([PY, "-c", code], REPO, env)[0])
        # The plugin's own import, timed inside processes that have imported Flyte: no start-up in it at all.
        seconds[PLUGIN_ALONE] = [python_json(PLUGIN_TIMED, [])["seconds"] for _ in range(repeat)]
    return [(label, statistics.median(values)) for label, values in seconds.items()]


FLYTE = "`import flyte, flyte.io`"
PLUGIN = "`import flyte, flyte.io, flyteplugins.nsight`"
PLUGIN_ALONE = "`import flyteplugins.nsight` alone, timed in a process that imported `flyte, flyte.io` before"
PLUGIN_TIMED = ("import json, time\n"
                "import flyte, flyte.io\n"
                "start = time.perf_counter()\n"
                "import flyteplugins.nsight\n"
                "print(json.dumps({'seconds': time.perf_counter() - start}))\n")


def import_verdict(imports: list[tuple[str, float]]) -> str:
    """The plugin's import cost over Flyte's, against IMPORT_TARGET_S: timed in-process (the difference of the
    two whole-process medians, given too, carries their start-up noise)."""
    by = dict(imports)
    extra = by[PLUGIN_ALONE]
    miss = f"{(extra - IMPORT_TARGET_S) * 1000:.0f} ms over"
    return (f"`import flyteplugins.nsight` costs {extra * 1000:.0f} ms over `import flyte, flyte.io`, timed in the "
            f"process (target at most {IMPORT_TARGET_S * 1000:.0f} ms: {_met(extra <= IMPORT_TARGET_S, miss)}); the "
            f"two whole-process medians differ by {(by[PLUGIN] - by[FLYTE]) * 1000:.0f} ms.")


def python_json(code: str, args: Sequence[str | Path | int], env: dict[str, str] | None = None) -> Any:
    """Run `python -c CODE ARGS` and parse the JSON it prints last."""
    done = subprocess.run([PY, "-c", code, *map(str, args)], cwd=REPO, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"bench: in-process measurement exited {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


@dataclass
class Costs:
    """The analysis of one capture, in a process of its own: its speed, and what a report reads."""

    name: str
    events: int
    bytes_read: int
    event_bytes: int
    runs: list[float]
    report_python_mb: float
    trace_bytes: int
    export_mb: float

    @property
    def seconds(self) -> float:
        """The fastest run: a slower one measures the machine's other work as well (timeit's convention)."""
        return min(self.runs)

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds else math.inf

    @property
    def rss_ratio(self) -> float:
        return self.report_python_mb * 2**20 / self.bytes_read if self.bytes_read else math.inf


def analysis_costs(trace: Path, scratch: Path, repeat: int, rows: list[Row]) -> Costs:
    """ANALYSIS on an exported fresh copy of TRACE; ROWS: its table's rows (`nsight report`'s Python peak on it,
    the arrowdir export's peak)."""
    # In REPEAT processes: on this shared VM one process's runs all came out 30-50 % slower than another's minutes
    # later (same code, same capture), so the fastest run is taken over several processes, not one.
    results = [python_json(ANALYSIS, [fresh_copy(trace, scratch), max(repeat, ANALYSIS_RUNS)])
               for _ in range(max(repeat, 1))]
    result = {**results[0], "seconds": [seconds for each in results for seconds in each["seconds"]]}
    report_python_mb = next(row.python_mb for row in rows if row.label == "`nsight report`") or 0.0
    export_mb = next(row.tree_mb for row in rows if row.label == ARROW_ROW)
    return Costs(trace.name, result["events"], result["bytes_read"], result["event_bytes"], result["seconds"],
                 report_python_mb, trace.stat().st_size, export_mb)


def analysis_section(costs: list[Costs], baseline_mb: float) -> list[str]:
    """The analysis speed and peak-memory table, with the verdicts."""
    lines = ["## Analysis speed and memory", "",
             "`analyze(trace)` (steps, budget, NVTX self times, findings) per capture, in processes of its own on "
             f"exported copies, {max(len(cost.runs) for cost in costs)} runs in all: events/s of the fastest run, the "
             "median beside it. \"Bytes read\": the frames `nsight report` reads (Polars' `estimated_size`). "
             "\"Report peak\": `nsight report`'s Python peak (fresh copy); a process that only imports what it "
             f"imports peaks at {baseline_mb:.0f} MB.", "",
             "| capture | events | analysis: fastest (median) | events/s | bytes read | report peak "
             "| peak / bytes read | (peak - imports) / bytes read |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    verdicts = []
    for cost in costs:
        data_ratio = (cost.report_python_mb - baseline_mb) * 2**20 / cost.bytes_read if cost.bytes_read else math.inf
        lines.append(f"| {cost.name} | {cost.events:,} | {cost.seconds:.3f} s ({statistics.median(cost.runs):.3f} s) "
                     f"| {cost.events_per_s / 1e6:.2f} M "
                     f"| {cost.bytes_read / 2**20:.0f} MB | {cost.report_python_mb:.0f} MB | {cost.rss_ratio:.1f}x "
                     f"| {data_ratio:.1f}x |")
        speed = cost.events_per_s >= EVENTS_PER_S_TARGET
        memory = cost.rss_ratio <= RSS_TARGET
        if cost.events < LARGE_EVENTS:
            verdicts.append(f"{cost.name}: a small capture ({cost.events:,} events): fixed costs per call dominate; "
                            "the targets concern large ones.")
            continue
        too_slow = f"{EVENTS_PER_S_TARGET / cost.events_per_s:.1f}x too slow"
        verdicts.append(
            f"{cost.name}: analysis {cost.events_per_s / 1e6:.2f} M events/s (target at least "
            f"{EVENTS_PER_S_TARGET / 1e6:.0f} M: {_met(speed, too_slow)}); "
            f"report peak {cost.rss_ratio:.1f}x the bytes read (target at most {RSS_TARGET:.0f}x: "
            f"{_met(memory, f'{cost.rss_ratio / RSS_TARGET:.1f}x over')}; without the imports' "
            f"{baseline_mb:.0f} MB {data_ratio:.1f}x).")
    return [*lines, "", *[f"- {line}" for line in verdicts], ""]


def import_baseline_mb() -> float:
    """The Python peak of a process that only imports what `nsight report` imports."""
    with tempfile.TemporaryDirectory() as folder:
        imports = "import nsight_core.cli, nsight_core.profile, nsight_core.render.html"
        return python_run(imports, Path(folder)).python_mb or 0.0


def finalize_scaling(traces: list[tuple[int, Path]], scratch: Path, repeat: int) -> list[str]:
    """The finalize of NVTX captures of growing size, one warm process: time per event, growth exponent, verdict;
    and `nsight report`'s peak on each (export reused) against the bytes it reads: how memory grows with the data."""
    copies = [fresh_copy(trace, scratch) for _, trace in traces]
    medians = python_json(FINALIZE, [repeat, *copies])  # exports each copy beside it
    peaks = [max(nsight_run(["report", copy, "-o", copy.parent / "page.html"], copy.parent).python_mb or 0.0
                 for _ in range(repeat)) for copy in copies]
    reads = [python_json(ANALYSIS, [copy, 1])["bytes_read"] / 2**20 for copy in copies]
    lines = ["## Finalize time from 10 k to 1 M events", "",
             "What `nsight report` does after the export (frames, reports, summary, completeness, analysis, page), in "
             f"one warm process, on CPU captures of N NVTX ranges; median of {repeat} runs. \"Growth\": k in "
             "time ~ events^k from the previous row (1: linear). \"Report peak\": `nsight report`'s Python peak, "
             "export reused; \"peak growth per byte\": how much the peak grew per byte read more.", "",
             "| NVTX ranges | finalize | per 1,000 events | growth | bytes read | report peak | peak growth per byte |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    worst = 0.0
    rows = zip(traces, medians, peaks, reads, strict=True)
    for i, ((ranges, _), seconds, peak, read) in enumerate(rows):
        growth, per_byte = "—", "—"
        if i:
            exponent = math.log(seconds / medians[i - 1]) / math.log(ranges / traces[i - 1][0])
            worst, growth = max(worst, exponent), f"{exponent:.2f}"
            per_byte = f"{(peak - peaks[i - 1]) / (read - reads[i - 1]):.1f}x"
        lines.append(f"| {ranges:,} | {seconds:.3f} s | {seconds / ranges * 1e6:.2f} ms | {growth} | {read:.1f} MB "
                     f"| {peak:.0f} MB | {per_byte} |")
    verdict = (f"Finalize growth at most events^{worst:.2f} from {traces[0][0]:,} to {traces[-1][0]:,} ranges (target "
               f"no worse than linear, events^{LINEAR_SLACK} allowed for noise: "
               f"{_met(worst <= LINEAR_SLACK, f'exponent {worst - 1:.2f} above linear')}).")
    return [*lines, "", f"- {verdict}", ""]


def in_process(scratch: Path) -> list[tuple[str, str]]:
    """Parse and render 10,000 distinct kernels from recorded CSVs (no nsys): the page's own costs."""
    from nsight_core.profile import build_profile
    from nsight_core.render.html import render_page

    folder = scratch / "csv"
    folder.mkdir()
    lines = [HEADER]
    for i in range(KERNELS):
        total = (KERNELS - i) * 1000
        lines.append(f'0.01,{total},{i % 50 + 1},{total / 2:.1f},{total / 2:.1f},1,{total},3.5,'
                     f'"void kernel_{i}<float, (int){i % 7}>(T1::Params, int, float *)"\n')
    (folder / "big_cuda_gpu_kern_sum.csv").write_text("".join(lines))
    for report in ("nvtx_pushpop_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "cuda_api_sum"):
        (folder / f"big_{report}.csv").write_text("")
    results: list[tuple[str, str]] = []

    def timed(label: str, fn: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        value = fn()
        results.append((label, f"{time.perf_counter() - start:.2f} s"))
        return value

    stats = timed(f"parse 5 recorded reports, {KERNELS:,} distinct kernels", lambda: load_stats(folder / "big"))
    assert len(stats.kernels) == KERNELS
    profile = build_profile(folder / "big")
    page = timed(f"render the page of {KERNELS:,} kernels", lambda: render_page([profile]))
    results.append((f"page size, {KERNELS:,} kernels", f"{len(page.encode()) / 1e6:.2f} MB"))
    return results


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or platform.machine())
    memory = next((int(line.split()[1]) / 2**20 for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal")), 0.0)
    return f"{os.cpu_count()} x {cpu}, {memory:.0f} GiB memory, {platform.system()} {platform.release()}"


@dataclass
class Measured:
    """One capture's rows of the table against nsys, and what it is."""

    trace: Path
    provenance: str
    holds: str
    rows: list[Row]
    large: bool


def speed_section(measured: list[Measured], repeat: int) -> list[str]:
    """One table of every command on every capture (median time, speed against the reference, peak of the process
    tree), what each capture is, and the verdicts against the targets."""
    lines = ["## Against nsys", "",
             "Each command is a process of its own on a fresh copy of the trace in a fresh folder (no export to "
             f"reuse, unless the row says so), {repeat} runs. A cell: the median wall time, the reference's median "
             "over it (above 1x: faster than the reference), the peak resident set of the command's process tree. The "
             "reference is what one does without nsight: `nsys stats --force-export=true -r R TRACE` once for each "
             "of the five default reports.", "",
             *[f"- `{m.trace.name}`: {m.trace.stat().st_size / 1e6:.1f} MB, {m.holds}. {m.provenance}"
               for m in measured],
             "",
             "| command | " + " | ".join(f"`{m.trace.name}`" for m in measured) + " |",
             "| --- |" + " --- |" * len(measured)]
    for i, row in enumerate(measured[0].rows):
        cells = []
        for m in measured:
            mine, reference = m.rows[i], m.rows[0].seconds
            cells.append(f"{mine.seconds:.2f} s, {reference / mine.seconds:.1f}x, {mine.tree_mb:.0f} MB")
        lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
    verdicts = [verdict for m in measured for verdict in _speed_verdicts(m)]
    return [*lines, "", *[f"- {line}" for line in verdicts], ""]


def _speed_verdicts(measured: Measured) -> list[str]:
    by = {row.label: row for row in measured.rows}
    reference = measured.rows[0].seconds
    export = by["bare `nsys export --type sqlite`"].seconds
    row = by["`nsight report`"]
    of_reference, of_export = row.seconds / reference, row.seconds / export
    name = f"`{measured.trace.name}`, `nsight report`"
    if not measured.large:
        return [f"{name}: {of_reference:.2f}x the reference's time, {of_export:.2f}x a bare SQLite export's (under "
                f"{LARGE_EVENTS:,} events Python's start-up outweighs nsys' whole run: the targets concern large "
                "captures)."]
    return [f"{name}: {of_reference:.2f}x the reference's time (target at most {REFERENCE_TARGET}x: "
            f"{_met(of_reference <= REFERENCE_TARGET, f'{of_reference / REFERENCE_TARGET:.2f}x the target')}); "
            f"{of_export:.2f}x a bare SQLite export's (target at most {EXPORT_TARGET}x: "
            f"{_met(of_export <= EXPORT_TARGET, f'{of_export / EXPORT_TARGET:.2f}x the target')}); the arrowdir "
            f"export it runs takes {by[ARROW_ROW].seconds:.2f} s of it."]


def _met(met: bool, miss: str) -> str:
    """'met', or 'NOT met' with MISS: by how much."""
    return "met" if met else f"NOT met, {miss}"


GPU_REPLICAS = (2_000, 8_000)
"""Copies of the host-load fixture along time (bench/replicate_fixture.py) for the long GPU captures' table."""
HOST_LOAD = REPO / "tests" / "fixtures" / "h200-fix-pairs-2025" / "host_load-problem.sqlite"


def gpu_scaling_section(scratch: Path) -> list[str]:
    """Long GPU captures made without a GPU (an H200 fixture's events repeated along time): `nsight stats --json`'s
    time and peak with What to fix over every step, in a task allowed 2 GiB (SCALE_MEMORY)."""
    env = {**os.environ, "NSIGHT_SUMMARY_MEMORY": SCALE_MEMORY}
    lines = ["## Long GPU captures", "",
             f"`{HOST_LOAD.relative_to(REPO).as_posix()}` (20 steps of a host-bound loop on the H200) repeated N times "
             "along time by `bench/replicate_fixture.py`, then `nsight stats --json` on the SQLite export with "
             f"`NSIGHT_SUMMARY_MEMORY={SCALE_MEMORY}`, once each; peak as above (the process tree).", "",
             "| copies | export | kernels | CUDA calls | steps in What to fix | `nsight stats --json` | per M events |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    per_million, worst = [], 0.0
    for copies in GPU_REPLICAS:
        capture = scratch / f"replica-{copies}" / "long.sqlite"
        capture.parent.mkdir()
        subprocess.run([PY, str(REPO / "bench" / "replicate_fixture.py"), str(HOST_LOAD), str(capture), str(copies)],
                       check=True, capture_output=True)
        stats = tree_run([PY, "-m", "nsight_core.cli", "stats", capture, "--json"], capture.parent, env)
        payload = json.loads(stats.stdout)
        kernels = sum(row["instances"] for row in payload["kernels"])
        calls = sum(row["instances"] for row in payload["api_calls"])
        events = kernels + calls
        per_million.append((copies, stats.seconds / events * 1e6))
        worst = max(worst, stats.tree_mb)
        lines.append(f"| {copies:,} | {capture.stat().st_size / 1e9:.2f} GB | {kernels:,} | {calls:,} "
                     f"| {payload['budget']['steps']:,} | {stats.cell()} | {per_million[-1][1]:.1f} s |")
        print(f"bench: {copies:,} copies: stats {stats.cell()}", file=sys.stderr)
    (small, small_rate), (large, large_rate) = per_million[0], per_million[-1]
    verdicts = [f"Peak at most {worst:.0f} MB (target under {SCALE_BOUND_MB} MB, 2 GiB: "
                f"{_met(worst < SCALE_BOUND_MB, f'{worst - SCALE_BOUND_MB:.0f} MB over')}).",
                f"From {small:,} to {large:,} copies, {large_rate / small_rate:.2f}x the time per event (1.0: linear)."]
    return [*lines, "", *[f"- {line}" for line in verdicts], ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranges", type=int, default=1_000_000, help="NVTX ranges of the CPU capture")
    parser.add_argument("--repeat", type=int, default=3, help="runs per command (the median is reported)")
    parser.add_argument("--trace", type=Path, action="append", default=[],
                        help="another .nsys-rep to measure (a large GPU capture recorded elsewhere)")
    parser.add_argument("--quick", action="store_true",
                        help="100,000 ranges, one run each; writes a page only where --output is given")
    parser.add_argument("--output", type=Path, default=None,
                        help=f"the page to write, whole (default: {OUT.relative_to(REPO)}, none with --quick)")
    args = parser.parse_args()
    if args.quick:
        args.ranges, args.repeat = 100_000, 1
    output = args.output or (None if args.quick else OUT)
    nsys = find_nsys()
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nsight-bench-") as tmp:
        scratch = Path(tmp)
        nvtx_trace, recording = record_nvtx_capture(args.ranges, scratch)
        gpu = largest_gpu_fixture()
        captures = [
            (nvtx_trace, f"Recorded by this run in {recording:.0f} s: `nsight run --trace nvtx --sample none -- "
                         f"python bench/nvtx_ranges.py {args.ranges}`"),
            (gpu, f"`{gpu.relative_to(REPO).as_posix()}`, recorded on an H200: the largest complete GPU fixture"),
            *[(path.resolve(), f"`{path}`, given with `--trace` (a capture recorded elsewhere, not in the repository)")
              for path in args.trace],
        ]
        measured: list[Measured] = []
        costs: list[Costs] = []
        for trace, provenance in captures:
            holds = contents(trace, scratch)
            rows = measure(trace, nsys, scratch, args.repeat)
            costs.append(analysis_costs(trace, scratch, args.repeat, rows))
            measured.append(Measured(trace, provenance, holds, rows, costs[-1].events >= LARGE_EVENTS))
        sections = speed_section(measured, args.repeat)
        scaling = [*((size, record_nvtx_capture(size, scratch)[0]) for size in FINALIZE_SIZES if size < args.ranges),
                   (args.ranges, nvtx_trace)]
        baseline = import_baseline_mb()
        sections += [*analysis_section(costs, baseline),
                     *finalize_scaling(scaling, scratch, args.repeat)]
        recorded = dict(scaling)
        sections += scaling_section([(size, recorded.get(size) or record_nvtx_capture(size, scratch)[0])
                                     for size in SCALE_SIZES if not args.quick or size <= args.ranges], nsys, scratch)
        if not args.quick:
            sections += gpu_scaling_section(scratch)
        imports = import_times(7 if not args.quick else 3)
        extras = in_process(scratch)
    elapsed = time.perf_counter() - started
    load = f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    print("\n".join(sections) + f"\n- {import_verdict(imports)}\nbench: {load}", file=sys.stderr)
    if output is not None:
        write_doc(output, sections, imports, extras, nsys, elapsed, load, args)


def write_doc(output: Path, sections: list[str], imports: list[tuple[str, float]], extras: list[tuple[str, str]],
              nsys: Nsys, elapsed: float, load: str, args: argparse.Namespace) -> None:
    """Write the performance page to OUTPUT, replacing what was there: it holds this run's numbers only."""
    import importlib.metadata

    import polars

    day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    extra = shlex.join(sys.argv[1:])  # the arguments as given
    doc = [
        "# Performance",
        "",
        "Written by `make bench` (`bench/bench.py`; its docstring states the method and the targets), which",
        "replaces this page each run. Only ratios compare across machines and runs: each is against a reference",
        "measured in the same run, on the same machine.",
        "",
        f"- run: {day}, nsight {importlib.metadata.version('nsight-core')}, {elapsed / 60:.1f} min in all",
        f"- machine: {machine()}; {load}",
        f"- Python {platform.python_version()}, Polars {polars.__version__}, nsys {nsys.version}",
        f"- command: `make bench{' BENCH_ARGS=' + repr(extra) if extra else ''}`, {args.repeat} runs per command",
        "",
        *sections,
        "## Start-up",
        "",
        "Median whole-process time of `python -c CODE`, the commands taking turns; the last row is timed inside the",
        "process. \"No .pyc\": every module compiled from source each time (an install without bytecode).",
        "",
        "| what | median |",
        "| --- | --- |",
        *[f"| {label} | {seconds:.3f} s |" for label, seconds in imports],
        "",
        f"- {import_verdict(imports)}",
        "",
        "## 10,000 distinct kernels from recorded CSVs",
        "",
        "| what | result |",
        "| --- | --- |",
        *[f"| {label} | {value} |" for label, value in extras],
        "",
    ]
    output.write_text("\n".join(doc), encoding="utf-8")
    print(f"bench: wrote {output}", file=sys.stderr)


if __name__ == "__main__":
    main()
