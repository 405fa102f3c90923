"""Sessions against the real nsys: regions, whole-process capture, and the traps nsys sets."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from capture_helpers import run_captured
from fixture_sets import FIXTURES
from shared_runs import once_per_run

from nsight_core import NsysCommandError, Session, load_stats
from nsight_core.nsys import Nsys
from nsight_core.settings import ENV_SESSION, sanitize

pytestmark = pytest.mark.nsys

REGIONS = textwrap.dedent("""
    import time, nvtx, nsight_core
    for region, count in (("first", 3), ("second", 5)):
        with nsight_core.range(region):
            for _ in range(count):
                with nvtx.annotate(region + "_step"):
                    time.sleep(0.002)
            nvtx.mark("never a range")
    print("workload done")
""")


def nsight(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = run_captured([sys.executable, "-m", "nsight_core.cli", *args], cwd=cwd, timeout=240)
    if check:
        done.check_returncode()
    return done


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "work.py"
    script.write_text(body)
    return script


def _nvtx_counts(report: str) -> dict[str, int]:
    """The NVTX push/pop ranges of REPORT by name, as `nsight stats` counts them, in this process: eight
    `nsight stats` processes only to count ranges cost seconds of CPU; the CLI's own
    output is tested in tests/report/test_cli.py."""
    return {row.name: row.instances for row in load_stats(report, ["nvtx_pushpop_sum"]).nvtx_ranges}


@pytest.fixture
def regions_behind_a_wrapper(tmp_path_factory: pytest.TempPathFactory, nsys: Nsys) -> tuple[
        subprocess.CompletedProcess[str], list[str]]:
    """One `nsight run --capture manual` of REGIONS, shared by the cases a single run shows (once per test run): nsys
    is reached through a script that execs it (as installs often are; each call it gets is logged), and the
    program runs with a preload of its own. The run's result and the wrapper's log."""

    def make(folder: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
        seen = folder / "seen"
        wrapper = folder / "nsys"
        wrapper.write_text(f'#!/bin/sh\necho "$1 preload=$LD_PRELOAD nvtx=$NVTX_INJECTION64_PATH" >> {seen}\n'
                           f'exec {nsys.path} "$@"\n')
        wrapper.chmod(0o755)
        script = _script(folder, REGIONS)
        env = {**os.environ, "NSIGHT_NSYS": str(wrapper), "LD_PRELOAD": "libm.so.6"}
        done = run_captured([sys.executable, "-m", "nsight_core.cli", "run", "--capture", "manual", "--trace",
                             "nvtx,osrt", "--sample", "none", "-o", str(folder / "out"), "--", sys.executable,
                             str(script)], env=env, timeout=240)
        return done, seen.read_text().splitlines() if seen.exists() else []

    return once_per_run(tmp_path_factory, "regions-behind-a-wrapper", make)


def test_manual_capture_two_regions_exact_nvtx_counts(regions_behind_a_wrapper) -> None:  # type: ignore[no-untyped-def]
    done, _ = regions_behind_a_wrapper
    assert done.returncode == 0, done.stderr
    reports = [line for line in done.stdout.splitlines() if line.endswith(".nsys-rep")]
    assert "workload done" in done.stdout
    assert [Path(r).name for r in reports] == ["first.nsys-rep", "second.nsys-rep"]
    assert _nvtx_counts(reports[0]) == {"first_step": 3}
    assert _nvtx_counts(reports[1]) == {"second_step": 5}


def test_nsys_behind_an_exec_wrapper_gets_no_injection(regions_behind_a_wrapper) -> None:  # type: ignore[no-untyped-def]
    """Installs often reach nsys through a script that execs it. Run from inside the profiled process
    with nsys' LD_PRELOAD, that shell registered as a profiled process and every region's stop waited
    about 30 s for it. nsys' own commands now run without the injection; the user's preload stays."""
    done, calls = regions_behind_a_wrapper
    assert done.returncode == 0, done.stderr
    reports = [line for line in done.stdout.splitlines() if line.endswith(".nsys-rep")]
    assert _nvtx_counts(reports[1]) == {"second_step": 5}
    inside = [line for line in calls if line.split()[0] in ("start", "stop")]
    # A region alone gets its collection from its first `nsys start`: none waits in the retry loop.
    assert [line.split()[0] for line in inside] == ["start", "stop", "start", "stop"], calls
    assert all(line.endswith(" preload=libm.so.6 nvtx=") for line in inside), inside


def test_process_capture_records_the_whole_run(tmp_path: Path, nsys: Nsys) -> None:
    script = _script(tmp_path, REGIONS)
    done = nsight("run", "--capture", "process", "--trace", "nvtx", "--sample", "none", "-o", str(tmp_path / "o"),
                  "--", sys.executable, str(script))
    # stdout: the program's output, then the report path; nsys' progress goes to stderr.
    assert done.stdout.splitlines()[0] == "workload done"
    reports = done.stdout.splitlines()[1:]
    assert len(reports) == 1 and reports[0].endswith(".nsys-rep")
    assert _nvtx_counts(reports[0]) == {"first_step": 3, "second_step": 5}


def test_run_exits_with_the_commands_exit_code(tmp_path: Path, nsys: Nsys) -> None:
    script = _script(tmp_path, "import sys; sys.exit(3)\n")
    done = nsight("run", "--capture", "manual", "--trace", "nvtx", "-o", str(tmp_path / "o"), "--",
                  sys.executable, str(script), check=False)
    assert done.returncode == 3
    assert "opened no nsight_core.range() block" in done.stderr


def test_same_name_regions_never_overwrite(tmp_path: Path, nsys: Nsys) -> None:
    script = _script(tmp_path, textwrap.dedent("""
        import nvtx, nsight_core
        for i in range(3):
            with nsight_core.range("step"):
                for _ in range(i + 1):
                    with nvtx.annotate("work"):
                        pass
    """))
    result = Session(trace=("nvtx",), sample="none", output_dir=tmp_path / "o").run([sys.executable, str(script)],
                                                                                   capture="manual")
    assert [p.name for p in result.reports] == ["step.nsys-rep", "step.1.nsys-rep", "step.2.nsys-rep"]
    assert [_nvtx_counts(str(p)) for p in result.reports] == [{"work": 1}, {"work": 2}, {"work": 3}]


def _run_manual(tmp_path: Path, script: Path) -> subprocess.CompletedProcess[str]:
    done = run_captured(
        [sys.executable, "-m", "nsight_core.cli", "run", "--capture", "manual", "--trace", "nvtx", "-o",
         str(tmp_path / "o"), "--", sys.executable, str(script)], timeout=240)
    assert done.returncode == 0, done.stderr
    return done


def test_nested_region_runs_unprofiled_at_once(tmp_path: Path, nsys: Nsys) -> None:
    """Nested in the same thread, in the same asyncio task, in asyncio.to_thread: the inner region can
    never outwait the outer one, so it does not wait for it (it used to wait 7 s)."""
    script = _script(tmp_path, textwrap.dedent("""
        import asyncio, logging, time, nvtx, nsight_core
        logging.basicConfig(level=logging.WARNING)

        def inner(how):
            t0 = time.monotonic()
            with nsight_core.range("inner"):
                with nvtx.annotate("inside_inner"):
                    pass
            print(f"{how} inner waited {time.monotonic() - t0:.1f}")

        with nsight_core.range("outer"):
            inner("sync")

        async def main():
            async with nsight_core.range("outer"):
                t0 = time.monotonic()
                async with nsight_core.range("inner"):
                    with nvtx.annotate("inside_inner"):
                        pass
                print(f"async inner waited {time.monotonic() - t0:.1f}")
                await asyncio.to_thread(inner, "to_thread")

        asyncio.run(main())
    """))
    done = _run_manual(tmp_path, script)
    waits = {line.split(" inner waited ")[0]: float(line.split()[-1]) for line in done.stdout.splitlines()
             if " inner waited " in line}
    assert sorted(waits) == ["async", "sync", "to_thread"]
    assert all(waited < 3.0 for waited in waits.values()), waits  # far below START_RETRY_SECONDS
    nested = [line for line in done.stderr.splitlines() if "could not start collection for region 'inner'" in line]
    assert len(nested) == 3 and all("nested in region 'outer'" in line for line in nested), done.stderr
    reports = [line for line in done.stdout.splitlines() if line.endswith(".nsys-rep")]
    assert [Path(r).name for r in reports] == ["outer.nsys-rep", "outer.1.nsys-rep"]
    assert [_nvtx_counts(r) for r in reports] == [{"inside_inner": 1}, {"inside_inner": 2}]


def test_overlapping_region_waits_for_seven_seconds_of_the_others_block(tmp_path: Path, nsys: Nsys) -> None:
    """A block that would never end does not hold a region of another thread forever: after
    START_RETRY_SECONDS of that block the region runs unprofiled (and then the block ends)."""
    script = _script(tmp_path, textwrap.dedent("""
        import logging, threading, time, nvtx, nsight_core
        logging.basicConfig(level=logging.WARNING)
        recording, done = threading.Event(), threading.Event()

        def first():
            with nsight_core.range("first"):
                recording.set()
                done.wait(200)  # ends only once "second" has given up

        def second():
            recording.wait(200)
            t0 = time.monotonic()
            with nsight_core.range("second"):
                print(f"second waited {time.monotonic() - t0:.1f}", flush=True)
                with nvtx.annotate("inside_second"):
                    pass
            done.set()

        threads = [threading.Thread(target=first), threading.Thread(target=second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    """))
    done = _run_manual(tmp_path, script)
    assert float(done.stdout.split("second waited ")[1].split()[0]) >= 6.9
    assert "could not start collection for region 'second'" in done.stderr
    assert "waited for 7 s of its block" in done.stderr
    reports = [line for line in done.stdout.splitlines() if line.endswith(".nsys-rep")]
    assert [Path(r).name for r in reports] == ["first.nsys-rep"]
    assert _nvtx_counts(reports[0]) == {"inside_second": 1}


def test_start_in_a_session_that_does_not_exist_is_refused(tmp_path: Path, nsys: Nsys,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`nsys start` on an unknown session exits 0 and records nothing; we must notice."""
    session = Session("no-such-session-anywhere", trace=("nvtx",), output_dir=tmp_path, nsys=nsys)
    with pytest.raises(NsysCommandError, match="does not exist"):
        session.collector.start("region")
    assert list(tmp_path.iterdir()) == []


def test_range_outside_a_session_is_a_noop(clean_env: None) -> None:
    import nsight_core

    assert ENV_SESSION not in os.environ
    with nsight_core.range("anything") as region:
        pass
    assert region.capture is None and region.session is None


def test_async_range_outside_a_session_is_a_noop(clean_env: None) -> None:
    import asyncio

    import nsight_core

    async def block() -> nsight_core.Region:
        async with nsight_core.range("anything") as region:
            return region

    assert asyncio.run(block()).capture is None


def test_async_regions_record(tmp_path: Path, nsys: Nsys) -> None:
    script = _script(tmp_path, textwrap.dedent("""
        import asyncio, nvtx, nsight_core
        async def main():
            async with nsight_core.range("async region"):
                with nvtx.annotate("a"):
                    await asyncio.sleep(0.01)
        asyncio.run(main())
    """))
    result = Session(trace=("nvtx",), output_dir=tmp_path / "o").run([sys.executable, str(script)],
                                                                     capture="manual")
    assert [p.name for p in result.reports] == ["async_region.nsys-rep"]
    assert _nvtx_counts(str(result.reports[0])) == {"a": 1}


@pytest.mark.parametrize(("raw", "clean"), [
    ("run/123 action:0", "run_123_action_0"),
    ("$(rm -rf /); echo", "rm_-rf_echo"),
    ("../../etc/passwd", "etc_passwd"),
    ("ünïcode", "n_code"),
    ("", "nsight"),
    ("...", "nsight"),
])
def test_sanitize(raw: str, clean: str) -> None:
    assert sanitize(raw) == clean


def test_importing_nsight_core_stays_light() -> None:
    """A profiled training process imports nsight_core for its regions; it must not drag in Polars/Altair."""
    code = "import sys, nsight_core; print(sorted(m for m in ('polars', 'altair') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_printing_a_profile_imports_no_chart_or_page_library() -> None:
    """`nsight stats` prints text and JSON: Altair (a fifth of its time) and Jinja2 are imported only where a page is
    drawn."""
    capture = FIXTURES / "h200-fix-pairs-2025" / "dataloader-problem.sqlite"
    code = ("import sys; from nsight_core.report import build_profile, stats_json, stats_text; "
            f"p = build_profile({str(capture)!r}); stats_text(p); stats_json(p); "
            "print([m for m in ('altair', 'jinja2') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
