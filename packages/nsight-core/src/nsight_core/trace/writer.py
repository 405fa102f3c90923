"""Which nsys wrote a .nsys-rep, read from the file itself: a report newer than the nsys installed here fails its
export with nsys' own protobuf error ("Can't parse message of type QuadDAnalysis.Data.SessionState because it is
missing required fields"), which says nothing about versions. Read first, the version gives one line instead: who
wrote it, who is here, and the way out.

A .nsys-rep ends with its session record, a protobuf message holding the capture's start time, the host's name and the
writing nsys' version, each a length-prefixed string: ``*`` (field 5) host, ``2`` (field 6) version, as nsys prints it
(reports of nsys 2025.3 and 2023.4.4: "2025.3.1.0", "2023.4.4.54-234433681190v0"). Standard library only: the CLI
checks before it loads Polars."""

from __future__ import annotations

import re
from pathlib import Path

from nsight_core.errors import ReportTooNewError

TAIL_BYTES = 1 << 16
"""How much of a report's end is searched for its session record."""
_SESSION_RECORD = re.compile(
    rb"\*(?P<host_size>[\x00-\x7f])(?P<host>[^\x00]*?)2(?P<size>[\x05-\x40])(?P<version>20\d\d\.\d{1,2}\.\d+[0-9A-Za-z.\-]*)")
_RELEASE = re.compile(r"(\d{4})\.(\d+)")


def writer_version(report: Path) -> str | None:
    """The version of the nsys that wrote REPORT, or None where the file has no session record we know."""
    try:
        with report.open("rb") as stream:
            size = stream.seek(0, 2)
            stream.seek(max(0, size - TAIL_BYTES))
            tail = stream.read()
    except OSError:
        return None
    for found in _SESSION_RECORD.finditer(tail):
        version = found.group("version")
        if found.group("size")[0] == len(version) and found.group("host_size")[0] == len(found.group("host")):
            return version.decode("ascii")
    return None


def release(version: str) -> tuple[int, int] | None:
    """(year, release) of an nsys version: 2025.3.1.0 -> (2025, 3)."""
    found = _RELEASE.match(version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def too_new(report: Path, writer: str, installed: str, nsys_path: Path) -> ReportTooNewError:
    """The one line for REPORT, written by nsys WRITER, that the INSTALLED nsys cannot read."""
    wanted = ".".join(str(part) for part in release(writer) or ()) or writer
    return ReportTooNewError(
        f"{report} was written by nsys {writer}, newer than the nsys installed here ({installed}, {nsys_path}), which "
        f"cannot read it: set NSIGHT_NSYS to nsys {wanted} or newer, or pass the report's .sqlite or .arrowdir export "
        f"(nsys export --type sqlite {report.name}, where nsys {wanted} is), which nsight stats and nsight report read")


def check_writer(report: Path, installed: str, nsys_path: Path) -> None:
    """Refuse, before exporting, a REPORT whose writer's release is newer than the INSTALLED nsys' release."""
    writer = writer_version(report)
    if writer is None:
        return
    written, here = release(writer), release(installed)
    if written is not None and here is not None and written > here:
        raise too_new(report, writer, installed, nsys_path)


def explain_failure(report: Path, installed: str, nsys_path: Path) -> ReportTooNewError | None:
    """After a failed export of REPORT: the version skew, where a newer nsys wrote it (any newer build), else None."""
    writer = writer_version(report)
    if writer is None or writer.split("-")[0] == installed.split("-")[0]:
        return None
    newer = [int(part) for part in re.findall(r"\d+", writer.split("-")[0])] > \
            [int(part) for part in re.findall(r"\d+", installed.split("-")[0])]
    return too_new(report, writer, installed, nsys_path) if newer else None
