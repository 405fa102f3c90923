"""Finding nsys, and every nsys command line this project runs.

This is the only module that starts an nsys process. Each call has a timeout, and failures become
:class:`~nsight_core.errors.NsysCommandError` with nsys' own words in the message, because an nsys
exit code alone proves little (``nsys start`` on a missing session exits 0, ``nsys stats`` exits 0
for an unknown report).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nsight_core.errors import (
    PERMISSION_REMEDIES,
    NsysCommandError,
    NsysNotFoundError,
    NsysPermissionError,
    is_permission_failure,
)

ENV_NSYS = "NSIGHT_NSYS"
ENV_SIGNAL_FILE = "NSIGHT_SIGNAL_FILE"
"""Where a profiled process that dies of a signal writes its number (nsys itself may then exit 0)."""
ENV_PRIMARY_PID = "NSIGHT_PRIMARY_PID"
"""The pid of the command nsys started (the program): only its death by a signal is the program's."""
INSTALL_PREFIX_ENV = "NSIGHT_NSYS_PREFIX"

DEFAULT_TRACE: tuple[str, ...] = ("cuda", "nvtx")
"""The nsys trace domains recorded unless told otherwise."""
CaptureMode = Literal["process", "manual"]
DEFAULT_CAPTURE: CaptureMode = "process"
"""One default for `nsight run` and `Session.run`: the whole run, like the Flyte decorator's 'task'."""



def _seconds(variable: str, default: float) -> float:
    """A timeout from the environment (a positive number of seconds), else DEFAULT."""
    try:
        value = float(os.environ.get(variable, ""))
    except ValueError:
        return default
    return value if value > 0 else default


# Seconds. Stops and exports write the whole trace and can take minutes on a long GPU capture; each
# can be lowered (or raised) per run, e.g. to fit a pod's termination grace period.
_EXPORT_FAILED = re.compile(r"^(?:ERROR|Error):|Database file .* invalid", re.MULTILINE)
"""nsys export may exit 0 after an error it printed; its output then decides."""
QUICK_TIMEOUT = _seconds("NSIGHT_QUICK_TIMEOUT", 30.0)
STOP_TIMEOUT = _seconds("NSIGHT_STOP_TIMEOUT", 900.0)
EXPORT_TIMEOUT = _seconds("NSIGHT_EXPORT_TIMEOUT", 1800.0)

_BUSY_MARKERS = ("not allowed in this state",)


def installer_prefix() -> Path:
    """Where scripts/install-nsys.sh puts nsys (the same default as the script)."""
    if prefix := os.environ.get(INSTALL_PREFIX_ENV):
        return Path(prefix)
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "nsight" / "nsys"


def _candidates() -> list[tuple[str, str | None]]:
    found = shutil.which("nsys")
    return [
        (f"${ENV_NSYS}", os.environ.get(ENV_NSYS)),
        ("nsys on PATH", found),
        ("the project's installer location", str(installer_prefix() / "bin" / "nsys")),
    ]


# What nsys sets in the processes it profiles to inject its collectors into them (measured, 2023.4.4).
_INJECTION_VARIABLES = ("NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH", "QUADD_INJECTION_PROXY",
                        "QUADD_INJECTION_CONFIG")
_INJECTION_LIBRARIES = ("libToolsInjection", "libLinuxKeyboardInterceptor")


def uninjected_env() -> dict[str, str]:
    """This process's environment without nsys' injection, for running nsys' own commands.

    A profiled process (a region calls `nsys start`/`stop` from inside one) hands nsys' LD_PRELOAD
    on to its children. Where `nsys` is a wrapper script that execs the binary (as installs often
    are), the injected shell registers with the agent as a profiled process and keeps its pid
    through the exec: `nsys stop` then waits about 30 s for that "process" to report (measured
    with 2023.4.4). The user's own preloads stay.
    """
    env = {name: value for name, value in os.environ.items() if name not in _INJECTION_VARIABLES}
    preload = [entry for entry in env.pop("LD_PRELOAD", "").split(":")
               if entry and not Path(entry).name.startswith(_INJECTION_LIBRARIES)]
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    return env


