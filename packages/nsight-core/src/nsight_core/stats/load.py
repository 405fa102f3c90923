"""Statistics for a capture: the default reports from its events (one export, Polars), any other report
from `nsys stats`, or a directory of recorded CSVs (how users unit-test analyses without nsys or a GPU)."""

from __future__ import annotations

import difflib
import glob
import logging
import re
from collections.abc import Sequence
from pathlib import Path

from nsight_core.errors import StatsError
from nsight_core.nsys import Nsys, find_nsys
from nsight_core.stats.from_trace import add_derived, is_derived
from nsight_core.stats.models import ExportRead, ProfileStats
from nsight_core.stats.parse import add_report, read_csv_text
from nsight_core.stats.reports import DEFAULT_REPORTS, aliases, canonical
from nsight_core.trace.export import derived_dir, export, is_event_source
from nsight_core.trace.load import load_trace
from nsight_core.trace.model import Trace

log = logging.getLogger("nsight")

_KNOWN_SUFFIXES = sorted({name for report in DEFAULT_REPORTS for name in aliases(report)}, key=len, reverse=True)
_PROCESSING = re.compile(r"Processing \[.*?\] with \[(?P<script>.*?)\] to \[(?P<out>.*?)\]\.\.\.\s*(?P<status>.*)")
_NOT_FOUND = re.compile(r"Report '(?P<report>[^']+)' could not be found")


def _resolve(requested: str, available: frozenset[str]) -> str:
    """The name this nsys uses for REQUESTED (new or pre-2023 name; options after ':' kept)."""
    base, colon, options = requested.partition(":")
    return next((name + colon + options for name in aliases(base) if name in available), requested)


def stats_of_trace(trace: Trace, reports: Sequence[str] = DEFAULT_REPORTS, nsys: Nsys | None = None) -> ProfileStats:
    """REPORTS of TRACE: the default ones from its events, any other with ONE `nsys stats` call."""
    requested = list(dict.fromkeys(reports))
    stats = ProfileStats(reports=requested)
    for report in requested:
        if is_derived(report):
            add_derived(stats, report, trace)
    if others := [report for report in requested if not is_derived(report)]:
        _run_nsys_stats(stats, trace, others, nsys or find_nsys())
    stats.notes.extend(trace.notes.values())
    if (choice := trace.tables.choice) is not None:
        stats.export = ExportRead(**choice._asdict())
    return stats


