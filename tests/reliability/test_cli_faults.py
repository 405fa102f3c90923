"""The `nsight` CLI and the core API under faults: real nsys, a fake one only to inject a fault."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from capture_helpers import nsys_whose_importer_fails_once, run_captured
from shared_runs import once_per_run

from nsight_core import Session, find_nsys, load_trace
from nsight_core.launch import exec_wrapper
from nsight_core.nsys import DEFAULT_CAPTURE
from nsight_core.settings import ENV_OUTPUT_DIR
from nsight_core.supervise import START_ATTEMPTS

pytestmark = [pytest.mark.nsys, pytest.mark.reliability]

NSIGHT = [sys.executable, "-m", "nsight_core.cli"]
TIMEOUT = 240


def nsight(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    return run_captured([*NSIGHT, *args], cwd=cwd, timeout=TIMEOUT, env={**os.environ, **(env or {})},
                        stdin=subprocess.DEVNULL)


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(body))
    return path


REGION = """
    import nvtx, nsight_core
    print("job output", flush=True)
    with nsight_core.range("r"):
        with nvtx.annotate("x"):
            pass
"""


@pytest.fixture
def runs_in_one_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[subprocess.CompletedProcess[str]]]:
    """Two `nsight run` (the default capture, no -o) in one fresh folder: REGION, then a job that exits 3.
    Shared by the cases about a plain run's stdout, exit code and run folders."""

    def make(folder: Path) -> tuple[Path, list[subprocess.CompletedProcess[str]]]:
        region, exits = script(folder, REGION), folder / "exits.py"
        exits.write_text("import sys\nsys.exit(3)\n")
        return folder, [nsight("run", "--trace", "nvtx", "--", sys.executable, str(job), cwd=folder)
                        for job in (region, exits)]

    return once_per_run(tmp_path_factory, "runs-in-one-folder", make)


@pytest.mark.parametrize("capture", ["process", "manual"])
def test_stdout_is_the_programs_output_then_the_report_paths(tmp_path, request, capture):
    if capture == "process":
        done = request.getfixturevalue("runs_in_one_folder")[1][0]
    else:
        done = nsight("run", "--capture", capture, "--trace", "nvtx", "-o", str(tmp_path / "o"), "--",
                      sys.executable, str(script(tmp_path, REGION)))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "job output"
    assert [Path(line).suffix for line in lines[1:]] == [".nsys-rep"]
    assert "\r" not in done.stdout and "Generated" not in done.stdout
    if capture == "process":
        assert "Generated" in done.stderr  # nsys' own messages: on stderr


def test_runs_are_named_by_time_with_a_latest_link(runs_in_one_folder):
    tmp_path, (first, second) = runs_in_one_folder
    assert (first.returncode, second.returncode) == (0, 3), second.stderr
    runs = sorted(p.name for p in (tmp_path / "nsight-runs").iterdir() if p.name != "latest")
    assert len(runs) == 2 and all(len(name.split("-")[0]) == 8 for name in runs)
    assert (tmp_path / "nsight-runs" / "latest").resolve().name == runs[-1] or \
        os.readlink(tmp_path / "nsight-runs" / "latest") in runs
    assert Path(second.stdout.splitlines()[-1]).parent.name == os.readlink(tmp_path / "nsight-runs" / "latest")


def test_exit_code_is_the_commands(runs_in_one_folder):
    done = runs_in_one_folder[1][1]
    assert done.returncode == 3, done.stderr
    assert [Path(line).suffix for line in done.stdout.splitlines()] == [".nsys-rep"]  # the trace is kept


def test_version():
    done = nsight("--version")
    assert done.returncode == 0 and done.stdout.startswith("nsight 0.")


def test_one_capture_default_in_cli_and_api():
    from nsight_core.cli import build_parser

    assert build_parser().parse_args(["run", "--", "x"]).capture == DEFAULT_CAPTURE == "process"
    assert Session.run.__defaults__ is not None and DEFAULT_CAPTURE in Session.run.__defaults__