def _version_of(path: str) -> str | None:
    try:
        result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=QUICK_TIMEOUT,
                                env=uninjected_env())
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"(\d{4}\.\d+\.\d+(?:\.\d+)?)", result.stdout)
    return match.group(1) if result.returncode == 0 and match else None


@functools.cache
def _find(env_value: str | None, path_value: str | None, prefix: str) -> Nsys:
    tried: list[str] = []
    for label, candidate in _candidates():
        if not candidate:
            tried.append(f"{label}: not set" if label.startswith("$") else f"{label}: not found")
            continue
        version = _version_of(candidate)
        if version:
            return Nsys(path=Path(candidate), version=version)
        tried.append(f"{label}: {candidate} does not run (`{candidate} --version` failed)")
    raise NsysNotFoundError(
        "No usable nsys (NVIDIA Nsight Systems CLI) was found. Looked at, in order: "
        + "; ".join(tried)
        + ". Install it with scripts/install-nsys.sh (or NVIDIA's installer), put it on PATH, "
        f"or set {ENV_NSYS} to the nsys binary."
    )


def nsys_at(path: str) -> Nsys | None:
    """The nsys at PATH when it runs, else None."""
    version = _version_of(path)
    return Nsys(path=Path(path), version=version) if version else None


def find_nsys() -> Nsys:
    """The nsys to use: $NSIGHT_NSYS, then `nsys` on PATH, then the installer's location."""
    return _find(os.environ.get(ENV_NSYS), os.environ.get("PATH"), str(installer_prefix()))


@dataclass(frozen=True)
class NsysResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return (self.stdout + "\n" + self.stderr).strip()


