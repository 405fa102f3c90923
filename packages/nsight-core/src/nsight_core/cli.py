"""The `nsight` command: argument parsing and printing only; the work happens in the library."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from nsight_core.errors import CommandNotExecutableError, CommandNotFoundError, NsightError
from nsight_core.nsys import CUDA_GRAPH_TRACES, DEFAULT_CAPTURE, DEFAULT_TRACE, ENV_PYTHON_BACKTRACE
from nsight_core.render.text import DEFAULT_LIMIT
from nsight_core.stats.reports import DEFAULT_REPORTS
from nsight_core.trace.export import REPORT_SUFFIXES, export_ahead

if TYPE_CHECKING:
    from nsight_core.stats.models import ProfileStats

# Polars, Altair, pydantic and the analyses load inside the commands that use them: `nsight run` and `launch` must
# start fast, and `nsight stats`/`report` start a capture's export before they load.

log = logging.getLogger("nsight")


def _csv_list(value: str) -> list[str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"{value!r} is empty: give one or more names separated by commas")
    return items


def _row_limit(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of rows: give 0 (every row) or more")
    return int(value)


def _command(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise NsightError("no command given: put the program to run after --, e.g. `nsight run -- python train.py`.")
    return command


def cmd_run(args: argparse.Namespace) -> int:
    from nsight_core.session import Session

    session = Session(trace=args.trace, sample=args.sample, output_dir=args.output,
                      cuda_graph_trace=args.cuda_graph_trace, python_backtrace=args.python_backtrace)
    result = session.run(_command(args), capture=args.capture)
    for report in result.reports:
        print(report, flush=True)
    if result.diagnosis:
        print(f"nsight: no .nsys-rep was written to {result.output_dir}: {result.diagnosis}.", file=sys.stderr)
    return result.returncode


def _unknown_reports(stats: ProfileStats) -> int:
    """Say which requested reports do not exist (with nsys' closest names); 1 when none of them exists."""
    unknown = [report for report, why in stats.skipped.items() if why.startswith("unknown report")]
    for report in unknown:
        print(f"nsight: {report}: {stats.skipped[report]}", file=sys.stderr)
    if unknown and len(unknown) == len(stats.reports):
        print("nsight: error: none of the requested reports exists; `nsys stats --help-reports` lists them",
              file=sys.stderr)
        return 1
    return 0


def _exports_ahead(paths: Sequence[Path]) -> Callable[[Path], object]:
    """Start exporting the .nsys-rep files of PATHS before the heavy imports; returns a wait for a path's export."""
    exports = export_ahead(path for path in paths if path.suffix in REPORT_SUFFIXES and path.is_file())
    return lambda path: exports[path].result() if path in exports else None


def cmd_stats(args: argparse.Namespace) -> int:
    exported = _exports_ahead([args.path])
    from nsight_core.report import build_profile, stats_json, stats_text
    from nsight_core.units import for_stream

    exported(args.path)
    profile = build_profile(args.path, args.reports)
    if args.json:
        print(json.dumps(stats_json(profile), indent=2, ensure_ascii=False))
    else:
        sys.stdout.write(for_stream(stats_text(profile, args.limit or None), sys.stdout))
    return _unknown_reports(profile.stats)


def cmd_report(args: argparse.Namespace) -> int:
    exported = _exports_ahead(args.paths)
    from nsight_core.report import build_profile, capture_paths, prepare, write_page

    prepare()  # while nsys exports
    paths = [capture for path in args.paths for capture in capture_paths(path)]
    profiles, left_out = [], 0
    for path in paths:  # one capture that cannot be read costs its own section, not the others' page
        log.info("reading %s", path)
        try:
            exported(path)
            profiles.append(build_profile(path, args.reports or DEFAULT_REPORTS))
            if _unknown_reports(profiles[-1].stats):
                return 1
        except NsightError as exc:
            print(f"nsight: error: {exc} The page leaves {path} out.", file=sys.stderr)
            left_out += 1
    if not profiles:
        return 1
    print(write_page(profiles, args.output, title=args.title))
    return 1 if left_out else 0


def cmd_export(args: argparse.Namespace) -> int:
    exported = _exports_ahead([args.path])
    from nsight_core.report import export_perfetto

    exported(args.path)
    written = export_perfetto(args.path, args.output)
    log.info("wrote %s events: %s", f"{sum(written.events.values()):,}",
             ", ".join(f"{count:,} {category}" for category, count in written.events.items() if count))
    print(written.path)
    return 0


def cmd_launch(args: argparse.Namespace) -> int:
    from nsight_core.launch import exec_launch

    exec_launch(_command(args), name=args.session, trace=args.trace, sample=args.sample,
                output_dir=args.output_dir, cuda_graph_trace=args.cuda_graph_trace,
                python_backtrace=args.python_backtrace)


SLOWER_EXIT = 3
"""`nsight diff --fail-if-slower`: B is slower than allowed (1 stays an error: a capture that cannot be read)."""
NOT_COMPARABLE_EXIT = 4
"""`nsight diff --fail-if-slower`: the captures are not comparable (step families, GPUs, an incomplete trace), so
the gate cannot pass; without a gate, not comparable exits 0 and says why."""


def cmd_diff(args: argparse.Namespace) -> int:
    from nsight_core.compare import diff
    from nsight_core.render.diff import gate_line, render_diff, render_markdown
    from nsight_core.units import for_stream

    result = diff(args.a, args.b)
    if args.json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        text = render_markdown(result, args.fail_if_slower) if args.markdown else render_diff(result)
        sys.stdout.write(for_stream(text, sys.stdout))
    if args.fail_if_slower is None:
        return 0
    outcome = result.outcome(args.fail_if_slower)
    if outcome != "passed":
        print(for_stream(f"nsight: {gate_line(result, args.fail_if_slower)}", sys.stderr), file=sys.stderr)
    return {"passed": 0, "slower": SLOWER_EXIT, "not_comparable": NOT_COMPARABLE_EXIT}[outcome]


COMMANDS = {"run": cmd_run, "stats": cmd_stats, "report": cmd_report, "export": cmd_export, "launch": cmd_launch,
            "diff": cmd_diff}


def _add_profiling_options(parser: argparse.ArgumentParser) -> None:
    """What to record and the command to record: shared by `run` and `launch`."""
    parser.add_argument("--trace", type=_csv_list, default=",".join(DEFAULT_TRACE),
                        help="nsys trace domains, comma-separated (default: %(default)s; CPU-only machines: nvtx,osrt)")
    parser.add_argument("--sample", default=None,
                        help="CPU sampling passed to nsys --sample, e.g. none or cpu (default: nsys' own)")
    parser.add_argument("--cuda-graph-trace", choices=CUDA_GRAPH_TRACES, default=None,
                        help="passed to nsys --cuda-graph-trace: 'graph' records each CUDA graph launch whole, 'node' "
                        "each of its kernels (default: nsys' own: graph where the CUDA driver is 11.7 or newer)")
    parser.add_argument("--python-backtrace", action="store_true",
                        default=os.environ.get(ENV_PYTHON_BACKTRACE) == "1",
                        help="record the Python call stack of each CUDA call of 10 us or longer (allocations, frees, "
                        "copies, synchronisations) and sample it 1,000 times a second, so that findings name the "
                        "file:line that caused them (costs host time; needs CPU sampling, nsys' default; also "
                        f"{ENV_PYTHON_BACKTRACE}=1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")


_CAPTURE = ".nsys-rep, .sqlite (.sqlitedir, .parquetdir: in slices), arrow directory, or a folder of recorded CSVs"


def _add_reports_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reports", type=_csv_list, default=None,
                        help=f"nsys report names, comma-separated (default: {','.join(DEFAULT_REPORTS)}; "
                        "any nsys report name is accepted and gets a table)")


