"""Finding nsys, its failures, `nsight launch`'s fallback, and stats from real exports."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from nsight_core import DEFAULT_REPORTS, NsysNotFoundError, NsysPermissionError, Session, load_stats
from nsight_core.nsys import Nsys, find_nsys
from nsight_core.supervise import end_leftover_agents


def _fake_nsys(directory: Path, body: str) -> Path:
    """A stand-in nsys, only for faults the real one cannot be made to produce here."""
    directory.mkdir(parents=True, exist_ok=True)
    fake = directory / "nsys"
    fake.write_text("#!/bin/sh\n" + body)
    fake.chmod(0o755)
    return fake


def _no_nsys_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NSIGHT_")}
    env["PATH"] = os.path.dirname(sys.executable) + ":/usr/bin:/bin"
    env["NSIGHT_NSYS_PREFIX"] = str(tmp_path / "nowhere")
    return env


def test_missing_nsys_error_names_all_three_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in _no_nsys_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("NSIGHT_NSYS", str(tmp_path / "missing-nsys"))
    with pytest.raises(NsysNotFoundError) as info:
        find_nsys()
    message = str(info.value)
    assert "$NSIGHT_NSYS" in message and "nsys on PATH" in message and "installer location" in message
    assert "scripts/install-nsys.sh" in message


def test_nsight_nsys_variable_wins(tmp_path: Path, nsys: Nsys, monkeypatch: pytest.MonkeyPatch) -> None:
    link = tmp_path / "bin" / "nsys"
    link.parent.mkdir()
    link.symlink_to(nsys.path)
    monkeypatch.setenv("NSIGHT_NSYS", str(link))
    assert find_nsys().path == link


def test_permission_failure_carries_the_remedies(tmp_path: Path) -> None:
    fake = _fake_nsys(tmp_path / "bin", 'case "$1" in --version) echo "NVIDIA Nsight Systems version 2023.4.4.54";;\n'
                      '*) echo "ERROR: ERR_NVGPUCTRPERM - insufficient privileges" >&2; exit 1;; esac\n')
    nsys = Nsys(fake, "2023.4.4.54")
    with pytest.raises(NsysPermissionError) as info:
        nsys.stop("any")
    message = str(info.value)
    assert "allow_nested_sandboxing" in message
    assert "NVreg_RestrictProfilingToAdminUsers=0" in message
    assert "osrt" in message


def _launch_folders(session: str) -> list[Path]:
    """The temp folders `nsight launch --session SESSION` made and left (it names them SESSION-<random>)."""
    return list((Path(tempfile.gettempdir()) / "nsight").glob(f"{session}-*"))


def test_launch_without_nsys_runs_the_command_unprofiled(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("import nsight_core\nwith nsight_core.range('r'):\n    print('job ran')\n")
    session = f"s1-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([sys.executable, "-m", "nsight_core.cli", "launch", "--session", session, "--",
                           sys.executable, str(script)], env=_no_nsys_env(tmp_path), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout.strip() == "job ran"
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "runs unprofiled" in warnings[0] and "No usable nsys" in warnings[0]
    assert _launch_folders(session) == []  # the folder made for its traces, empty, is gone


@pytest.mark.nsys
def test_a_launch_that_records_nothing_leaves_no_folder(tmp_path: Path, nsys: Nsys) -> None:
    """A task that opened no region: its launch wrote no trace, and leaves no empty folder in the temp folder."""
    session = f"empty-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([sys.executable, "-m", "nsight_core.cli", "launch", "--session", session, "--trace", "nvtx",
                           "--", sys.executable, "-c", "print('job ran')"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "job ran", done.stderr
    assert _launch_folders(session) == []


@pytest.mark.nsys
def test_launch_with_nsys_records_regions(tmp_path: Path, nsys: Nsys) -> None:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import nvtx, nsight_core
        with nsight_core.range("region one"):
            with nvtx.annotate("x"):
                pass
        print("job ran")
    """))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "nsight_core.cli", "launch", "--session", "run-1/action a0",
                           "--trace", "nvtx", "--output-dir", str(out), "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "job ran" in done.stdout
    assert sorted(p.name for p in out.glob("*.nsys-rep")) == ["region_one.nsys-rep"]


