"""Running a command under nsys: its stdio, signals, retries, and what nsys leaves behind.

`nsight run` and `nsight launch` stay nsys' parent: they hand the command its stdout/stderr, hold nsys' own messages
back until the command started, forward SIGTERM/SIGINT once each, run nsys again where it failed before starting
anything, end an nsys agent that outlives nsys (or a killed run), and make nsys die with them (parent-death signal)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsight_core.claims import dead_folders, owned_folder, remove_raw_streams_of
from nsight_core.errors import PERMISSION_REMEDIES, NsysCommandError, is_permission_failure, one_line
from nsight_core.nsys import QUICK_TIMEOUT, kill_group, lost_its_agent

ENV_SIGNAL_FILE = "NSIGHT_SIGNAL_FILE"
"""Where a profiled process that dies of a signal writes its number (nsys itself may then exit 0)."""
ENV_PRIMARY_PID = "NSIGHT_PRIMARY_PID"
"""The pid of the command nsys started (the program): only its death by a signal is the program's."""

# Run by nsys in front of CMD: removes $1 (CMD is starting; removing needs no disk space), tells CMD its pid
# (ENV_PRIMARY_PID) and gives it the caller's stdout/stderr (fds $2, $3); nsys' own messages keep their pipe.
_REDIRECT = ('rm -f "$1"; export NSIGHT_PRIMARY_PID=$$; '
             'eval "exec 1>&$2 2>&$3 $2>&- $3>&-"; shift 3; exec "$@"')
_FORWARDED = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class Finished:
    """How a profiled command ended."""

    returncode: int
    """The command's exit code; 128+N when it, or nsight on its behalf, got signal N."""
    nsys_output: str
    """The tail of nsys' own messages (copied to stderr as they came once the command started)."""
    started: bool = True
    """False when nsys ended without ever starting the command (then returncode is nsys' own)."""


START_ATTEMPTS = 3
"""Runs of nsys while it fails before starting the command (nsys 2023.4.4 under load loses its agent: nothing ran)."""

Launch = Callable[[str], tuple[Sequence[str], Mapping[str, str] | None]]
"""What one attempt runs, given its nsys session name: nsys' command line, which creates that session, and the
command's environment (None: this process's), which names it wherever the command's processes read it back."""


def attempt_names(session: str) -> list[str]:
    """The nsys session name of each attempt of a run in SESSION: a retry's is its own, since the agent of a failed
    attempt may come up late, or die, still holding the name it was given (nsys then refuses it as in use)."""
    return [session, *(f"{session}.retry{attempt}" for attempt in range(1, START_ATTEMPTS))]


def run_command(session: str, launch: Launch, command: Sequence[str], timeout: float | None = None) -> Finished:
    """Run COMMAND under nsys as LAUNCH says, its stdio untouched, nsys' output on stderr; nsys has its own process
    group, so a terminal's Ctrl-C reaches it once (forwarded). Leftover agents of SESSION's attempts
    (:func:`attempt_names`) are ended. A launch that never started COMMAND says why only in ``nsys_output``."""
    end_what_killed_runs_left()
    names = attempt_names(session)
    used: list[str] = []
    with owned_folder("nsight-run-", note="\n".join(names)) as scratch:
        pending, died = scratch / "pending", scratch / "signal"
        for name in names:  # again only while nsys fails transiently before COMMAND starts
            nsys_argv, env = launch(name)
            used.append(name)
            pending.touch()
            finished, transient = _run_under_nsys(nsys_argv, command, pending, {
                **(os.environ if env is None else env), ENV_SIGNAL_FILE: str(died)}, timeout, name)
            if finished.started or not transient:
                break
            end_leftover_agents(name, grace=0.5)  # an agent of the failed attempt holds the command's stdio
        died_of = died.read_text().strip() if died.exists() else ""
    for name in used:
        end_leftover_agents(name)
    if finished.started and finished.returncode == 0 and died_of.isdigit():  # nsys, signalled, exits 0 regardless
        return Finished(128 + int(died_of), finished.nsys_output)
    return finished


