"""Exports of a .nsys-rep, made once and reused only while they are complete and current.

An export is written under a temporary name and renamed into place when nsys has finished, then a record is written
beside it: the size and modification time of the report it was made from and the size of each of its files. It is
reused only when that record matches both the report as it is now and the files on disk. Anything else (an interrupted
export, a truncated or deleted file, a report recorded again or replaced at the same path, a damaged file a user left
beside it) is redone, never read as "no data"; temporary folders an interrupted export left are removed by the next.

Exports go beside the report, or into a per-report cache folder when its folder is read-only (:func:`derived_dir`).
Which export a capture gets, and why: :class:`ExportChoice`; how a large one is made in slices of time and read as one
export: :func:`_export_sliced`. :func:`export_ahead` starts a capture's export while the CLI imports Polars."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from nsight_core.claims import abandoned
from nsight_core.errors import ExportDiskFullError, NsysCommandError, StatsError, one_line
from nsight_core.memory import check_export_memory, export_bytes, fits, summary_bytes
from nsight_core.nsys import Nsys, find_nsys
from nsight_core.trace.writer import check_writer, explain_failure
from nsight_core.units import size as _size

log = logging.getLogger("nsight")

REPORT_SUFFIXES = frozenset({".nsys-rep", ".qdrep"})
"""Trace files nsys writes; `.qdrep` is the name before 2021."""
ARROW_SUFFIX = ".arrowdir"
SQLITE_SUFFIX = ".sqlite"
SLICED_SUFFIX = ".sqlitedir"
"""A folder of SQLite exports of one capture, each of a slice of its time (:func:`export` of kind 'sqlitedir')."""
SLICE_PATTERN = "part-*.sqlite"
PARQUET_SUFFIX = ".parquetdir"
"""A folder of nsys' Parquet exports of one capture, a folder per slice of its time (kind 'parquetdir')."""
PARQUET_SLICE_PATTERN = "part-*/*.parquet"
PARQUET_META = "capture.sqlite"
"""Beside the Parquet slices: the tables nsys' Parquet export leaves out, from SQLite."""
_SUFFIXES = {"arrowdir": ARROW_SUFFIX, "sqlite": SQLITE_SUFFIX, "sqlitedir": SLICED_SUFFIX,
             "parquetdir": PARQUET_SUFFIX}
_RECORD = ".nsight-export.json"
"""The record (see the module) inside a folder export, written last; beside a .sqlite: <name>.nsight.json."""


def is_event_source(path: Path) -> bool:
    """PATH holds events (a trace, or its SQLite, sliced or arrow-directory export), not recorded CSVs."""
    return path.suffix in {*REPORT_SUFFIXES, SQLITE_SUFFIX} or (path.is_dir() and any(
        any(path.glob(pattern)) for pattern in ("*.arrow", SLICE_PATTERN, PARQUET_SLICE_PATTERN)))


def derived_dir(source: Path) -> Path:
    """Where files derived from SOURCE go: beside it, or a per-file cache folder when that is read-only,
    or one in the temp folder when the cache cannot be written either (a read-only or missing HOME)."""
    if os.access(source.parent, os.W_OK):
        return source.parent
    key = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:16]
    for cache in (os.environ.get("XDG_CACHE_HOME") or Path("~/.cache").expanduser(),
                  Path(tempfile.gettempdir()) / f"nsight-cache-{os.getuid()}"):
        folder = Path(cache) / "nsight" / key
        with contextlib.suppress(OSError):  # a HOME that cannot be found stays "~": never the working folder
            if not folder.is_absolute():
                continue
            folder.mkdir(parents=True, exist_ok=True)
            if os.access(folder, os.W_OK | os.X_OK):
                return folder
    raise StatsError(f"cannot write the export of {source}: neither its folder, the cache folder nor the temp folder "
                     f"({tempfile.gettempdir()}) is writable; copy the trace to a writable folder")


def export_path(report: Path, kind: str) -> Path:
    """Where the KIND ('arrowdir', 'sqlite', 'sqlitedir' or 'parquetdir') export of REPORT lives."""
    return derived_dir(report) / (report.stem + _SUFFIXES[kind])


def _record_of(export: Path) -> Path:
    return export / _RECORD if export.is_dir() else export.with_name(export.name + ".nsight.json")


def _sizes(export: Path) -> dict[str, int]:
    if export.is_dir():
        files = [*export.glob("*.arrow"), *export.glob(SLICE_PATTERN), *export.glob(PARQUET_SLICE_PATTERN),
                 *export.glob(PARQUET_META)]
        return {path.relative_to(export).as_posix(): path.stat().st_size for path in sorted(files)}
    return {"file": export.stat().st_size}