@pytest.mark.nsys
def test_stats_of_the_h200_trace_equal_its_recorded_csvs(h200_copy: Path, nsys: Nsys) -> None:
    recorded = {}
    with (h200_copy / "training_cuda_gpu_kern_sum.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            recorded[row["Name"]] = (int(row["Instances"]), int(row["Total Time (ns)"]))
    target = h200_copy / "fresh"
    target.mkdir()
    (h200_copy / "training.nsys-rep").rename(target / "training.nsys-rep")
    stats = load_stats(target / "training.nsys-rep")
    assert {k.name: (k.instances, k.total_time_ns) for k in stats.kernels} == recorded
    assert len(stats.nvtx_ranges) == 20 and stats.skipped == {}
    # The default reports come from ONE arrow export; no SQLite export, no `nsys stats`.
    assert sorted(p.name for p in target.iterdir()) == ["training.arrowdir", "training.nsys-rep"]
    arrow = target / "training.arrowdir"
    mtime = arrow.stat().st_mtime_ns
    again = load_stats(target / "training.nsys-rep", ["cuda_api_sum", "nvtxppsum", "no_such_report",
                                                      "cuda_gpu_kern_gb_sum"])
    assert arrow.stat().st_mtime_ns == mtime, "the export must be reused, not redone"
    assert again.api_calls and len(again.nvtx_ranges) == 20
    assert len(again.other["cuda_gpu_kern_gb_sum"]) >= 14, "a report beyond the five runs through nsys stats"
    assert (target / "training.sqlite").is_file(), "...on an SQLite export made for it"
    assert again.skipped == {"no_such_report": "unknown report: this nsys (2023.4.4.54) has no report named "
                                                "'no_such_report'"}


@pytest.mark.nsys
def test_cpu_capture_skips_cuda_reports_with_reason(tmp_path: Path, nsys: Nsys) -> None:
    script = tmp_path / "job.py"
    script.write_text("import nvtx, nsight_core\nwith nsight_core.range('r'):\n    nvtx.push_range('p')\n"
                      "    nvtx.pop_range()\n")
    result = Session(trace=("nvtx",), output_dir=tmp_path / "o").run([sys.executable, str(script)])
    assert result.reports, result.diagnosis  # a CI run once got none: say why (nsys' own words)
    stats = load_stats(result.reports[0])
    assert [(r.name, r.instances) for r in stats.nvtx_ranges] == [("p", 1)]
    assert set(stats.skipped) == {"cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
                                  "cuda_api_sum"}
    assert "does not contain CUDA" in stats.skipped["cuda_gpu_kern_sum"]


@pytest.mark.nsys
def test_stats_never_overwrite_recorded_csvs_beside_the_trace(h200_copy: Path, nsys: Nsys) -> None:
    recorded = h200_copy / "training_cuda_gpu_kern_sum.csv"
    recorded.write_text(recorded.read_text() + "\n")
    before = recorded.read_bytes()
    stats = load_stats(h200_copy / "training.nsys-rep", [*DEFAULT_REPORTS, "cuda_gpu_kern_gb_sum"])
    assert recorded.read_bytes() == before
    # What `nsys stats` wrote is kept in a folder of its own, in the layout recorded CSVs load from.
    again = load_stats(h200_copy / "training.stats" / "training", ["cuda_gpu_kern_gb_sum"])
    assert again.other["cuda_gpu_kern_gb_sum"] == stats.other["cuda_gpu_kern_gb_sum"]
    # The folder itself, as `make demo` tells users to pass it: it holds only a report whose name does not say
    # where its prefix ends (it said "holds recorded CSVs of 0 captures" before).
    assert sorted(path.name for path in (h200_copy / "training.stats").iterdir()) == [
        "training_cuda_gpu_kern_gb_sum.csv"]
    folder = load_stats(h200_copy / "training.stats")
    assert folder.other["cuda_gpu_kern_gb_sum"] == stats.other["cuda_gpu_kern_gb_sum"]


@pytest.mark.nsys
def test_launch_with_settings_nsys_rejects_runs_unprofiled(tmp_path: Path, nsys: Nsys) -> None:
    """A trace domain this nsys does not know must cost the profile, not the job."""
    done = subprocess.run([sys.executable, "-m", "nsight_core.cli", "launch", "--session", "s2", "--trace",
                           "nvtx,not_a_domain", "--output-dir", str(tmp_path / "o"), "--",
                           sys.executable, "-c", "print('job ran')"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout.strip() == "job ran"
    assert done.stderr.count("\n") == 1, "one warning line"
    assert "WARNING" in done.stderr and "Illegal --trace argument 'not_a_domain'" in done.stderr


def test_an_agent_left_behind_by_nsys_is_ended(tmp_path: Path) -> None:
    """What nsys 2023.4.4 sometimes leaves after SIGTERM to nsys or a lost agent: a daemon named by its
    session, holding the command's stdout. Stand-ins with the agent's command line (one that ignores
    SIGTERM); another session's agent is left alone."""
    ignore_term = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    ours, theirs = (subprocess.Popen([sys.executable, "-c", ignore_term, "--start-agent", f"--session-name={name}"])
                    for name in ("nsight-left-1", "nsight-other-1"))
    deadline = time.monotonic() + 30  # a fresh child may not have exec'd its command line yet (a loaded machine)
    while not all(b"--start-agent" in Path(f"/proc/{p.pid}/cmdline").read_bytes() for p in (ours, theirs)) \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert end_leftover_agents("nsight-left-1", grace=0.5) == [ours.pid]
        assert not Path(f"/proc/{ours.pid}").exists()  # SIGTERM ignored: killed, and reaped
        assert theirs.poll() is None
        assert end_leftover_agents("nsight-left") == []  # a prefix is another session
    finally:
        theirs.kill()
        theirs.wait()
