"""Exports of a .nsys-rep, made once and reused only while they are complete and current.

An export is written under a temporary name and renamed into place when nsys has finished, with a
record of its files' sizes; it is reused only when that record is there, is newer than the report and
matches the files on disk. Anything else (an interrupted export, a truncated file, an export older than
the report, a damaged file a user left beside it) is redone, never read as "no data".

Exports go beside the report, or into a per-report cache folder when the report's folder is read-only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from pathlib import Path

from nsight_core.nsys import Nsys, find_nsys

log = logging.getLogger("nsight")

ARROW_SUFFIX = ".arrowdir"
SQLITE_SUFFIX = ".sqlite"
_RECORD = ".nsight-export.json"
"""Inside an arrow directory: its files' sizes, written last. Beside a .sqlite: <name>.nsight.json."""


def derived_dir(source: Path) -> Path:
    """Where files derived from SOURCE go: beside it, or a per-file cache folder when that is read-only."""
    if os.access(source.parent, os.W_OK):
        return source.parent
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nsight"
    folder = cache / hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def export_path(report: Path, kind: str) -> Path:
    """Where the KIND ('arrowdir' or 'sqlite') export of REPORT lives."""
    return derived_dir(report) / (report.stem + (ARROW_SUFFIX if kind == "arrowdir" else SQLITE_SUFFIX))


def _record_of(export: Path) -> Path:
    return export / _RECORD if export.is_dir() else export.with_name(export.name + ".nsight.json")


def _sizes(export: Path) -> dict[str, int]:
    if export.is_dir():
        return {path.name: path.stat().st_size for path in sorted(export.glob("*.arrow"))}
    return {export.name: export.stat().st_size}


def is_current(export: Path, report: Path) -> bool:
    """EXPORT is complete (its record matches its files) and not older than REPORT."""
    record = _record_of(export)
    try:
        if record.stat().st_mtime < report.stat().st_mtime:
            return False
        return bool(json.loads(record.read_text(encoding="utf-8")) == _sizes(export))
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


def export(report: Path, kind: str, nsys: Nsys | None = None) -> Path:
    """The current KIND export of REPORT: reused when complete and current, else made (atomically)."""
    target = export_path(report, kind)
    if is_current(target, report):
        return target
    nsys = nsys or find_nsys()
    # nsys adds the type's suffix to an output name without it: the temporary name keeps it.
    temporary = target.with_name(f".{target.stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp{target.suffix}")
    log.info("exporting %s (%s, once per capture)", report, kind)
    try:
        nsys.export(report, temporary, kind)
        for attempt in (1, 2):  # a concurrent export of the same report may have renamed into place first
            discard(target)
            try:
                temporary.rename(target)
                break
            except OSError:
                if attempt == 2:
                    raise
        _record_of(target).write_text(json.dumps(_sizes(target)), encoding="utf-8")
    finally:
        discard(temporary)
    return target