def fake_nsys(tmp_path: Path, subcommand: str, body: str) -> dict[str, str]:
    fake = tmp_path / "fake-nsys"
    fake.write_text(f'#!/bin/sh\nREAL={find_nsys().path}\nif [ "$1" = {subcommand} ]; then\n{body}\nfi\n'
                    'exec "$REAL" "$@"\n')
    fake.chmod(0o755)
    return {"NSIGHT_NSYS": str(fake), "PATH": f"{tmp_path}:{os.environ['PATH']}"}


CAUSES = {
    "missing command": (["--", "no-such-command-anywhere"], None, 127, "command not found: 'no-such-command"),
    "rejected trace": (["--trace", "nvtx,bogus", "--", "true"], None, 1, "Illegal --trace argument 'bogus'"),
    "manual without a region": (["--capture", "manual", "--trace", "nvtx", "--", "true"], None, 0,
                                "opened no nsight_core.range() block"),
    "disk full": (["--trace", "nvtx", "--", "true"],
                  ("profile", 'echo "Error: failed to write: No space left on device" >&2; exit 1'), 1,
                  "the disk filled up"),
}


AGENT_LOST = ('echo "Connection to Agent lost. This is most likely a bug. Internal reason: \'End of file\'." >&2; '
              'exit 0')


LOCAL_ENDPOINT = 'echo "[QuadDCommon::tag_message*] = Local Endpoint is not available." >&2; exit 1'


END_OF_FILE = 'echo "End of file" >&2; exit 1'


REFUSED = 'echo "Connection refused" >&2; exit 1'


def lose_first(count: Path, losses: int, how: str) -> str:
    """A fake nsys subcommand's script: fail as HOW the first LOSSES times, then be the real one."""
    return f'echo x >> {count}; if [ $(wc -l < {count}) -le {losses} ]; then {how}; fi'


# A fake nsys session's agent, as 2023.4.4 left one after losing it: it holds the session's name ($S, from
# --session-new), and an nsys started with that name again fails. MARKER, in its command line, lets a test find its
# own agents, never nsys' real ones.
SESSION = 'S=$(printf "%s\\n" "$@" | sed -n "s/^--session-new=//p")'
HELD = ('if pgrep -f -- "--session-name=$S" >/dev/null; then '
        'echo "Session name \'$S\' is already in use." >&2; exit 1; fi')
AGENT = (sys.executable + ' -c "import time; time.sleep(600)" {marker} --start-agent --session-name=$S '
         '</dev/null >/dev/null 2>&1 & ')


def agents_left(marker: Path) -> list[str]:
    """The fake agents of MARKER still running (nsight ends every one when its run ends); the test's own cleanup
    ends those after asking."""
    found = subprocess.run(["pgrep", "-af", "--", str(marker)], capture_output=True, text=True).stdout.splitlines()
    return [line for line in found if "pgrep" not in line]


@pytest.mark.parametrize(("losses", "how"), [  # each message once alone and once every time; make test-all: all
    *(pytest.param(losses, how, id=f"{losses}-{said}", marks=() if (losses == 1) == (how is AGENT_LOST) else
                   pytest.mark.exhaustive)
      for losses in (1, START_ATTEMPTS)
      for how, said in ((AGENT_LOST, "exit 0"), (LOCAL_ENDPOINT, "local endpoint"), (END_OF_FILE, "eof"))),
    pytest.param(START_ATTEMPTS, REFUSED, id=f"{START_ATTEMPTS}-refused")])  # every attempt fails: retried all the
    # same, with no real nsys run of its own