def end_what_killed_runs_left() -> None:
    """End the nsys agents of killed runs, delete their temp folders (:func:`~nsight_core.claims.owned_folder`, naming
    each attempt's session) and raw streams: an nsys killed starting its agent leaves it holding the session lock."""
    for folder, sessions in dead_folders("nsight-"):
        for session in sessions.split():
            end_leftover_agents(session, grace=0.5)
        remove_raw_streams_of(folder)


def end_leftover_agents(session: str, grace: float = 2.0) -> list[int]:
    """End nsys session SESSION's agents that outlive nsys (after SIGTERM, or a lost agent), holding the command's stdio
    (its reader would wait forever) and a session lock: GRACE seconds, then SIGTERM, then SIGKILL; their pids."""
    wanted = [b"--start-agent", f"--session-name={session}".encode()]
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if all(word in cmdline.read_bytes().split(b"\0") for word in wanted):
                found.append(int(cmdline.parent.name))
    alive = found
    for signum in (0, signal.SIGTERM, signal.SIGKILL):  # 0 sends nothing: a grace period first
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
        deadline = time.monotonic() + grace
        while (alive := [pid for pid in alive if _running(pid)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not alive:
            break
    return found


def _running(pid: int) -> bool:
    """Whether PID runs (a zombie does not); reaps it where this process inherited it (a pod's PID 1). It is reaped
    once seen dead: one that died between a first reap and the look would stay a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    if state != "Z":
        return True
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    return False


def _run_under_nsys(nsys_argv: Sequence[str], command: Sequence[str], pending: Path, env: Mapping[str, str],
                    timeout: float | None, session: str) -> tuple[Finished, bool]:
    """One run of COMMAND in the nsys session SESSION that NSYS_ARGV creates; whether a failed start was transient."""
    stdout, stderr = _fileno(sys.stdout, 1), _fileno(sys.stderr, 2)
    out_fd, err_fd = _low_dup(stdout), _low_dup(stderr)
    ours = [fd for fd in (out_fd, err_fd) if fd is not None]  # closed here once nsys has its copies
    moves: list[tuple[int, int]] = []
    if out_fd is None or err_fd is None:
        # Descriptors 3-9 are taken (nsys' injection holds 3-13 in a process it profiles): the child puts the copies
        # on 3 and 4 itself, over this process' own, which nsys does not get anyway.
        moves = [(os.dup(stdout), 3), (os.dup(stderr), 4)]
        ours += [high for high, _ in moves]
        out_fd, err_fd = 3, 4
    read_fd, write_fd = os.pipe()
    argv = [*nsys_argv, "/bin/sh", "-c", _REDIRECT, "nsight", str(pending), str(out_fd), str(err_fd), *command]
    try:
        process = subprocess.Popen(argv, env=dict(env), stdout=write_fd, stderr=write_fd, pass_fds=(out_fd, err_fd),
                                   process_group=0, preexec_fn=_terminated_with(os.getpid(), moves))
    except OSError as exc:
        raise NsysCommandError(f"could not run {argv[0]}: {exc}") from exc
    finally:
        for fd in (write_fd, *ours):
            os.close(fd)
    relay = _Relay()
    copier = threading.Thread(target=relay.copy, args=(read_fd,), daemon=True)
    copier.start()
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        if received.count(signum) == 1:  # nsys, signalled again while it writes the trace, drops it
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)

    main = threading.current_thread() is threading.main_thread()  # the only one that may install handlers
    previous = {signum: signal.signal(signum, forward) for signum in _FORWARDED} if main else {}
    began = time.monotonic()
    try:
        if hung := not _await_start(process, pending):  # its agent would hold the session's name and nsys' output pipe
            end_leftover_agents(session, grace=0.5)
        if not pending.exists():
            relay.pass_on()
        left = None if timeout is None else max(timeout - (time.monotonic() - began), 0.0)
        returncode = process.wait(timeout=left)
    except subprocess.TimeoutExpired as exc:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=QUICK_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        raise NsysCommandError(f"`{' '.join(command)}` did not finish within {timeout} s and was stopped.") from exc
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        copier.join(timeout=QUICK_TIMEOUT)
    output = relay.tail.decode(errors="replace")
    if hung:
        output += f"\nnsys had not started the command after {QUICK_TIMEOUT:.0f} s and was stopped"
    transient = not received and (hung or returncode == 0 or lost_its_agent(output))
    if received:
        returncode = 128 + received[-1]
    elif returncode < 0:
        returncode = 128 - returncode
    return Finished(returncode, output, started=not pending.exists()), transient


_PR_SET_PDEATHSIG = 1


def _terminated_with(parent: int, moves: Sequence[tuple[int, int]] = ()) -> Callable[[], None]:
    """What a child runs before it execs nsys: MOVES' descriptors copied (from, to), then SIGTERM when PARENT dies, even
    by SIGKILL (kept across the exec; a parent already gone is checked): nsys passes it on, writes the trace so far."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child must not load a library

    def arm() -> None:
        for source, target in moves:
            os.dup2(source, target)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def _await_start(process: subprocess.Popen[bytes], pending: Path) -> bool:
    """Wait until nsys starts the command (PENDING is gone) or ends; False where it hung (under load) and was killed."""
    deadline = time.monotonic() + QUICK_TIMEOUT
    while pending.exists() and process.poll() is None:
        if time.monotonic() >= deadline:
            kill_group(process)
            process.wait()
            return not pending.exists()
        time.sleep(0.02)
    return True


def _low_dup(fd: int) -> int | None:
    """A copy of FD on a free descriptor 3..9: POSIX sh redirects single-digit descriptors only."""
    for low in range(3, 10):
        try:
            os.fstat(low)
        except OSError:
            return os.dup2(fd, low, inheritable=False)
    return None


def _fileno(stream: Any, default: int) -> int:
    """STREAM's file descriptor; DEFAULT when it has none (a test harness's in-memory stream)."""
    try:
        return int(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return default


class _Relay:
    """nsys' messages on their way to stderr, held back until nsys started the command: a launch that never does (a
    rejected setting, a lost agent) would print words a retry makes moot; its ``tail`` goes in one warning."""

    def __init__(self, keep: int = 16_384) -> None:
        self.tail = bytearray()
        self._passing = False
        self._keep = keep
        self._lock = threading.Lock()

    def copy(self, read_fd: int) -> None:
        """Read nsys' messages from READ_FD until nsys ends (a thread's body)."""
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65_536):
                with self._lock:
                    self.tail.extend(chunk)
                    del self.tail[:-self._keep]
                    if self._passing:
                        _to_stderr(chunk)

    def pass_on(self) -> None:
        """The command started: what nsys said so far (all held in the tail) goes out, and from now on as it comes."""
        with self._lock:
            if not self._passing:
                self._passing = True
                _to_stderr(bytes(self.tail))


def _to_stderr(chunk: bytes) -> None:
    if not chunk:
        return
    if (stream := getattr(sys.stderr, "buffer", None)) is not None:
        stream.write(chunk)
    else:
        sys.stderr.write(chunk.decode(errors="replace"))


def run_plain(argv: Sequence[str]) -> int:
    """Run ARGV without nsys; its exit code (128+N after signal N, as the profiled run would give)."""
    code = subprocess.run(list(argv), check=False).returncode
    return 128 - code if code < 0 else code


def never_started(nsys_output: str) -> str:
    """Why the command never ran, in nsys' last words, with the remedies where nsys was refused permissions."""
    words = one_line(nsys_output)
    why = f"nsys ended without starting it (its last words: {words[-600:] or 'no message'})"
    return f"{why}. {PERMISSION_REMEDIES}" if is_permission_failure(words) else why