@dataclass(frozen=True)
class Nsys:
    """One nsys installation. Methods map one-to-one onto nsys command lines."""

    path: Path
    version: str

    def _run(self, args: Sequence[str], timeout: float, what: str, again_if_lost: bool = False) -> NsysResult:
        """Run one nsys command to completion or to TIMEOUT, then kill its whole process group.

        Its own process group, so a timed-out nsys leaves no helper behind; a permission marker
        counts only when the command failed (nsys prints such words in passing, too). AGAIN_IF_LOST:
        a command that failed because nsys lost its agent (it did nothing) runs once more.
        """
        result = self._run_once(args, timeout, what)
        if again_if_lost and result.returncode != 0 and lost_its_agent(result.output):
            time.sleep(0.5)
            result = self._run_once(args, timeout, what)
        return result

    def _run_once(self, args: Sequence[str], timeout: float, what: str) -> NsysResult:
        argv = [str(self.path), *args]
        try:
            process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       stdin=subprocess.DEVNULL, errors="replace", start_new_session=True,
                                       env=uninjected_env())
        except OSError as exc:
            raise NsysCommandError(f"{what}: could not run {self.path}: {exc}") from exc
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise NsysCommandError(
                f"{what}: `{' '.join(argv)}` did not finish within {timeout:.0f} s and was stopped. "
                "A very large trace can take this long; record a shorter region (capture='manual')."
            ) from exc
        except BaseException:  # KeyboardInterrupt, a signal handler's exit: never orphan nsys
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
        result = NsysResult(process.returncode, stdout, stderr)
        if result.returncode != 0 and is_permission_failure(result.output):
            raise NsysPermissionError(f"{what} failed: {result.output[-2000:]}\n{PERMISSION_REMEDIES}")
        return result

    # -- command lines for processes we do not run ourselves ------------------------------------
    def launch_argv(self, session: str, trace: Sequence[str], command: Sequence[str]) -> list[str]:
        """`nsys launch`: start COMMAND in a session that records nothing until `nsys start`."""
        return [str(self.path), "launch", f"--session-new={session}", f"--trace={','.join(trace)}",
                "--wait=primary", *command]

    def profile_argv(self, output: Path, trace: Sequence[str], sample: str | None,
                     command: Sequence[str]) -> list[str]:
        """`nsys profile`: record COMMAND from start to exit into OUTPUT.nsys-rep."""
        argv = [str(self.path), "profile", f"--trace={','.join(trace)}", "-o", str(output),
                "--force-overwrite=true", "--wait=primary"]
        if sample is not None:
            argv.append(f"--sample={sample}")
        return [*argv, *command]

    # -- session control, from inside a launched process ---------------------------------------
    def sessions(self) -> str:
        return self._run(["sessions", "list"], QUICK_TIMEOUT, "nsys sessions list", again_if_lost=True).stdout

    def start(self, session: str, output: Path, sample: str | None) -> NsysResult:
        args = ["start", f"--session={session}", "-o", str(output), "--force-overwrite=false"]
        if sample is not None:
            args.append(f"--sample={sample}")
        return self._run(args, QUICK_TIMEOUT, "nsys start", again_if_lost=True)

    def stop(self, session: str, timeout: float = STOP_TIMEOUT) -> NsysResult:
        return self._run(["stop", f"--session={session}"], timeout, "nsys stop")

    @staticmethod
    def is_busy(result: NsysResult) -> bool:
        """True when nsys refused because a collection is already running in the session."""
        return any(marker in result.output for marker in _BUSY_MARKERS)

    # -- post-processing -----------------------------------------------------------------------
    def export(self, report: Path, output: Path, kind: str) -> None:
        """`nsys export --type KIND` of REPORT to OUTPUT (a file, or a directory for arrowdir)."""
        result = self._run(["export", "--type", kind, "--force-overwrite=true", "--quiet=true", "-o", str(output),
                            str(report)], EXPORT_TIMEOUT, "nsys export")
        if result.returncode != 0 or not output.exists() or _EXPORT_FAILED.search(result.output):
            raise NsysCommandError(
                f"nsys export of {report} failed (exit {result.returncode}): {result.output[-2000:].strip()}. "
                "Check that the file is a complete .nsys-rep (a collection that was killed leaves none)."
            )

    @functools.cached_property
    def export_types(self) -> frozenset[str]:
        """The export types this nsys knows (`nsys export --help`: sqlite, arrowdir, ...)."""
        listing = self._run(["export", "--help"], QUICK_TIMEOUT, "nsys export --help").output
        match = re.search(r"Possible values are:\s*([a-z, \n\t]+?)\.", listing)
        words = re.findall(r"[a-z]+", match.group(1)) if match else []
        return frozenset(word for word in words if word != "and")

    def stats(self, sqlite: Path, reports: Sequence[str], prefix: Path) -> NsysResult:
        """One `nsys stats` call writing PREFIX_<report>.csv for every report."""
        args = ["stats", "-r", ",".join(reports), "-f", "csv", "-o", str(prefix), str(sqlite)]
        return self._run(args, EXPORT_TIMEOUT, "nsys stats")

    @functools.cached_property
    def available_reports(self) -> frozenset[str]:
        """Report names this nsys knows: its --help-reports list and the scripts in its reports dir."""
        names: set[str] = set()
        listing = self._run(["stats", "--help-reports"], QUICK_TIMEOUT, "nsys stats --help-reports")
        for line in listing.output.splitlines():
            match = re.match(r"\s+([A-Za-z0-9_]+)(?:\[.*?\])*\s+--\s", line)
            if match:
                names.add(match.group(1))
        for reports_dir in self.path.resolve().parent.parent.glob("host-*/reports"):
            names.update(p.stem for p in reports_dir.glob("*.py"))
        return frozenset(names)


# Run by nsys in front of CMD: it removes the file $1 (CMD is starting: removing needs no disk space,
# unlike writing), tells CMD its own pid (ENV_PRIMARY_PID: it execs into CMD), and, unless $2 is '-',
# gives CMD back the stdout/stderr of the caller (fds $2 and $3); nsys' own messages (progress bars,
# "Generated: ...") keep the pipe they were started with.
_REDIRECT = ('rm -f "$1"; export NSIGHT_PRIMARY_PID=$$; '
             '[ "$2" = - ] || eval "exec 1>&$2 2>&$3 $2>&- $3>&-"; shift 3; exec "$@"')
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