def test_nsys_that_loses_its_agent_before_the_command_starts(tmp_path, losses, how):
    """nsys 2023.4.4 on a loaded machine: "Connection to Agent lost" (exit 0), "Local Endpoint is not
    available" (exit 1), a bare "End of file" or "Connection refused", and the command never ran; its agent may
    live on, holding the session's name. nsight runs nsys again (nothing ran, so it is safe) in a session of
    another name, and ends every attempt's agent; if every attempt fails, it says so and exits 1."""
    count, ran, marker = tmp_path / "count", tmp_path / "ran", tmp_path / "agent"
    lose = f"{SESSION}; {HELD}; {lose_first(count, losses, AGENT.format(marker=marker) + how)}"
    job = script(tmp_path, f"open({str(ran)!r}, 'a').write('ran\\n')\n" + textwrap.dedent(REGION))
    try:
        done = nsight("run", "--trace", "nvtx", "-o", str(tmp_path / "o"), "--", sys.executable, str(job),
                      env=fake_nsys(tmp_path, "profile", lose))
        left = agents_left(marker)
    finally:
        subprocess.run(["pkill", "-f", "--", str(marker)], check=False)
    assert "already in use" not in done.stderr
    assert left == []
    if losses == 1:
        assert done.returncode == 0, done.stderr
        assert ran.read_text() == "ran\n", done.stderr  # once, not twice
        assert [Path(line).suffix for line in done.stdout.splitlines()[1:]] == [".nsys-rep"], (done.stdout, done.stderr)
    else:
        assert done.returncode == 1 and not ran.exists()
        assert "the command did not run: nsys ended without starting it (its last words: " in done.stderr
        assert count.read_text() == "x\n" * START_ATTEMPTS
        assert "opened no nsight_core.range() block" not in done.stderr


@pytest.mark.parametrize("capture", ["process", "manual"])
def test_a_name_a_lost_agent_still_holds_neither_blocks_the_retry_nor_outlives_the_run(tmp_path, capture):
    """nsys lost its agent, which came up only after nsight had looked for it, or died holding nsys' lock on the
    session's name: the retry found "Session name '…' is already in use." and the command never ran. Here the lost
    launch leaves both: a late agent, and the name held for good. The retry runs in a session of its own name,
    which a region's processes are told (their `nsys start` finds it), and the late agent is ended with the run."""
    count, ran, marker = tmp_path / "count", tmp_path / "ran", tmp_path / "agent"
    late_agent = f"S=$S setsid sh -c 'sleep 0.3; {AGENT.format(marker=marker)}' </dev/null >/dev/null 2>&1 & "
    locks = tmp_path / "locks"
    lock = f'mkdir -p {locks}; touch "{locks}/$S"; '
    held = f'if [ -e "{locks}/$S" ]; then echo "Session name \'$S\' is already in use." >&2; exit 1; fi'
    lose = f"{SESSION}; {held}; {lose_first(count, 1, late_agent + lock + END_OF_FILE)}"
    job = script(tmp_path, f"open({str(ran)!r}, 'a').write('ran\\n')\n" + textwrap.dedent(REGION))
    subcommand = {"process": "profile", "manual": "launch"}[capture]
    try:
        done = nsight("run", "--capture", capture, "--trace", "nvtx", "-o", str(tmp_path / "o"), "--",
                      sys.executable, str(job), env=fake_nsys(tmp_path, subcommand, f"sleep 0.6; {lose}"))
        left = agents_left(marker)
    finally:
        subprocess.run(["pkill", "-f", "--", str(marker)], check=False)
    assert done.returncode == 0, done.stderr
    assert ran.read_text() == "ran\n", done.stderr  # once
    assert count.read_text() == "x\nx\n", done.stderr  # the lost launch, then the retry under another name
    traces = [Path(line).name for line in done.stdout.splitlines()[1:]]
    assert len(traces) == 1, done.stderr
    trace = traces[0]
    if capture == "manual":  # the region recorded: its processes were told the retry's session
        assert trace == "r.nsys-rep", done.stderr
    else:  # named as the run, whichever attempt recorded it
        assert re.fullmatch(r"nsight-[0-9a-f]{8}\.nsys-rep", trace), trace
    assert "already in use" not in done.stderr and "WARNING" not in done.stderr
    assert left == []