def _version_of(report: Path) -> dict[str, int]:
    """REPORT's size and modification time: a report recorded again, or replaced, has others."""
    status = report.stat()
    return {"bytes": status.st_size, "mtime_ns": status.st_mtime_ns}


def is_current(export: Path, report: Path) -> bool:
    """EXPORT is complete (its record matches its files) and was made from REPORT as it is now."""
    try:
        recorded = json.loads(_record_of(export).read_text(encoding="utf-8"))
        return bool(recorded == {"report": _version_of(report), "files": _sizes(export)})
    except (OSError, ValueError):
        return False


def discard(export: Path) -> None:
    """Remove an export and its record (a damaged or outdated one)."""
    record = _record_of(export)
    if export.is_dir():
        shutil.rmtree(export, ignore_errors=True)
    else:
        export.unlink(missing_ok=True)
    record.unlink(missing_ok=True)


def export(report: Path, kind: str, nsys: Nsys | None = None, slices: int = 1) -> Path:
    """The current KIND export of REPORT: reused when complete and current, else made (atomically); in SLICES slices
    of time for the SLICED_KINDS (:func:`_export_sliced`)."""
    target = export_path(report, kind)
    if is_current(target, report):
        return target
    size, checked, processes = _slices_memory(report.stat().st_size, kind, slices)
    check_export_memory(size, checked, report.name, processes)
    _check_disk(report, target.parent)
    nsys = nsys or find_nsys()
    check_writer(report, nsys.version, nsys.path)  # a report newer than this nsys: one line, not its protobuf error
    # Temporary exports of processes killed mid-export: never renamed into place, they would keep a copy of the
    # trace's data on disk for good.
    for leftover in abandoned(target.parent, rf"\.{re.escape(target.stem)}\.(\d+)-[0-9a-f]{{8}}\.tmp"
                                             rf"{re.escape(target.suffix)}"):
        log.debug("removing %s, left by an interrupted export", leftover)
        discard(leftover)
    # Named as the loop above finds it; it keeps the type's suffix, which nsys adds to an output name without it.
    temporary = target.with_name(f".{target.stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp{target.suffix}")
    log.info("exporting %s (%s, once per capture)", report,
             f"{SLICED_KINDS[kind]} in {slices} slices of time side by side" if kind in SLICED_KINDS else kind)
    try:
        version = _version_of(report)  # before nsys reads it: a report rewritten meanwhile is not current
        try:
            if kind in SLICED_KINDS:
                _export_sliced(nsys, report, temporary, slices, SLICED_KINDS[kind])
            else:
                nsys.export(report, temporary, kind)
        except ExportDiskFullError as error:  # named by the folder the export goes to, not its temporary one
            raise ExportDiskFullError(report, target.parent) from error
        except NsysCommandError as error:
            raise explain_failure(report, nsys.version, nsys.path) or error from error
        record = {"report": version, "files": _sizes(temporary)}
        if is_current(target, report):
            # A concurrent export of the same report finished first: its files stay (another process may be reading
            # them), this one goes.
            return target
        discard(target)
        try:
            temporary.rename(target)
        except OSError:  # a concurrent export of the same report may have renamed into place first
            discard(target)
            temporary.rename(target)
        _record_of(target).write_text(json.dumps(record), encoding="utf-8")
    finally:
        with contextlib.suppress(OSError):
            discard(temporary)
    return target


EXPORT_DISK_PER_TRACE_BYTE = 2
"""The least disk an export takes per byte of the .nsys-rep: a folder with less free is refused before nsys spends its
time; one with more that still fills is nsys' disk-full error (:class:`ExportDiskFullError`)."""


def _check_disk(report: Path, folder: Path) -> None:
    try:
        size, free = report.stat().st_size, shutil.disk_usage(folder).free
    except OSError:  # a file system that cannot say: nsys' own error, should it fill
        return
    if EXPORT_DISK_PER_TRACE_BYTE * size > free:
        raise StatsError(f"exporting {report.name} takes at least {_size(EXPORT_DISK_PER_TRACE_BYTE * size)} in "
                         f"{folder} (2.5-10x the .nsys-rep's {_size(size)}) and it has {_size(free)} free: free some "
                         "space there, or pass a copy of the capture in a folder with more room.")