class _PrintVersion(argparse.Action):
    """`--version`: the installed version, looked up only when asked, not by every `nsight run` building its parser."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> NoReturn:
        import importlib.metadata

        try:
            version = importlib.metadata.version("nsight-core")
        except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
            version = "unknown (not installed)"
        print(f"{parser.prog} {version}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nsight", description="Profile programs with NVIDIA Nsight Systems and "
                                     "summarise where the GPU time went.")
    parser.add_argument("-v", "--verbose", action="store_true", help="show progress and debug messages")
    parser.add_argument("--version", action=_PrintVersion, nargs=0, default=argparse.SUPPRESS,
                        help="print nsight's version and exit")
    commands = parser.add_subparsers(dest="name", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run", help="run a command under nsys and print the .nsys-rep files it wrote",
        description="Run CMD under nsys. --capture process records the whole run; --capture manual records "
        "only the nsight_core.range() blocks CMD opens, one .nsys-rep per block. CMD's output is its own; "
        "nsys' messages go to stderr; the report paths follow on stdout, one per line. Exits with CMD's "
        "exit code (127 when CMD does not exist; 130/143 after SIGINT/SIGTERM, which are passed on to CMD).")
    run.add_argument("--capture", choices=("process", "manual"), default=DEFAULT_CAPTURE,
                     help="what to record (default: %(default)s)")
    run.add_argument("-o", "--output", type=Path, default=None,
                     help="folder for the reports (default: ./nsight-runs/<date>-<time>-<id>/, with "
                     "./nsight-runs/latest pointing at it)")
    _add_profiling_options(run)

    stats = commands.add_parser(
        "stats", help="summarise a capture: kernels, CUDA API, memory operations, NVTX ranges",
        description="PATH is a .nsys-rep, a .sqlite or arrow-directory export, or recorded CSVs (DIR or "
        "DIR/PREFIX holding PREFIX_<report>.csv). A .nsys-rep is exported once (an arrow directory beside it); "
        "the default reports are computed from its events and equal `nsys stats`' numbers, other reports run "
        "in one `nsys stats` call. For captures with events it also says what to fix (findings with the "
        "saving per step), the steps and the per-step time budget, and warns when the trace is incomplete. "
        "Exit status: 0, or 1 when no requested report exists or the input cannot be read.")
    stats.add_argument("path", type=Path, help=_CAPTURE)
    _add_reports_option(stats)
    stats.add_argument("--limit", type=_row_limit, default=DEFAULT_LIMIT, metavar="N",
                       help="rows per table in the text output (default: %(default)s; 0: every row); a cut table "
                       "says how many rows it left out. --json always has every row")
    stats.add_argument("--json", action="store_true", help="print one JSON object (the reports' rows, skipped "
                       "reports, and for event inputs: window, steps, budget, ranges, findings, completeness)")

    report = commands.add_parser(
        "report", help="write the GPU Profile page (summary, charts, detail tables) for one or more captures",
        description="Write one HTML page with a section per capture: summary tiles (span, GPU busy from the "
        "union of kernel intervals, launches, copies, NVTX, CUDA API), charts and the detail table of every "
        "report, with 'What to fix' on top. PATH is a .nsys-rep, a .sqlite or arrow-directory export, or a "
        "directory of recorded CSVs (one section per recorded prefix). A .nsys-rep is exported once, beside it. "
        "The page needs no network. A capture that cannot be read is left out of the page with one error line. "
        "Exit status: 0, or 1 when a capture was left out (the page holds the others) or none could be read.")
    report.add_argument("paths", nargs="+", type=Path, metavar="PATH", help=_CAPTURE)
    report.add_argument("-o", "--output", type=Path, default=Path("report.html"),
                        help="the HTML file to write (default: %(default)s)")
    _add_reports_option(report)
    report.add_argument("--title", default="GPU Profile", help="page title (default: %(default)s)")

    export = commands.add_parser(
        "export", help="write a capture's whole timeline for ui.perfetto.dev or chrome://tracing",
        description="Write PATH's whole timeline as Chrome Trace Event JSON, which ui.perfetto.dev and "
        "chrome://tracing open: a process per GPU with a thread per stream (kernels, memory copies, memsets), and "
        "the traced processes' threads (NVTX ranges nested, CUDA API calls, OS-runtime calls, NVTX marks), each "
        "event with its name and details. Written in slices, so a capture of millions of events takes the memory "
        "of its events, not of their JSON. PATH is a .nsys-rep (exported once, beside it) or its .sqlite or "
        "arrow-directory export; recorded CSVs have no events. Prints the file written. Exit status: 0, or 1 "
        "when PATH cannot be read or the file cannot be written.")
    export.add_argument("path", type=Path, metavar="PATH", help=".nsys-rep, .sqlite (or a .sqlitedir or "
                        ".parquetdir in slices) or arrow-directory export")
    export.add_argument("--format", choices=("perfetto",), default="perfetto",
                        help="the file format (default: %(default)s: Chrome Trace Event JSON)")
    export.add_argument("-o", "--output", type=Path, default=None,
                        help="the file to write; gzip-compressed when it ends in .gz (default: beside PATH, "
                        "<name>.perfetto.json.gz)")

    launch = commands.add_parser(
        "launch", help="exec a command inside a new nsys session (what a container runtime wraps with)",
        description="Replace this process with `nsys launch` of CMD in a session named NAME; the command then "
        "records regions with nsight_core.range(). When nsys cannot be used, warn once and run CMD "
        "unprofiled: profiling never stops the job.")
    launch.add_argument("--session", required=True, help="session name (sanitised to [A-Za-z0-9._-])")
    launch.add_argument("--output-dir", type=Path, default=None,
                        help="folder for region reports (default: $TMPDIR/nsight/<session>)")
    _add_profiling_options(launch)

    compare = commands.add_parser(
        "diff", help="compare two captures: step time, budget, kernels, NVTX ranges, with a verdict",
        description="Compare capture B against capture A: step p50/p95, the per-step budget (compute, exposed "
        "copies and communication, sync waits, launch gaps, GPU idle), kernels and NVTX ranges matched by name, "
        "summary numbers, each with absolute and % change, and a one-line verdict on top. A and B are .nsys-rep "
        "files, .sqlite or arrow-directory exports, or directories of recorded CSVs (totals only: no steps or "
        "budget). The verdict compares step p50 when both have the same step family, else GPU busy time, else "
        "summed kernel time. Captures with different step families, on different GPUs, or with an incomplete "
        "trace are not comparable: the output says why. A capture too large to analyse whole in the memory "
        "allowed (NSIGHT_SUMMARY_MEMORY) is compared on what streams from disk: every step's time and budget, "
        "kernels, NVTX ranges, GPU busy time (no budget where its steps are not NVTX ranges). Exit status: "
        f"0 (also when not comparable, without a gate), {SLOWER_EXIT} when --fail-if-slower is exceeded, "
        f"{NOT_COMPARABLE_EXIT} when --fail-if-slower is given and the captures are not comparable, 1 on errors.")
    compare.add_argument("a", type=Path, metavar="A", help="the baseline capture")
    compare.add_argument("b", type=Path, metavar="B", help="the capture to judge against A")
    compare.add_argument("--fail-if-slower", type=float, default=None, metavar="PCT",
                         help=f"exit {SLOWER_EXIT} when B is more than PCT %% slower than A (e.g. 10), "
                         f"{NOT_COMPARABLE_EXIT} when the two are not comparable")
    shape = compare.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    shape.add_argument("--markdown", action="store_true",
                       help="print the comparison as Markdown for a pull-request comment (verdict, gate, tables)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for stream in (sys.stdout, sys.stderr):  # a name a latin-1 or C-locale stream cannot hold: escaped
        if isinstance(stream, io.TextIOWrapper):  # not a test harness's stream
            stream.reconfigure(errors="backslashreplace")
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="nsight: %(message)s",
                        stream=sys.stderr)
    if argv is None and args.name in ("stats", "report", "export", "diff") and not _users_allocator():
        os.environ[ALLOCATOR_SETTING] = ANALYSIS_ALLOCATOR  # before any import of Polars
    code = _dispatch(args)
    if argv is None and args.name in ("stats", "report", "export"):
        _exit_now(code)
    return code


ALLOCATOR_SETTING = "_RJEM_MALLOC_CONF"
"""How Polars' allocator (its own copy of jemalloc) is configured: read once, as Polars is imported."""
ANALYSIS_ALLOCATOR = "narenas:1,background_thread:true,dirty_decay_ms:100,muzzy_decay_ms:0"
"""For `nsight stats`, `report`, `export` and `diff`, unless the user chose one: one arena, freed pages handed back soon
by jemalloc's own thread, where Polars' defaults keep them per thread, each stage's freed memory held for the next. Set
in nsight's own process only (``main`` without ARGV), whose only children are nsys' exports."""