def test_region_start_that_loses_its_agent_is_tried_again(tmp_path):
    """`nsys start` failing with "Local Endpoint is not available" started nothing: once more, and the
    region records as if nothing happened."""
    count = tmp_path / "count"
    done = nsight("run", "--capture", "manual", "--trace", "nvtx", "-o", str(tmp_path / "o"), "--", sys.executable,
                  str(script(tmp_path, REGION)), env=fake_nsys(tmp_path, "start", lose_first(count, 1, LOCAL_ENDPOINT)))
    assert done.returncode == 0, done.stderr
    assert count.read_text() == "x\nx\n"
    assert [Path(line).name for line in done.stdout.splitlines()[1:]] == ["r.nsys-rep"], done.stderr
    assert "WARNING" not in done.stderr


@pytest.mark.parametrize("how", [LOCAL_ENDPOINT, REFUSED], ids=["local endpoint", "refused"])
def test_region_stop_that_loses_its_agent_is_tried_again(tmp_path, how):
    """`nsys stop` failing as it loses its agent stopped nothing: the collection records on, and a region that gave
    up on it lost its trace (and the next region found the session busy). Once more, and the region's trace is
    written as if nothing happened."""
    count = tmp_path / "count"
    done = nsight("run", "--capture", "manual", "--trace", "nvtx", "-o", str(tmp_path / "o"), "--", sys.executable,
                  str(script(tmp_path, REGION)), env=fake_nsys(tmp_path, "stop", lose_first(count, 1, how)))
    assert done.returncode == 0, done.stderr
    assert count.read_text() == "x\nx\n"
    [trace] = [Path(line) for line in done.stdout.splitlines()[1:]]
    assert trace.name == "r.nsys-rep", done.stderr
    assert "x" in load_trace(trace).nvtx.get_column("name").to_list()
    assert "WARNING" not in done.stderr


IMPORT_FAULTS = {"failed": (2, "failed; the raw stream it kept, imported once more, is"),
                 "non-fatal": (3, "had non-fatal errors; the raw stream it kept imported cleanly into")}


@pytest.mark.parametrize(("capture", "fault"), [  # each fault and each capture once; make test-all: all four
    ("process", "failed"), ("manual", "non-fatal"),
    *(pytest.param(capture, fault, marks=pytest.mark.exhaustive) for capture, fault in
      (("process", "non-fatal"), ("manual", "failed")))], ids=lambda v: str(v))
def test_a_failed_import_is_imported_again(tmp_path, capture, fault):
    """nsys 2023.4.4's importer failed under load ("Importation failed") and nsys wrote no trace, keeping the
    complete raw stream beside it; the same stream then imports. Or its import "succeeded with non-fatal
    errors" (seen under load): nsys wrote the trace and kept the stream beside it, as large. nsight
    imports the stream once more: the trace is kept, whole, its clean import in place of the non-fatal one, and
    no stream is left. A whole run says so (nsys' words are above it); a region, whose `nsys stop` speaks to
    nobody, stays quiet."""
    status, said = IMPORT_FAULTS[fault]
    env, imports = nsys_whose_importer_fails_once(tmp_path, status)
    out = tmp_path / "o"
    done = nsight("run", "--capture", capture, "--trace", "nvtx", "-o", str(out), "--", sys.executable,
                  str(script(tmp_path, REGION)), env=env)
    assert done.returncode == 0, done.stderr
    assert len(imports.read_text().splitlines()) == 2, done.stderr  # nsys' import, then nsight's
    [report] = sorted(out.glob("*.nsys-rep"))
    assert done.stdout.splitlines() == ["job output", str(report)], done.stderr
    assert sorted(p.name for p in out.iterdir()) == [report.name]
    assert "x" in load_trace(report).nvtx.get_column("name").to_list()  # the job's NVTX range, recorded
    assert (said in done.stderr) == (capture == "process"), done.stderr
    assert "WARNING" not in done.stderr