def _run_nsys_stats(stats: ProfileStats, trace: Trace, reports: list[str], nsys: Nsys) -> None:
    """Run REPORTS (beyond the derived five) with one `nsys stats` call on the capture's SQLite export. The CSVs are
    kept in `<stem>.stats/` beside the export as `<stem>_<report>.csv`, the layout :func:`stats_from_csv_dir` reads, so
    a capture's numbers can be re-read without nsys."""
    available = nsys.available_reports
    run_names = {report: _resolve(report, available) for report in reports}
    for report, name in list(run_names.items()):
        if (base := name.partition(":")[0]) not in available:
            close = difflib.get_close_matches(base, sorted(available | set(DEFAULT_REPORTS)), n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            stats.skipped[report] = f"unknown report: this nsys ({nsys.version}) has no report named {base!r}{hint}"
            del run_names[report]
    if not run_names:
        return
    # An SQLite export `nsys stats` can read: the trace's own, or one made from its .nsys-rep.
    sqlite = (trace.source if trace.source.suffix == ".sqlite"
              else export(trace.report, "sqlite", nsys) if trace.report is not None else None)
    if sqlite is None:
        for report in run_names:
            stats.skipped[report] = ("failed: `nsys stats` reads a .nsys-rep or .sqlite export, not an arrow "
                                     "directory; pass the capture's .nsys-rep for this report")
        return
    stats_dir = derived_dir(sqlite) / (sqlite.stem + ".stats")
    stats_dir.mkdir(exist_ok=True)
    prefix = stats_dir / sqlite.stem
    for name in run_names.values():
        Path(f"{prefix}_{name}.csv").unlink(missing_ok=True)
    log.info("running %d nsys stats reports on %s", len(set(run_names.values())), sqlite)
    result = nsys.stats(sqlite, list(dict.fromkeys(run_names.values())), prefix)
    messages = _messages_by_report(result.output)
    for report, name in run_names.items():
        csv_file = Path(f"{prefix}_{name}.csv")
        message = messages.get(name, "")
        if not csv_file.exists():
            stats.skipped[report] = (f"unknown report: this nsys ({nsys.version}) has no report named {name!r}"
                                     if name in {found.group("report") for found in _NOT_FOUND.finditer(result.output)}
                                     else f"failed: {message or result.output[-500:] or 'nsys wrote no file'}")
        elif message.startswith("SKIPPED"):
            reason = message.removeprefix("SKIPPED:").strip().replace(str(sqlite), "the capture")
            stats.skipped[report] = "no data: " + reason
        else:
            add_report(stats, report, read_csv_text(csv_file))


def _messages_by_report(output: str) -> dict[str, str]:
    """nsys' verdict per report from its 'Processing [...] with [...] ... STATUS' lines."""
    messages: dict[str, str] = {}
    for match in _PROCESSING.finditer(output):
        stem = Path(match.group("out")).stem
        for report_name in (Path(match.group("script")).stem, match.group("script")):
            if stem.endswith("_" + report_name.replace(":", "_")) or stem.endswith("_" + report_name):
                messages[report_name] = match.group("status").strip()
    return messages


def _split_name(stem: str, prefixes: set[str]) -> tuple[str, str] | None:
    for suffix in _KNOWN_SUFFIXES:
        if stem.endswith("_" + suffix):
            return stem[: -len(suffix) - 1], suffix
    for prefix in sorted(prefixes, key=len, reverse=True):
        if stem.startswith(prefix + "_"):
            return prefix, stem[len(prefix) + 1:]
    return None


def recorded_captures(directory: Path, prefix: str | None = None) -> dict[str, dict[str, Path]]:
    """Recorded CSVs in DIRECTORY grouped as {prefix: {report: file}} (`<prefix>_<report>.csv`). Default report names
    identify the prefixes (PREFIX too, where given); a file of any other report joins the longest one it starts with."""
    files = {file: _split_name(file.stem, set()) for file in sorted(directory.glob("*.csv"))}
    prefixes = {split[0] for split in files.values() if split} | ({prefix} if prefix else set())
    groups: dict[str, dict[str, Path]] = {}
    # Files named by a default report first, then the others by the prefixes those identify.
    for file in sorted(files, key=lambda named: files[named] is None):
        if split := files[file] or _split_name(file.stem, prefixes):
            groups.setdefault(split[0], {})[split[1]] = file
    return groups


def stats_from_csv_dir(path: Path, reports: Sequence[str] | None = None) -> ProfileStats:
    """Load recorded CSVs: PATH is `DIR/PREFIX` (files DIR/PREFIX_<report>.csv) or a DIR holding one prefix. An empty
    file means nsys skipped the report for lack of data; a requested report with no file is skipped as not recorded."""
    directory, prefix = (path, None) if path.is_dir() else (path.parent, path.name)
    if not directory.is_dir():
        raise StatsError(f"{path} is neither a directory of recorded CSVs nor DIR/PREFIX of one.")
    if prefix is None and directory.suffix == ".stats" and any(directory.glob(f"{glob.escape(directory.stem)}_*.csv")):
        # nsight's own folder of what `nsys stats` wrote for a trace: <stem>.stats/<stem>_<report>.csv. It may hold
        # only reports whose names do not identify a prefix (osrt_sum, where the default reports came from events).
        prefix = directory.stem
    groups = recorded_captures(directory, prefix)
    if prefix is None:
        if len(groups) != 1:
            found = ", ".join(sorted(groups)) or "none"
            raise StatsError(f"{directory} holds recorded CSVs of {len(groups)} captures (prefixes: {found}). "
                             f"Pass one of them as {directory}/<prefix>.")
        prefix = next(iter(groups))
    if not (files := groups.get(prefix)):
        raise StatsError(f"No recorded CSVs named {prefix}_<report>.csv in {directory}.")
    wanted = list(dict.fromkeys(reports)) if reports is not None else sorted(files, key=_default_order)
    stats = ProfileStats(reports=wanted)
    by_canonical = {canonical(name): file for name, file in files.items()}
    for report in wanted:
        if (file := files.get(report) or by_canonical.get(canonical(report))) is None:
            stats.skipped[report] = f"not recorded: no {prefix}_{report}.csv in {directory}"
        else:
            add_report(stats, report, read_csv_text(file))
    return stats


def _default_order(report: str) -> tuple[int, str]:
    name = canonical(report)
    return (DEFAULT_REPORTS.index(name) if name in DEFAULT_REPORTS else len(DEFAULT_REPORTS), report)


def load_stats(path: str | Path, reports: Sequence[str] | None = None) -> ProfileStats:
    """Statistics of PATH: a .nsys-rep, a .sqlite or arrow-directory export, or recorded CSVs (DIR or DIR/PREFIX)."""
    path = Path(path)
    if is_event_source(path):
        return stats_of_trace(load_trace(path), DEFAULT_REPORTS if reports is None else reports)
    return stats_from_csv_dir(path, reports)