# nsys 2023.4.4 on a loaded machine at times loses its agent before it starts the command
# ("Connection to Agent lost", exit 0; "Local Endpoint is not available", exit 1; or "End of file" alone,
# the agent's connection closing, seen in the test suite on 2026-12-03). Nothing ran then, so trying
# again is safe.
START_ATTEMPTS = 3
_LOST_AGENT = re.compile(r"Connection to Agent lost|Local Endpoint is not available|^\s*End of file\.?\s*$",
                         re.MULTILINE)


def lost_its_agent(nsys_output: str) -> bool:
    """Whether nsys says it lost its agent (a transient failure of 2023.4.4 under load, not a setting)."""
    return bool(_LOST_AGENT.search(nsys_output))


def run_command(nsys_argv: Sequence[str], command: Sequence[str], env: Mapping[str, str] | None = None,
                timeout: float | None = None, session: str | None = None) -> Finished:
    """Run COMMAND under NSYS_ARGV with COMMAND's stdio untouched and nsys' own output on stderr.

    SIGTERM, and SIGINT when stdin is not a terminal, are forwarded to nsys, which passes them on to
    COMMAND and still writes the trace; nsys then runs in its own process group so that a signal to
    this process's group is not delivered twice. At a terminal nsys stays in the foreground group
    (COMMAND may read from it), which delivers Ctrl-C to everyone already. SESSION names the nsys
    session NSYS_ARGV creates (`nsys launch --session-new`): an agent of it still running once nsys
    has ended is ended too.

    nsys is run again (START_ATTEMPTS in all) while it fails before COMMAND starts in a way that is
    not a setting's fault (a lost agent, an exit 0, a hang past QUICK_TIMEOUT): nothing ran, so that
    is safe. Its messages reach stderr once COMMAND has started; those of a launch that never started
    it are only in the result's ``nsys_output``, for the one message the caller prints.
    """
    interactive = os.isatty(0)
    with tempfile.TemporaryDirectory(prefix="nsight-run-") as scratch:
        pending, died = Path(scratch, "pending"), Path(scratch, "signal")
        env = {**(os.environ if env is None else env), ENV_SIGNAL_FILE: str(died)}
        for _attempt in range(START_ATTEMPTS):  # again only while nsys fails transiently before COMMAND starts
            pending.touch()
            finished, transient = _run_under_nsys(nsys_argv, command, pending, env, timeout, interactive, session)
            if finished.started or not transient:
                break
        died_of = died.read_text().strip() if died.exists() else ""
    if session:
        end_leftover_agents(session)
    if not finished.started:
        return finished
    if finished.returncode == 0 and died_of.isdigit():  # nsys, signalled itself, exits 0 regardless
        return Finished(128 + int(died_of), finished.nsys_output)
    return finished


