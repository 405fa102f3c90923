"""A report newer than the nsys installed here: one line saying which nsys wrote it, which one is here, and the
way out, instead of nsys' protobuf error. Real reports (nsys 2025.3 on the H200) and the real local nsys 2023.4.4.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from capture_helpers import nsight_here

from nsight_core.errors import NsysCommandError, ReportTooNewError
from nsight_core.nsys import Nsys
from nsight_core.trace.writer import check_writer, explain_failure, writer_version

pytestmark = pytest.mark.nsys

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NEWER = FIXTURES / "h200-fix-pairs-2025" / "graph-fixed.nsys-rep"


def test_the_writer_of_every_fixture_is_read_from_the_file() -> None:
    versions = {report.relative_to(FIXTURES).as_posix(): writer_version(report)
                for report in FIXTURES.glob("*/*.nsys-rep")}
    assert len(versions) >= 40
    for name, version in versions.items():
        assert version == ("2025.3.1.0" if "2025" in name.split("/")[0] else "2023.4.4.54-234433681190v0"), name


def test_a_file_without_a_session_record_has_no_writer(tmp_path: Path) -> None:
    text = tmp_path / "notes.nsys-rep"
    text.write_text("not a report\n" * 100, encoding="utf-8")
    assert writer_version(text) is None and writer_version(tmp_path / "missing.nsys-rep") is None


def run_nsight(*args: str) -> subprocess.CompletedProcess[str]:
    return nsight_here(*args)


@pytest.mark.parametrize("command", ["stats", "report"])
def test_a_newer_report_gets_one_line_and_the_way_out(command: str, nsys: Nsys, tmp_path: Path) -> None:
    report = Path(shutil.copyfile(NEWER, tmp_path / NEWER.name))
    done = run_nsight(command, str(report), *(["-o", str(tmp_path / "page.html")] if command == "report" else []))
    assert done.returncode == 1
    [line] = [said for said in done.stderr.splitlines() if said.startswith("nsight: error")]  # report says "reading"
    assert "protobuf" not in done.stderr.lower() and "Traceback" not in done.stderr
    assert line.startswith(
        f"nsight: error: {report} was written by nsys 2025.3.1.0, newer than the nsys installed here ({nsys.version}, "
        f"{nsys.path}), which cannot read it: set NSIGHT_NSYS to nsys 2025.3 or newer, or pass the report's .sqlite "
        "or .arrowdir export (nsys export --type sqlite graph-fixed.nsys-rep, where nsys 2025.3 is), which nsight "
        "stats and nsight report read")  # `report` adds which page it leaves out
    assert sorted(p.name for p in tmp_path.iterdir()) == [NEWER.name]  # nothing half-exported left behind
    # the way out it names: the export nsys 2025.3 made of the same capture
    export = Path(shutil.copyfile(NEWER.with_suffix(".sqlite"), tmp_path / "graph-fixed.sqlite"))
    assert run_nsight("stats", str(export)).returncode == 0


def test_the_failure_itself_is_explained(nsys: Nsys, tmp_path: Path) -> None:
    """nsys 2023.4.4 exporting the 2025.3 report fails with its protobuf error; that failure gets the same line."""
    report = Path(shutil.copyfile(NEWER, tmp_path / NEWER.name))
    with pytest.raises(NsysCommandError, match=r"protobuf|ProtobufParseException"):
        nsys.export(report, tmp_path / "out.sqlite", "sqlite")
    explained = explain_failure(report, nsys.version, nsys.path)
    assert isinstance(explained, ReportTooNewError)
    assert f"written by nsys 2025.3.1.0, newer than the nsys installed here ({nsys.version}" in str(explained)
    with pytest.raises(ReportTooNewError):
        check_writer(report, nsys.version, nsys.path)


def test_a_report_of_this_nsys_passes(nsys: Nsys) -> None:
    older = FIXTURES / "h200-fix-pairs" / "graph-fixed.nsys-rep"
    check_writer(older, nsys.version, nsys.path)
    assert explain_failure(older, nsys.version, nsys.path) is None
