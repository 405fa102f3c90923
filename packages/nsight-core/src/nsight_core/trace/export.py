"""Exports of a .nsys-rep, made once and reused only while they are complete and current.

An export is written under a temporary name and renamed into place when nsys has finished, then a
record is written beside it: the size and modification time of the report it was made from and the
size of each of its files. It is reused only when that record matches both the report as it is now and
the files on disk. Anything else (an interrupted export, a truncated or deleted file, a report recorded
again or replaced at the same path, a damaged file a user left beside it) is redone, never read as
"no data". Temporary folders that an interrupted export left behind are removed by the next export.

Exports go beside the report, or into a per-report cache folder when the report's folder is read-only.
The CLI starts a capture's export in a background thread before it imports Polars and the analyses
(:func:`export_ahead`), so nsys exports while Python imports.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from nsight_core.errors import NsysCommandError, StatsError
from nsight_core.memory import check_export_memory, export_fits, streamed_summary_fits, summary_fits
from nsight_core.nsys import Nsys, find_nsys
from nsight_core.trace.writer import check_writer, explain_failure

log = logging.getLogger("nsight")

REPORT_SUFFIXES = frozenset({".nsys-rep", ".qdrep"})
"""Trace files nsys writes; `.qdrep` is the name before 2021."""
ARROW_SUFFIX = ".arrowdir"
SQLITE_SUFFIX = ".sqlite"
_RECORD = ".nsight-export.json"
"""Inside an arrow directory: what it was made from and its files' sizes, written last. Beside a .sqlite:
<name>.nsight.json."""


def is_event_source(path: Path) -> bool:
    """PATH holds events (a trace, an SQLite export or an arrow-directory export), not recorded CSVs."""
    if path.suffix in REPORT_SUFFIXES or path.suffix == SQLITE_SUFFIX:
        return True
    return path.is_dir() and any(path.glob("*.arrow"))


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
    """Where the KIND ('arrowdir' or 'sqlite') export of REPORT lives."""
    return derived_dir(report) / (report.stem + (ARROW_SUFFIX if kind == "arrowdir" else SQLITE_SUFFIX))


def _record_of(export: Path) -> Path:
    return export / _RECORD if export.is_dir() else export.with_name(export.name + ".nsight.json")


def _sizes(export: Path) -> dict[str, int]:
    if export.is_dir():
        return {path.name: path.stat().st_size for path in sorted(export.glob("*.arrow"))}
    return {"file": export.stat().st_size}


def _version_of(report: Path) -> dict[str, int]:
    """REPORT's size and modification time: a report recorded again, or replaced, has others."""
    status = report.stat()
    return {"bytes": status.st_size, "mtime_ns": status.st_mtime_ns}


def _record(report: dict[str, int], export: Path) -> dict[str, Any]:
    return {"report": report, "files": _sizes(export)}


def is_current(export: Path, report: Path) -> bool:
    """EXPORT is complete (its record matches its files) and was made from REPORT as it is now."""
    try:
        recorded = json.loads(_record_of(export).read_text(encoding="utf-8"))
        return bool(recorded == _record(_version_of(report), export))
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


def _temporary(target: Path) -> Path:
    # nsys adds the type's suffix to an output name without it: the temporary name keeps it.
    return target.with_name(f".{target.stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp{target.suffix}")