def end_leftover_agents(session: str, grace: float = 2.0) -> list[int]:
    """End the agents of nsys session SESSION that outlive nsys; their pids.

    nsys 2023.4.4 sometimes leaves a session's agent (`nsys --start-agent --session-name=S`, a
    daemon) running after nsys itself ended: after SIGTERM to nsys, or after "Connection to Agent
    lost". It holds the profiled command's stdout and stderr (a caller waiting for their end waits
    forever) and a session lock in $TMPDIR. Each gets GRACE seconds to exit, then SIGTERM, then SIGKILL.
    """
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
    """Whether PID runs (a zombie does not); reaps it where this process inherited it (a pod's PID 1)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _run_under_nsys(nsys_argv: Sequence[str], command: Sequence[str], pending: Path, env: Mapping[str, str],
                    timeout: float | None, interactive: bool, session: str | None) -> tuple[Finished, bool]:
    """One run of COMMAND under nsys; whether a failure to start it was transient (worth another try).

    SESSION: the nsys session NSYS_ARGV creates, whose agent a launch that hung leaves behind.
    """
    out_fd, err_fd = _low_dup(_fileno(sys.stdout, 1)), _low_dup(_fileno(sys.stderr, 2))
    kept: tuple[int, ...]
    if out_fd is None or err_fd is None:  # no single-digit fd free: nsys' output stays beside COMMAND's
        for fd in (out_fd, err_fd):
            if fd is not None:
                os.close(fd)
        read_fd, write_fd, kept, fds = None, None, (), ["-", "-"]
    else:
        read_fd, write_fd = os.pipe()
        kept = (out_fd, err_fd)
        fds = [str(out_fd), str(err_fd)]
    argv = [*nsys_argv, "/bin/sh", "-c", _REDIRECT, "nsight", str(pending), *fds, *command]
    try:
        process = subprocess.Popen(argv, env=dict(env), stdout=write_fd, stderr=write_fd, pass_fds=kept,
                                   process_group=None if interactive else 0,
                                   preexec_fn=_terminated_with(os.getpid()))
    except OSError as exc:
        raise NsysCommandError(f"could not run {argv[0]}: {exc}") from exc
    finally:
        for fd in (write_fd, *kept):
            if fd is not None:
                os.close(fd)
    relay = _Relay()
    copier = threading.Thread(target=relay.copy, args=(read_fd,), daemon=True)
    if read_fd is not None:
        copier.start()
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        repeated = signum in received  # nsys, signalled again while it writes the trace, drops it
        received.append(signum)
        if not repeated and not (interactive and signum == signal.SIGINT):
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)

    previous = _install(forward, _FORWARDED)
    began = time.monotonic()
    try:
        hung = not _await_start(process, pending, interactive)
        if hung and session:  # its agent would hold the session's name and nsys' output pipe
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
        if read_fd is not None:
            copier.join(timeout=QUICK_TIMEOUT)
    output = relay.tail.decode(errors="replace")
    if hung:
        output += f"\nnsys had not started the command after {QUICK_TIMEOUT:.0f} s and was stopped"
    started = not pending.exists()
    transient = not received and (hung or returncode == 0 or lost_its_agent(output))
    if received:
        returncode = 128 + received[-1]
    elif returncode < 0:
        returncode = 128 - returncode
    return Finished(returncode, output, started=started), transient


_PR_SET_PDEATHSIG = 1


def _terminated_with(parent: int) -> Callable[[], None]:
    """What a child runs before it execs nsys: SIGTERM when PARENT (this process) dies, even by SIGKILL.

    nsys passes SIGTERM on to the command and writes the trace so far, so nothing records on, orphaned,
    after `nsight run` or `nsight launch` was killed (`timeout -s KILL`, `subprocess.run(timeout=)`).
    The kernel keeps the setting across the exec; a parent already gone before it was set is checked.
    """
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child must not load a library

    def arm() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def _await_start(process: subprocess.Popen[bytes], pending: Path, interactive: bool) -> bool:
    """Wait until nsys starts the command (PENDING is gone) or ends without; False when it hung instead.

    nsys 2023.4.4 at times hangs under load before it starts anything. After QUICK_TIMEOUT nsys is
    killed (nothing of the user's ran, so nothing is lost) and the caller may try again.
    """
    deadline = time.monotonic() + QUICK_TIMEOUT
    while pending.exists() and process.poll() is None:
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                if interactive:  # nsys shares this process's group at a terminal: only nsys itself
                    process.kill()
                else:
                    os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return not pending.exists()
        time.sleep(0.02)
    return True


def _install(handler: Callable[[int, object], None], signals: Sequence[int]) -> dict[int, Any]:
    """Install HANDLER for SIGNALS (possible in the main thread only); the handlers it replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, handler) for signum in signals}


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
    """nsys' own messages on their way to stderr, held back until nsys has started the command.

    A launch that never starts the command (a rejected setting, a lost agent, tried again) would
    otherwise print nsys' usage text or a message a retry makes moot: its words go into the one
    warning the caller prints instead (``tail``).
    """

    def __init__(self, keep: int = 16_384) -> None:
        self.tail = bytearray()
        self._passing = False
        self._keep = keep
        self._lock = threading.Lock()

    def copy(self, read_fd: int | None) -> None:
        """Read nsys' messages from READ_FD until nsys ends (a thread's body)."""
        if read_fd is None:
            return
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
    stream = getattr(sys.stderr, "buffer", None)
    if stream is not None:
        stream.write(chunk)
    else:
        sys.stderr.write(chunk.decode(errors="replace"))
    sys.stderr.flush()