def test_an_import_with_non_fatal_errors_twice_keeps_nsys_trace(tmp_path):
    """Where nsight's import of the kept stream has non-fatal errors too, nsys' trace stays as nsys wrote it
    (nothing better came of the stream) and the stream is deleted all the same; nsight adds no words."""
    env, imports = nsys_whose_importer_fails_once(tmp_path, 3, times=2)
    out = tmp_path / "o"
    done = nsight("run", "--trace", "nvtx", "-o", str(out), "--", sys.executable, str(script(tmp_path, REGION)),
                  env=env)
    assert done.returncode == 0, done.stderr
    assert len(imports.read_text().splitlines()) == 2, done.stderr
    [report] = sorted(out.glob("*.nsys-rep"))
    assert sorted(p.name for p in out.iterdir()) == [report.name]
    assert "x" in load_trace(report).nvtx.get_column("name").to_list()
    assert "raw stream it kept" not in done.stderr and "WARNING" not in done.stderr


def test_nsight_run_inside_nsight_run_keeps_nsys_messages_off_stdout(tmp_path):
    """In a process nsys profiles, its injection holds descriptors 3-13, and sh hands the command only single-digit
    ones: the inner nsight found none free and left the inner nsys' progress bars on the program's stdout. Now its
    child puts them on 3 and 4 itself. Stdout: the program's output, then each run's trace, inner first."""
    done = nsight("run", "--trace", "nvtx", "-o", str(tmp_path / "outer"), "--", *NSIGHT, "run", "--trace", "nvtx",
                  "-o", str(tmp_path / "inner"), "--", sys.executable, "-c", "print('program output')")
    assert done.returncode == 0, done.stderr
    [inner] = sorted((tmp_path / "inner").glob("*.nsys-rep"))
    [outer] = sorted((tmp_path / "outer").glob("*.nsys-rep"))
    assert done.stdout.splitlines() == ["program output", str(inner), str(outer)], done.stdout
    assert done.stderr.count("Generated:") == 2


@pytest.mark.parametrize("hangs", [1, START_ATTEMPTS])
def test_a_launch_that_hangs_before_the_command_starts(tmp_path, hangs):
    """nsys 2023.4.4 under load: `nsys launch` hung without starting anything, where the next one did
    not. After NSIGHT_QUICK_TIMEOUT it is killed and launched again; if it hangs every time, the
    command runs unprofiled after one warning. Never a job that waits forever or runs twice."""
    # The launch after a hang is the real nsys, which must start the command within the timeout: 2 s was too short
    # for it under make test's load, so only the case of hangs alone has 2 s. A real launch slower still (8 s at a
    # load average of 12) is a hang too, launched once more: the launches counted are those that hung and one more.
    env = {**fake_nsys(tmp_path, "launch", lose_first(tmp_path / "count", hangs, "exec sleep 600")),
           "NSIGHT_QUICK_TIMEOUT": "2" if hangs == START_ATTEMPTS else "8"}
    done = nsight("launch", "--session", "s", "--trace", "nvtx", "--output-dir", str(tmp_path / "o"), "--",
                  sys.executable, "-c", "import os; print('ran', os.environ.get('NSIGHT_SESSION', 'unprofiled'))",
                  env=env)
    assert done.returncode == 0, done.stderr
    launches = (tmp_path / "count").read_text().count("x")
    if hangs < START_ATTEMPTS:
        assert hangs < launches <= START_ATTEMPTS, launches  # each hung launch was ended and launched again
        assert done.stdout.startswith("ran s-") and done.stdout.count("ran") == 1, done.stderr  # once, profiled
        assert "profiling is off" not in done.stderr
    else:
        assert launches == START_ATTEMPTS
        assert done.stdout == "ran unprofiled\n"
        [warning] = done.stderr.splitlines()
        assert "profiling is off" in warning and "had not started the command after 2 s" in warning


@pytest.mark.parametrize("case", CAUSES)
def test_run_names_the_real_cause(tmp_path, case):
    args, fault, code, cause = CAUSES[case]
    env = fake_nsys(tmp_path, *fault) if fault else None
    done = nsight("run", "-o", str(tmp_path / "o"), *args, env=env)
    assert done.returncode == code, done.stderr
    assert cause in done.stderr
    if case != "manual without a region":
        assert "opened no nsight_core.range() block" not in done.stderr
    assert "Traceback" not in done.stderr




