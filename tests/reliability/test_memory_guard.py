"""A summary that would not fit in the process's memory is refused before any event is read, with both numbers.

The limits are read from the kernel's own files (/proc/meminfo, the cgroup v1 and v2 memory controllers).
This machine cannot be given a cgroup limit by a test, so those cases lay the files out as the kernel
does in a folder of their own; what the real machine reports is checked as well. The refusal itself
runs through `nsight report` on a real capture (the Flyte task's case is in test_faults.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nsight_core import NotEnoughMemoryError
from nsight_core.memory import (
    SUMMARY_BYTES_PER_STORED_BYTE,
    check_summary_memory,
    export_bytes,
    headroom_bytes,
    parse_size,
    summary_bytes,
)
from nsight_core.trace.export import export
from nsight_core.trace.load import load_trace
from nsight_core.trace.model import Trace

pytestmark = pytest.mark.reliability

CAPTURE = Path(__file__).resolve().parent.parent / "fixtures" / "h200-diagnosis" / "diagnosis.nsys-rep"
GIB = 1 << 30


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    """The recorded H200 capture's events, from a private copy (exported by the real nsys)."""
    copy = tmp_path_factory.mktemp("guard") / CAPTURE.name
    shutil.copyfile(CAPTURE, copy)
    return load_trace(copy)