POLARS_ALLOCATOR = re.compile(r"dirty_decay_ms:500,muzzy_decay_ms:1000(,thp:always,metadata_thp:always)?,?")
"""What Polars' import writes into ALLOCATOR_SETTING (its defaults, then the value it found): a process started by one
that imported Polars inherits it, and that is no choice of the user's."""


def _users_allocator() -> str:
    """ALLOCATOR_SETTING as the user set it: the environment's, less the defaults Polars' imports put before it."""
    setting = os.environ.get(ALLOCATOR_SETTING, "")
    while (match := POLARS_ALLOCATOR.match(setting)) and match.end():
        setting = setting[match.end():]
    return setting


def _dispatch(args: argparse.Namespace) -> int:
    try:
        return int(COMMANDS[args.name](args))
    except CommandNotFoundError as exc:  # a shell's statuses: 126 not executable, 127 not found
        print(f"nsight: error: {exc}", file=sys.stderr)
        return 126 if isinstance(exc, CommandNotExecutableError) else 127
    except NsightError as exc:
        print(f"nsight: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (`| head`): no traceback, SIGPIPE's status, later writes go nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _exit_now(code: int) -> NoReturn:
    """End `nsight stats`, `report` or `export` (``main`` without ARGV) without Python's teardown of Polars, pydantic
    and Altair, which they do not need: files are closed, output flushed here."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a reader that went away (`| head`): nothing more to say
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