@pytest.mark.parametrize("where", ["sub", "."])
def test_run_into_a_read_only_folder(tmp_path, read_only, where):
    done = nsight("run", "-o", str(read_only / where), "--", "true")
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("nsight: error: cannot write the reports to") and "writable folder" in line


def test_region_in_a_read_only_folder_runs_unprofiled(tmp_path, read_only):
    """Hole 1: the claim file's OSError must not escape into the user's code."""
    job = script(tmp_path, """
        import logging, os, nsight_core
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        with nsight_core.range("r"):
            print("body ran", flush=True)
    """)
    session = Session(trace=("nvtx",), output_dir=tmp_path / "o")
    session.output_dir.mkdir()
    env = {**session.child_env(), ENV_OUTPUT_DIR: str(read_only)}
    done = subprocess.run(session.command([sys.executable, str(job)], "manual"), env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "body ran"
    warnings = [line for line in done.stderr.splitlines() if "could not start collection" in line]
    assert len(warnings) == 1 and "Read-only file system" in warnings[0] and "writable" in warnings[0]


@pytest.fixture
def claims_run(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One manual run shared by the claim cases: the folder holds a claim left by a killed process, the
    command records region r, then kills itself (SIGKILL) inside region k."""

    def make(folder: Path):  # type: ignore[no-untyped-def]
        out = folder / "o"
        out.mkdir()
        probe = subprocess.Popen(["true"])
        probe.wait()
        (out / "r.claim").write_text(str(probe.pid))  # left by a killed process
        job = script(folder, REGION + """
        import os, signal
        with nsight_core.range("k"):
            os.kill(os.getpid(), signal.SIGKILL)
        """)
        return out, Session(trace=("nvtx",), output_dir=out).run([sys.executable, str(job)], capture="manual")

    return once_per_run(tmp_path_factory, "claims", make)


def test_stale_claim_does_not_shift_names(claims_run):
    out, result = claims_run
    assert [p.name for p in result.reports if p.name.startswith("r.")] == ["r.nsys-rep"]  # not r.1
    assert list(out.glob("*.claim")) == []


def test_claims_never_leak_when_the_command_is_killed(claims_run):
    out, result = claims_run
    assert result.returncode == 137
    assert list(out.glob("*.claim")) == []


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_run_forwards_signals(tmp_path, name):
    signum = getattr(signal, name)
    ready = tmp_path / "ready"
    job = script(tmp_path, f"""
        import os, time, nsight_core
        with nsight_core.range("r"):
            open({str(ready)!r}, "w").write(str(os.getpid()))
            time.sleep(120)
    """)
    run = subprocess.Popen([*NSIGHT, "run", "--capture", "manual", "--trace", "nvtx", "-o", str(tmp_path / "o"),
                            "--", sys.executable, str(job)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + TIMEOUT
    while not (ready.exists() and ready.read_text()):
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.1)
    child = int(ready.read_text())
    run.send_signal(signum)
    stdout, stderr = run.communicate(timeout=TIMEOUT)
    assert run.returncode == 128 + signum, stderr
    assert stdout.splitlines()[-1].endswith("r.nsys-rep")
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # the child did not outlive nsight run


def test_wrapper_without_nsight_core_runs_the_command(tmp_path):
    """The last fallback of the exec wrapper: no nsight anywhere, an interpreter without nsight-core."""
    job = tmp_path / "entrypoint"
    job.write_text("#!/bin/sh\necho job ran \"$@\"\n")
    job.chmod(0o755)
    done = subprocess.run([*exec_wrapper("nsight-x", ("nvtx",), None), str(job), "a b"], capture_output=True,
                          text=True, timeout=TIMEOUT, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0
    assert done.stdout == "job ran a b\n"
    [warning] = done.stderr.splitlines()
    assert "runs unprofiled" in warning and "install nsight-core" in warning
