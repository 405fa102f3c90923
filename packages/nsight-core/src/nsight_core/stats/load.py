"""Statistics for a capture: from a .nsys-rep or .sqlite (one export, one `nsys stats` call) or from
a directory of recorded CSVs (how users unit-test analyses without nsys or a GPU)."""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

from nsight_core.errors import StatsError
from nsight_core.nsys import Nsys, find_nsys
from nsight_core.stats.models import ProfileStats
from nsight_core.stats.parse import add_report, read_csv_text
from nsight_core.stats.reports import DEFAULT_REPORTS, aliases, canonical

log = logging.getLogger("nsight")

REPORT_SUFFIXES = frozenset({".nsys-rep", ".qdrep"})
"""Trace files nsys exports; `.qdrep` is the name before 2021."""
EXPORT_SUFFIX = ".sqlite"

_KNOWN_SUFFIXES = sorted({name for report in DEFAULT_REPORTS for name in aliases(report)}, key=len, reverse=True)
_PROCESSING = re.compile(r"Processing \[.*?\] with \[(?P<script>.*?)\] to \[(?P<out>.*?)\]\.\.\.\s*(?P<status>.*)")
_NOT_FOUND = re.compile(r"Report '(?P<report>[^']+)' could not be found")


def derived_dir(source: Path) -> Path:
    """Where files derived from SOURCE go: beside it, or a per-file cache folder when that is read-only."""
    if os.access(source.parent, os.W_OK):
        return source.parent
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nsight"
    folder = cache / hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def sqlite_for(report_file: Path, nsys: Nsys | None = None) -> Path:
    """The SQLite export of a .nsys-rep: reused when it is newer than the report, else made once."""
    sqlite = derived_dir(report_file) / (report_file.stem + ".sqlite")
    if sqlite.exists() and sqlite.stat().st_mtime >= report_file.stat().st_mtime:
        return sqlite
    log.info("exporting %s to SQLite (once per capture; large traces take a while)", report_file)
    (nsys or find_nsys()).export_sqlite(report_file, sqlite)
    return sqlite


def _resolve(requested: str, available: frozenset[str]) -> str:
    """The name this nsys uses for REQUESTED (new or pre-2023 name; options after ':' kept)."""
    base, colon, options = requested.partition(":")
    for name in aliases(base):
        if name in available:
            return name + colon + options
    return requested


def stats_from_nsys(path: Path, reports: Sequence[str] = DEFAULT_REPORTS, nsys: Nsys | None = None) -> ProfileStats:
    """Run REPORTS on a .nsys-rep or .sqlite with ONE export and ONE `nsys stats` call.

    The CSVs are kept in `<stem>.stats/` beside the export as `<stem>_<report>.csv`, the layout
    :func:`stats_from_csv_dir` reads, so a capture's numbers can be re-read without nsys. A folder of
    their own: recorded CSVs lying beside a .nsys-rep are never overwritten.
    """
    nsys = nsys or find_nsys()
    if not path.exists():
        raise StatsError(f"{path} does not exist.")
    sqlite = path if path.suffix == ".sqlite" else sqlite_for(path, nsys)
    requested = list(dict.fromkeys(reports))
    stats = ProfileStats(reports=requested)
    if not requested:
        return stats
    available = nsys.available_reports
    run_names = {report: _resolve(report, available) for report in requested}
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
            if _NOT_FOUND.search(result.output) and name in _not_found(result.output):
                stats.skipped[report] = f"unknown report: this nsys ({nsys.version}) has no report named {name!r}"
            else:
                stats.skipped[report] = f"failed: {message or result.output[-500:] or 'nsys wrote no file'}"
            continue
        if message.startswith("SKIPPED"):
            reason = message.removeprefix("SKIPPED:").strip().replace(str(sqlite), "the capture")
            stats.skipped[report] = "no data: " + reason
            continue
        add_report(stats, report, read_csv_text(csv_file))
    return stats


def _not_found(output: str) -> set[str]:
    return {m.group("report") for m in _NOT_FOUND.finditer(output)}


def _messages_by_report(output: str) -> dict[str, str]:
    """nsys' verdict per report from its 'Processing [...] with [...] ... STATUS' lines."""
    messages: dict[str, str] = {}
    for match in _PROCESSING.finditer(output):
        out = match.group("out")
        stem = Path(out).stem
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
    """Recorded CSVs in DIRECTORY grouped as {prefix: {report: file}} (`<prefix>_<report>.csv`).

    Default report names identify the prefixes; a file of any other report joins the longest known
    prefix it starts with (PREFIX, when the caller names one).
    """
    files = sorted(directory.glob("*.csv"))
    groups: dict[str, dict[str, Path]] = {}
    prefixes: set[str] = {prefix} if prefix else set()
    pending: list[Path] = []
    for file in files:
        split = _split_name(file.stem, set())
        if split is None:
            pending.append(file)
            continue
        prefixes.add(split[0])
        groups.setdefault(split[0], {})[split[1]] = file
    for file in pending:
        split = _split_name(file.stem, prefixes)
        if split is not None:
            groups.setdefault(split[0], {})[split[1]] = file
    return groups


def stats_from_csv_dir(path: Path, reports: Sequence[str] | None = None) -> ProfileStats:
    """Load recorded CSVs: PATH is `DIR/PREFIX` (files DIR/PREFIX_<report>.csv) or a DIR holding one prefix.

    An empty file means nsys skipped the report for lack of data; a requested report with no file is
    skipped as not recorded.
    """
    directory, prefix = (path, None) if path.is_dir() else (path.parent, path.name)
    if not directory.is_dir():
        raise StatsError(f"{path} is neither a directory of recorded CSVs nor DIR/PREFIX of one.")
    groups = recorded_captures(directory, prefix)
    if prefix is None:
        if len(groups) != 1:
            found = ", ".join(sorted(groups)) or "none"
            raise StatsError(
                f"{directory} holds recorded CSVs of {len(groups)} captures (prefixes: {found}). "
                f"Pass one of them as {directory}/<prefix>."
            )
        prefix = next(iter(groups))
    files = groups.get(prefix)
    if not files:
        raise StatsError(f"No recorded CSVs named {prefix}_<report>.csv in {directory}.")
    wanted = list(dict.fromkeys(reports)) if reports is not None else sorted(files, key=_default_order)
    stats = ProfileStats(reports=wanted)
    by_canonical = {canonical(name): file for name, file in files.items()}
    for report in wanted:
        file = files.get(report) or by_canonical.get(canonical(report))
        if file is None:
            stats.skipped[report] = f"not recorded: no {prefix}_{report}.csv in {directory}"
            continue
        add_report(stats, report, read_csv_text(file))
    return stats


def _default_order(report: str) -> tuple[int, str]:
    name = canonical(report)
    return (DEFAULT_REPORTS.index(name) if name in DEFAULT_REPORTS else len(DEFAULT_REPORTS), report)


def load_stats(path: str | Path, reports: Sequence[str] | None = None) -> ProfileStats:
    """Statistics of PATH: a .nsys-rep, a .sqlite export, or recorded CSVs (DIR or DIR/PREFIX)."""
    path = Path(path)
    if path.suffix in REPORT_SUFFIXES or path.suffix == EXPORT_SUFFIX:
        return stats_from_nsys(path, DEFAULT_REPORTS if reports is None else reports)
    return stats_from_csv_dir(path, reports)