SLICED_KINDS = {"sqlitedir": "sqlite", "parquetdir": "parquetdir"}
"""The exports made in slices of time, and the nsys export each slice is."""


def _slices_memory(trace_bytes: int, kind: str, slices: int) -> tuple[int, str, int]:
    """What :func:`check_export_memory` is asked for a KIND export in SLICES: SQLite's memory does not grow with the
    events, so its slices are that many processes of a whole trace's; a Parquet slice holds its share of the events,
    and only as many run at once as there are cores."""
    if kind == "parquetdir":
        return -(-trace_bytes // slices), "arrowdir", min(slices, usable_cores())
    return trace_bytes, "sqlite" if kind == "sqlitedir" else kind, slices if kind == "sqlitedir" else 1


def _export_sliced(nsys: Nsys, report: Path, folder: Path, slices: int, kind: str = "sqlite") -> None:
    """REPORT's SQLite (KIND 'sqlite': part-000.sqlite, ...) or Parquet (KIND 'parquetdir': folders part-000, ...)
    export as SLICES parts in FOLDER, each the events that start in one slice of the capture's time, exported side by
    side, as many at once as this process has cores.

    Why: nsys' SQLite export is the one whose memory does not grow with the capture, and it is slow (one core writes
    every row). Its Parquet export is faster and holds what trace/spill.py would copy from SQLite, but holds its events
    whole: in slices, each holds its share. Each slice is one ``nsys export --times``, which decodes the whole report
    but writes only its events, so slices side by side take a fraction of one export's time where they hold as many
    events each. Slices of equal time seldom do (the window ends with nsys' own shutdown, a program's pace changes), so
    there are more slices than cores (``SLICES_PER_CORE``): a core that exported a light slice takes the next one.

    Exact: nsys keeps an event in a range when it starts there (the ranges' ends are loose: ``S/E:``), and the ranges
    meet without a gap or overlap (integer nanoseconds), so every event is in exactly one slice and tables without time
    (strings, threads, processes, GPUs) are whole in each. Read as one export (trace/sliced.py, trace/parquet.py), a
    table of events is its rows in every part, one part after the other, any other table the first part's. The cuts
    divide the collection window evenly: 0 to ANALYSIS_DETAILS' duration, from an export of that table alone (its
    startTime and stopTime are on another clock base); the first and last slices are open, so nothing before or after
    the window is lost."""
    folder.mkdir()
    probe = folder / "span.sqlite"
    # nsys' Parquet export leaves META_DATA_CAPTURE out (how the capture was recorded): kept from the probe.
    kept = ",^META_DATA_CAPTURE$,^StringIds$" if kind == "parquetdir" else ""
    nsys.export(report, probe, "sqlite", tables="^ANALYSIS_DETAILS$" + kept)
    with contextlib.closing(sqlite3.connect(f"file:{probe}?mode=ro", uri=True)) as connection:
        try:
            (duration,) = connection.execute('SELECT "duration" FROM ANALYSIS_DETAILS').fetchone() or (None,)
        except sqlite3.DatabaseError:
            duration = None
    if kind == "parquetdir":
        probe.rename(folder / PARQUET_META)
    else:
        probe.unlink()
    cuts = sorted({int(duration or 0) * part // slices for part in range(1, slices)} - {0})
    windows: list[str | None] = [f"{'' if low is None else low}/{'' if high is None else high - 1}:"
                                 for low, high in itertools.pairwise([None, *cuts, None])] if cuts else [None]
    with ThreadPoolExecutor(min(len(windows), usable_cores()), thread_name_prefix="nsight-export-slice") as pool:
        name = "part-{:03d}.sqlite" if kind == "sqlite" else "part-{:03d}"
        for done in [pool.submit(nsys.export, report, folder / name.format(part), kind, window)
                     for part, window in enumerate(windows)]:
            done.result()


STREAM_ABOVE_BYTES = 128 << 20
"""A .nsys-rep larger than this is exported to SQLite and its reports streamed from disk
(:mod:`nsight_core.trace.spill`) whatever the memory; up to it, only where nsys' arrow export would not fit the
memory allowed: below it, the arrow export is the faster read and fits a summary's memory."""
EVENT_BYTES_PER_TRACE_BYTE = 12
"""The event tables' bytes as Arrow (what a summary read whole grows with, memory.py) per byte of the .nsys-rep, the
largest seen (NVTX captures). Known before the export, so a capture whose frames might not fit read whole is streamed
from the start (where a streamed summary fits), not refused after its export."""
SLICE_ABOVE_BYTES = 8 << 20
"""A streamed capture's SQLite export is made in slices of time side by side (:func:`_export_sliced`) from this size of
.nsys-rep on, where there are cores for it: below, nsys' start and its decoding of the report for each slice outweigh
what the slices save."""
MAX_SLICES = 8
"""At most this many slices: each is an nsys process that decodes the whole report again."""
SLICES_PER_CORE = 2
"""Slices of time per core this process may use, where it may use more than one (:func:`_export_sliced`: the cores
that finish light slices take the others)."""
PARQUET_SLICE_BYTES = 16 << 20
"""A Parquet slice per this much .nsys-rep at least: each nsys process holds its slice's events whole, while one more
slice costs only one more decoding of the report (docs/performance.md)."""
ENV_EXPORT_SLICES = "NSIGHT_EXPORT_SLICES"
"""How many slices a streamed capture's export (Parquet or SQLite) is made in, where set (1: one piece), instead of
:func:`parquet_slices`' or :func:`export_slices`' choice."""


class ExportChoice(NamedTuple):
    """Which export a capture's events are read from, and why (the fields ``ExportRead`` reports). ``streamed``: its
    events scanned from Parquet on disk, because the trace is ``large`` (over ``stream_above_bytes``) or its arrow
    export, or its frames read whole, would not fit the ``memory`` allowed (``EVENT_BYTES_PER_TRACE_BYTE``); else read
    whole: the arrow export (``small``), or SQLite where this nsys has no arrow export (``no_arrowdir``)."""

    kind: str
    streamed: bool
    reason: str
    trace_bytes: int
    stream_above_bytes: int = STREAM_ABOVE_BYTES
    slices: int = 1


def export_choice(report: Path, nsys: Nsys | None = None) -> ExportChoice:
    """How REPORT's events are read (see :class:`ExportChoice`). A current arrow export of a trace small enough is
    used without asking nsys anything (not even for its version)."""
    size, stream_above = report.stat().st_size, STREAM_ABOVE_BYTES
    if size > stream_above:
        return _streamed(report, "large", size, nsys)
    if not fits(export_bytes(size, "arrowdir")) or (not fits(summary_bytes(EVENT_BYTES_PER_TRACE_BYTE * size))
                                                    and fits(summary_bytes(None))):
        return _streamed(report, "memory", size, nsys)
    arrow = is_current(export_path(report, "arrowdir"), report) or "arrowdir" in (nsys or find_nsys()).export_types
    return ExportChoice(kind="arrowdir" if arrow else "sqlite", streamed=False, reason="small" if arrow else
                        "no_arrowdir", trace_bytes=size, stream_above_bytes=stream_above)


def _streamed(report: Path, reason: str, size: int, nsys: Nsys | None) -> ExportChoice:
    """A streamed capture's choice: its export already made (Parquet or SQLite, sliced or not), else Parquet in the
    slices :func:`parquet_slices` gives, else SQLite in those :func:`export_slices` gives."""
    def chosen(kind: str, slices: int) -> ExportChoice:
        return ExportChoice(kind=kind, streamed=True, reason=reason, trace_bytes=size,
                            stream_above_bytes=STREAM_ABOVE_BYTES, slices=slices)

    for kind, pattern in (("parquetdir", "part-*/"), ("sqlitedir", SLICE_PATTERN)):
        if is_current(made := export_path(report, kind), report):
            return chosen(kind, len(list(made.glob(pattern))))
    if is_current(export_path(report, "sqlite"), report):
        return chosen("sqlite", 1)
    if parquet := parquet_slices(size, nsys):
        return chosen("parquetdir", parquet)
    slices = export_slices(size, nsys)
    return chosen("sqlitedir" if slices > 1 else "sqlite", slices)


def parquet_slices(trace_bytes: int, nsys: Nsys | None = None) -> int | None:
    """In how many slices of time a streamed capture of TRACE_BYTES is exported to Parquet: ``NSIGHT_EXPORT_SLICES``
    where set, else the fewest from :func:`_per_core` and one per ``PARQUET_SLICE_BYTES`` to ``MAX_SLICES`` whose nsys
    processes, as many at once as there are cores, fit the memory allowed; None (then SQLite) where none does, or this
    nsys' Parquet slices are not known to be read right (:attr:`nsight_core.nsys.Nsys.exports_parquet_slices`)."""
    if not (nsys or find_nsys()).exports_parquet_slices:
        return None
    wanted = _wanted_slices()
    fewest = min(max(_per_core(trace_bytes), -(-trace_bytes // PARQUET_SLICE_BYTES)), MAX_SLICES)
    for slices in [wanted] if wanted else range(fewest, MAX_SLICES + 1):
        share, kind, processes = _slices_memory(trace_bytes, "parquetdir", slices)
        if fits(export_bytes(share, kind, processes)):
            return slices
    return None


def _per_core(trace_bytes: int) -> int:
    """``SLICES_PER_CORE`` per usable core (at most ``MAX_SLICES``) where there are several and the trace is at least
    ``SLICE_ABOVE_BYTES``; else one."""
    cores = usable_cores()
    return min(cores * SLICES_PER_CORE, MAX_SLICES) if cores > 1 and trace_bytes >= SLICE_ABOVE_BYTES else 1


def _wanted_slices() -> int | None:
    wanted = os.environ.get(ENV_EXPORT_SLICES, "").strip()
    if wanted and (not wanted.isdigit() or int(wanted) < 1):
        raise StatsError(f"{ENV_EXPORT_SLICES}={wanted!r} is not a number of slices: set it to 1 (one SQLite "
                         f"file) or more, or unset it to use {SLICES_PER_CORE} slices per core (at most "
                         f"{MAX_SLICES}).")
    return int(wanted) if wanted else None


def export_slices(trace_bytes: int, nsys: Nsys | None = None) -> int:
    """How many slices of time a streamed capture of TRACE_BYTES is exported in: ``NSIGHT_EXPORT_SLICES`` where set,
    else :func:`_per_core`'s; fewer where their nsys processes would not fit the memory allowed; one where this nsys'
    slices are not known exact (:attr:`nsight_core.nsys.Nsys.exports_time_slices`)."""
    slices = _wanted_slices() or _per_core(trace_bytes)
    while slices > 1 and not fits(export_bytes(trace_bytes, "sqlite", slices)):
        slices -= 1
    return slices if slices == 1 or (nsys or find_nsys()).exports_time_slices else 1


def usable_cores(cgroups: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may run on: its CPU affinity, less where its cgroup's CPU quota allows fewer (a
    container's CPU limit: cgroup v2's cpu.max, v1's cpu.cfs_quota_us)."""
    cores = len(os.sched_getaffinity(0))
    for quota_file, read in ((cgroups / "cpu.max", lambda text: text.split()[:2]),
                             (cgroups / "cpu" / "cpu.cfs_quota_us", lambda text: [
                                 text.strip(), (cgroups / "cpu" / "cpu.cfs_period_us").read_text().strip()])):
        with contextlib.suppress(OSError, ValueError):
            quota, period = read(quota_file.read_text())
            if quota not in ("max", "-1"):
                cores = min(cores, max(1, int(quota) // int(period)))
    return cores


def capture_export(report: Path, nsys: Nsys | None = None) -> Path:
    """REPORT's export for reading its events, of the kind :func:`export_choice` picks."""
    return chosen_export(report, nsys)[1]


def chosen_export(report: Path, nsys: Nsys | None = None) -> tuple[ExportChoice, Path]:
    """REPORT's export of the kind :func:`export_choice` picks, and that choice; SQLite where nsys' Parquet export
    fails (a slice that holds more of the events than its share and runs out of memory, say): SQLite's memory does not
    grow with the events, and a summary is never lost to the faster export."""
    choice = export_choice(report, nsys)
    try:
        return choice, export(report, choice.kind, nsys, choice.slices)
    except NsysCommandError as error:
        if choice.kind != "parquetdir" or isinstance(error, ExportDiskFullError):
            raise
        log.warning("nsys' Parquet export of %s failed (%s); exporting it to SQLite instead", report.name,
                    one_line(error))
        slices = export_slices(choice.trace_bytes, nsys)
        choice = choice._replace(kind="sqlitedir" if slices > 1 else "sqlite", slices=slices)
        return choice, export(report, choice.kind, nsys, slices)


def export_ahead(reports: Iterable[Path]) -> dict[Path, Future[Path]]:
    """Start :func:`capture_export` of each of REPORTS, one after the other, in a background thread: nsys exports in a
    process of its own while Python imports Polars, pydantic and Altair, and the next capture's export runs behind
    this one's analysis. ``result()`` gives the export, or raises its error, in the caller's thread; ``load_trace``
    reuses the export it finds current."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsight-export")
    try:
        return {report: pool.submit(capture_export, report) for report in reports}
    finally:
        pool.shutdown(wait=False)