def _remove_abandoned(target: Path) -> None:
    """Remove temporary exports of TARGET whose process is gone (killed mid-export): they are never
    renamed into place and would otherwise keep a copy of the trace's data on disk for good."""
    pattern = re.compile(rf"\.{re.escape(target.stem)}\.(\d+)-[0-9a-f]{{8}}\.tmp{re.escape(target.suffix)}")
    for leftover in target.parent.glob(f".{target.stem}.*.tmp{target.suffix}"):
        match = pattern.fullmatch(leftover.name)
        if match is None or int(match.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            log.debug("removing %s, left by an interrupted export", leftover)
            discard(leftover)
        except OSError:  # the process exists (another user's): its export may still be running
            continue


def export(report: Path, kind: str, nsys: Nsys | None = None) -> Path:
    """The current KIND export of REPORT: reused when complete and current, else made (atomically)."""
    target = export_path(report, kind)
    if is_current(target, report):
        return target
    check_export_memory(report.stat().st_size, kind, report.name)
    nsys = nsys or find_nsys()
    check_writer(report, nsys.version, nsys.path)  # a report newer than this nsys: one line, not its protobuf error
    _remove_abandoned(target)
    temporary = _temporary(target)
    log.info("exporting %s (%s, once per capture)", report, kind)
    try:
        version = _version_of(report)  # before nsys reads it: a report rewritten meanwhile is not current
        try:
            nsys.export(report, temporary, kind)
        except NsysCommandError as error:
            raise explain_failure(report, nsys.version, nsys.path) or error from error
        record = _record(version, temporary)
        for attempt in (1, 2):  # a concurrent export of the same report may have renamed into place first
            discard(target)
            try:
                temporary.rename(target)
                break
            except OSError:
                if attempt == 2:
                    raise
        _record_of(target).write_text(json.dumps(record), encoding="utf-8")
    finally:
        with contextlib.suppress(OSError):
            discard(temporary)
    return target


STREAM_ABOVE_BYTES = 128 << 20
"""A .nsys-rep larger than this is exported to SQLite and its reports streamed from disk
(:mod:`nsight_core.trace.spill`) whatever the memory; up to it, only where nsys' arrow export would not fit the
memory allowed. Read whole (arrow export, frames in memory), 10 M NVTX ranges (a 111 MB trace) peaked at 1.7 GB,
under the 2 GiB a summary may take, and ran 2-4x faster than streamed with the same whole-frame summary
(docs/memory.md)."""


EVENT_BYTES_PER_TRACE_BYTE = 12
"""The event tables' bytes as Arrow (what a summary read whole grows with, memory.py) per byte of the .nsys-rep, the
largest measured: 10.5x (1 M NVTX ranges) and 11.4x (10 M); 0.6-1.9x on the GPU fixtures. Known before the export,
so a capture whose frames might not fit read whole is streamed from the start (where a streamed summary fits), not
refused after its export."""


class ExportChoice(NamedTuple):
    """Which export a capture's events are read from, and why. ``streamed``: SQLite, its reports, summary and
    completeness streamed from Parquet on disk, because the trace is ``large`` (over ``stream_above_bytes``) or its
    arrow export, or its frames read whole, would not fit the ``memory`` allowed (:mod:`nsight_core.memory`,
    ``EVENT_BYTES_PER_TRACE_BYTE``); else read whole: the arrow export (``small``), or SQLite where this nsys has no
    arrow export (``no_arrowdir``)."""

    kind: str
    streamed: bool
    reason: str
    trace_bytes: int
    stream_above_bytes: int = STREAM_ABOVE_BYTES


def export_choice(report: Path, nsys: Nsys | None = None) -> ExportChoice:
    """How REPORT's events are read (see :class:`ExportChoice`). A current arrow export of a trace small enough is
    used without asking nsys anything (not even for its version)."""
    size, stream_above = report.stat().st_size, STREAM_ABOVE_BYTES
    if size > stream_above:
        return ExportChoice("sqlite", True, "large", size, stream_above)
    if not export_fits(size, "arrowdir") or (not summary_fits(EVENT_BYTES_PER_TRACE_BYTE * size)
                                             and streamed_summary_fits()):
        return ExportChoice("sqlite", True, "memory", size, stream_above)
    if is_current(export_path(report, "arrowdir"), report) or "arrowdir" in (nsys or find_nsys()).export_types:
        return ExportChoice("arrowdir", False, "small", size, stream_above)
    return ExportChoice("sqlite", False, "no_arrowdir", size, stream_above)


def capture_export(report: Path, nsys: Nsys | None = None) -> Path:
    """REPORT's export for reading its events, of the kind :func:`export_choice` picks."""
    return export(report, export_choice(report, nsys).kind, nsys)


def export_ahead(reports: Iterable[Path]) -> dict[Path, Future[Path]]:
    """Start :func:`capture_export` of each of REPORTS, one after the other, in a background thread.

    Why: a fresh capture's export is nsys' work, in a process of its own, and it takes as long as
    importing Polars, pydantic and Altair and more (0.5-1.2 s for 200 k kernels or 1 M NVTX ranges). Run
    side by side, the import is hidden, and so is the next capture's export behind this one's analysis.
    ``result()`` gives the export, or raises its error, in the caller's thread; the export found current
    there is reused by ``load_trace``.
    """
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsight-export")
    try:
        return {report: pool.submit(capture_export, report) for report in reports}
    finally:
        pool.shutdown(wait=False)