def lay_out(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_host_memory_only(tmp_path: Path) -> None:
    lay_out(tmp_path, {"proc/meminfo": "MemTotal:       24683568 kB\nMemAvailable:    8388608 kB\n",
                       "proc/self/cgroup": "a line of no cgroup\n0::/\n"})
    assert headroom_bytes(tmp_path / "proc", tmp_path / "cgroup") == 8 * GIB


def test_cgroup_v2_the_tightest_level_counts_and_file_cache_is_reclaimable(tmp_path: Path) -> None:
    """A Kubernetes pod: the pod's level has the limit, the container's says max; inactive file cache is
    given back under pressure, so it is not counted as held."""
    pod, container = "cgroup/kubepods/pod1", "cgroup/kubepods/pod1/ctr"
    lay_out(tmp_path, {
        "proc/meminfo": "MemAvailable:   16777216 kB\n",
        "proc/self/cgroup": "0::/kubepods/pod1/ctr\n",
        "cgroup/memory.max": "max\n",  # the root has none
        f"{pod}/memory.max": f"{2 * GIB}\n", f"{pod}/memory.current": f"{GIB + GIB // 2}\n",
        f"{pod}/memory.stat": f"anon 1000\ninactive_file {GIB // 4}\n",
        f"{container}/memory.max": "max\n", f"{container}/memory.current": f"{GIB}\n",
    })
    assert headroom_bytes(tmp_path / "proc", tmp_path / "cgroup") == GIB // 2 + GIB // 4


def test_cgroup_v1_limit_over_the_hierarchy(tmp_path: Path) -> None:
    lay_out(tmp_path, {
        "proc/meminfo": "MemAvailable:   16777216 kB\n",
        "proc/self/cgroup": "5:cpu:/\n4:memory:/docker/abc\n0::/\n",
        "cgroup/memory/docker/abc/memory.limit_in_bytes": "9223372036854771712\n",
        "cgroup/memory/docker/abc/memory.stat": f"hierarchical_memory_limit {4 * GIB}\ntotal_inactive_file 0\n",
        "cgroup/memory/docker/abc/memory.usage_in_bytes": f"{3 * GIB}\n",
    })
    assert headroom_bytes(tmp_path / "proc", tmp_path / "cgroup") == GIB


def test_cgroup_v1_without_a_limit_leaves_the_host(tmp_path: Path) -> None:
    lay_out(tmp_path, {
        "proc/meminfo": "MemAvailable:   1048576 kB\n",
        "proc/self/cgroup": "4:memory:/\n",
        "cgroup/memory/memory.stat": "hierarchical_memory_limit 9223372036854771712\n",
        "cgroup/memory/memory.usage_in_bytes": "5000\n",
    })
    assert headroom_bytes(tmp_path / "proc", tmp_path / "cgroup") == GIB


def test_nothing_readable_is_no_limit(tmp_path: Path) -> None:
    assert headroom_bytes(tmp_path / "proc", tmp_path / "cgroup") is None


def test_this_machine() -> None:
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    total = int(meminfo["MemTotal"].split()[0]) * 1024
    headroom = headroom_bytes()
    assert headroom is not None and 0 < headroom <= total


@pytest.mark.parametrize(("text", "count"), [("2G", 2 * GIB), ("512M", 512 << 20), ("1.5GiB", 3 * GIB // 2),
                                             ("1048576", 1 << 20), ("64 kb", 64 << 10)])
def test_sizes(text: str, count: int) -> None:
    assert parse_size(text) == count


def test_a_size_that_is_none_says_how_to_write_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "lots")
    with pytest.raises(Exception, match=r"NSIGHT_SUMMARY_MEMORY='lots' is not a size: write it as 2G, 512M"):
        check_summary_memory(1, "t.nsys-rep")


@pytest.mark.nsys
def test_the_estimate_grows_with_the_events(trace: Trace) -> None:
    """Above what a summary of the recorded H200 capture took (53 MB above the imports),
    and SUMMARY_BYTES_PER_STORED_BYTE times the bytes of any more events."""
    assert trace.event_bytes > 0
    assert summary_bytes(trace.event_bytes) > 53 << 20
    grown = summary_bytes(2 * trace.event_bytes) - summary_bytes(trace.event_bytes)
    assert grown == SUMMARY_BYTES_PER_STORED_BYTE * trace.event_bytes >= 5 * trace.event_bytes


@pytest.mark.nsys
def test_a_sqlite_export_is_estimated_as_arrow(trace: Trace) -> None:
    """SQLite stores integers in fewer bytes than Arrow: its pages are scaled, not taken as they are."""
    assert trace.report is not None
    sqlite = load_trace(export(trace.report, "sqlite"))
    assert trace.event_bytes / 2 < sqlite.event_bytes < trace.event_bytes * 2


@pytest.mark.nsys
def test_a_limit_below_the_estimate_refuses_and_off_allows(trace: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    needed = summary_bytes(trace.event_bytes)
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", str(needed - 1))
    with pytest.raises(NotEnoughMemoryError):
        check_summary_memory(trace.event_bytes, "diagnosis")
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", str(needed))
    check_summary_memory(trace.event_bytes, "diagnosis")
    monkeypatch.setenv("NSIGHT_SUMMARY_MEMORY", "off")
    check_summary_memory(1 << 50, "diagnosis")


def report(capture: Path, page: Path, limit: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nsight_core.cli", "report", str(capture), "-o", str(page)],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, "NSIGHT_SUMMARY_MEMORY": limit})


@pytest.mark.nsys
def test_nsight_report_refuses_an_export_or_a_summary_that_does_not_fit(tmp_path: Path) -> None:
    """Each step is checked before it starts: nsys' arrow export from the trace's size (no export is made when it
    would not fit), the summary from the export's tables; with the check off the page is made."""
    capture = tmp_path / "diagnosis.nsys-rep"
    shutil.copyfile(CAPTURE, capture)
    page, export = tmp_path / "page.html", tmp_path / "diagnosis.arrowdir"
    assert export_bytes(capture.stat().st_size) < 64 << 20 < summary_bytes(0)
    for limit, step in (("16M", "exporting diagnosis.nsys-rep for its summary"),
                        ("64M", "summarising diagnosis.nsys-rep")):
        refused = report(capture, page, limit)
        assert refused.returncode == 1, refused.stderr
        [error] = [line for line in refused.stderr.splitlines() if line.startswith("nsight: error:")]
        assert f"{step} needs about" in error and f"NSIGHT_SUMMARY_MEMORY={limit} allows {limit[:-1]}.00 MiB" in error
        assert "NSIGHT_SUMMARY_MEMORY=off" in error and not page.exists()
        assert export.exists() == (limit == "64M")  # the export is made only when it fits, and then kept
    assert capture.exists()
    allowed = report(capture, page, "off")
    assert allowed.returncode == 0, allowed.stderr
    assert "What to fix" in page.read_text()
