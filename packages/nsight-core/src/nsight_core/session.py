"""Profiling sessions: running a command under nsys, and recording regions from inside it.

A parent builds the command (`nsys launch` for regions, `nsys profile` for a whole process) and the
environment that tells the child which session it is in. The child, through :meth:`Session.current`,
starts and stops collections around :meth:`Session.range` blocks. Nothing here trusts an nsys exit
code on its own: the session is checked to exist before `start`, and the report file after `stop`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import errno
import fcntl
import itertools
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Literal, NoReturn, Self

from pydantic import BaseModel

from nsight_core import lineage, tempspace
from nsight_core.capture import Capture
from nsight_core.errors import (
    PERMISSION_REMEDIES,
    CommandNotExecutableError,
    CommandNotFoundError,
    NsightError,
    NsysCommandError,
    is_permission_failure,
    one_line,
)
from nsight_core.marks import LIVE_MARK, STOP_MARK, mark
from nsight_core.nsys import (
    DEFAULT_CAPTURE,
    DEFAULT_TRACE,
    ENV_NSYS,
    ENV_PRIMARY_PID,
    ENV_SIGNAL_FILE,
    QUICK_TIMEOUT,
    STOP_TIMEOUT,
    CaptureMode,
    Nsys,
    find_nsys,
    nsys_at,
    run_command,
)

log = logging.getLogger("nsight")

ENV_SESSION = "NSIGHT_SESSION"
ENV_OUTPUT_DIR = "NSIGHT_OUTPUT_DIR"
ENV_SAMPLE = "NSIGHT_SAMPLE"
ENV_TRACE = "NSIGHT_TRACE"
ENV_CLAIMS = "NSIGHT_CLAIMS"

START_RETRY_SECONDS = 7.0
"""How long a region waits for another one's block: the time the other region of this process spends
recording while this one waits (its `nsys start` and `nsys stop` are waited out, uncounted), and how long
`nsys start` is retried while another process of the session records."""
START_WAIT_CAP = 2 * START_RETRY_SECONDS + 4 * QUICK_TIMEOUT + STOP_TIMEOUT
"""The longest a region ever waits for another of its process (1034 s with the default timeouts): the
sum of the bounds of the other's start (session check, `nsys start` and its retries, a quiet stop), of
its block and of its stop. Reached only when an nsys command outlives its own timeout."""
# `nsys start` returns before CUDA/NVTX collection is live in the target: on an H200 a region that
# began at once lost its first NVTX ranges and, right after another region, everything; 20 ms of
# waiting gave exact counts (bench/GPU.md). The margin is cheap next to a start (~0.3 s there).
START_SETTLE_SECONDS = 0.25
_START_RETRY_INTERVAL = 0.5
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
_REPORT_SUFFIXES = (".nsys-rep", ".qdstrm", ".qdrep")
_CLAIM = ".claim"
# On SIGTERM a pod has a grace period (30 s by default) before SIGKILL: the stop must fit in it.
ABORT_STOP_TIMEOUT = 20.0
RUNS_DIR = "nsight-runs"
LATEST = "latest"



def sanitize(name: str, fallback: str = "nsight", max_length: int = 96) -> str:
    """A name safe as an nsys session name and a file name: only [A-Za-z0-9._-], no leading dot/dash."""
    cleaned = _SAFE.sub("_", name).strip("._-")[:max_length].strip("._-")
    return cleaned or fallback


def validate_trace(trace: Sequence[str] | str) -> tuple[str, ...]:
    """Check trace domains early: nsys' own error for a bad list arrives only after a process start."""
    domains = (trace,) if isinstance(trace, str) else tuple(trace)
    if not domains:
        raise ValueError("trace is empty: give at least one nsys trace domain, e.g. ('cuda', 'nvtx').")
    for domain in domains:
        if not isinstance(domain, str) or not domain or re.search(r"[\s,]", domain):
            raise ValueError(
                f"trace domain {domain!r} is not valid: each domain is one word such as 'cuda', 'nvtx', "
                "'osrt' (pass several as a list, not one comma-separated string)."
            )
    return domains


class RunResult(BaseModel):
    """What `Session.run` left behind."""

    returncode: int
    """The command's exit code; 128+N after signal N (130 for SIGINT, 143 for SIGTERM)."""
    output_dir: Path
    reports: list[Path]
    """The .nsys-rep files the run wrote, oldest first."""
    diagnosis: str | None = None
    """When no report was written: why, in words (nsys' own error when it gave one)."""


_DISK_FULL = re.compile(r"no space left on device|disk quota exceeded|ENOSPC", re.IGNORECASE)
_NSYS_ERROR = re.compile(r"^.*(?:error|illegal|invalid|unknown|unrecognized|failed|cannot|not found).*$",
                         re.IGNORECASE | re.MULTILINE)


def diagnose(nsys_output: str, where: Path) -> str | None:
    """The cause nsys gave for not writing a trace, as one sentence with a remedy; None when it gave none."""
    if match := _DISK_FULL.search(nsys_output):
        line = one_line(nsys_output[nsys_output.rfind("\n", 0, match.start()) + 1:].splitlines()[0])
        return (f"the disk filled up while nsys wrote the trace ({line}): free space where {where} and "
                "$TMPDIR are, or write the trace to a larger disk")
    if match := _NSYS_ERROR.search(nsys_output):
        return f"nsys refused or failed: {one_line(match.group(0))}"
    return None


# The collections (slot tokens) of the regions whose blocks enclose the code running in this context:
# asyncio tasks and asyncio.to_thread inherit it, a threading.Thread starts without it.
_enclosing: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar("nsight_enclosing", default=())
_tokens = itertools.count(1)
_Phase = Literal["starting", "recording", "stopping"]


class Session:
    """An nsys profiling session, seen from a script.

    In the parent: ``Session(trace=("nvtx", "osrt")).run(["python", "train.py"], capture="manual")``.
    In the process it started: ``with Session.current().range("training"): ...`` or the module-level
    :func:`nsight_core.range`, which does nothing when there is no session.

    One collection at a time: nsys allows one per session. A region that wants to start while another
    of this process holds the collection waits for it (see :meth:`start`) and otherwise runs unprofiled;
    the lock is never held while nsys runs, so a waiting region cannot stretch another.
    """

    def __init__(self, name: str | None = None, *, trace: Sequence[str] | str = DEFAULT_TRACE,
                 sample: str | None = None, output_dir: str | Path | None = None,
                 nsys: Nsys | None = None) -> None:
        short = uuid.uuid4().hex[:8]
        self.name = sanitize(name) if name else f"nsight-{short}"
        self.trace = validate_trace(trace)
        self.sample = sample
        self._runs: Path | None = None
        if output_dir:  # absolute: the program may change directory before it opens a region
            self.output_dir = Path(output_dir).absolute()
        else:  # named by time, so the latest run is the last one listed (and `latest` points at it)
            self._runs = Path.cwd() / RUNS_DIR
            self.output_dir = self._runs / f"{time.strftime('%Y%m%d-%H%M%S')}-{self.name if name else short}"
        self._nsys = nsys
        self.captures: list[Capture] = []
        self._slot = threading.Condition()
        self._collecting: str | None = None  # the region holding the slot (starting, recording or stopping)
        self._phase: _Phase = "starting"  # what the region holding the slot is doing
        self._token = 0  # that region's collection, as Region marks the blocks it encloses
        self._running: Path | None = None  # the report base of the collection nsys is recording
        self._overlapped: list[str] = []
        self._started_at = 0.0
        # The process this session's collections belong to: a forked child inherits this object, and
        # the importer's pid covers a child forked before the session was first looked up (see start).
        self._pid = lineage.forked_from() or os.getpid()
        self._claim: int | None = None  # the descriptor holding the running collection's claim
        self.claims: Path | None = None
        """A file each region appends the report base it claimed to (`Session.run` reads it)."""

    @property
    def nsys(self) -> Nsys:
        if self._nsys is None:
            self._nsys = find_nsys()
        return self._nsys

    # -- the parent side ---------------------------------------------------------------------
    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment a process started under `nsys launch` needs to find this session."""
        env = dict(os.environ if base is None else base)
        env.update({ENV_SESSION: self.name, ENV_OUTPUT_DIR: str(self.output_dir),
                    ENV_TRACE: ",".join(self.trace), ENV_NSYS: str(self.nsys.path.absolute())})
        for variable, value in ((ENV_SAMPLE, self.sample), (ENV_CLAIMS, self.claims)):
            if value is not None:
                env[variable] = str(value)
            else:
                env.pop(variable, None)
        return env

    def command(self, argv: Sequence[str], capture: CaptureMode = DEFAULT_CAPTURE) -> list[str]:
        """The nsys command line that runs ARGV: `launch` for manual regions, `profile` for the process."""
        if not argv:
            raise ValueError("no command to profile: give the program and its arguments.")
        return [*self._nsys_argv(capture), *argv]

    def _nsys_argv(self, capture: CaptureMode) -> list[str]:
        if capture == "manual":
            return self.nsys.launch_argv(self.name, self.trace, [])
        if capture == "process":
            return self.nsys.profile_argv(self.output_dir / self.name, self.trace, self.sample, [])
        raise ValueError(f"capture={capture!r} is not a capture mode: use 'process' or 'manual'.")

    def run(self, argv: Sequence[str], capture: CaptureMode = DEFAULT_CAPTURE,
            timeout: float | None = None) -> RunResult:
        """Run ARGV under nsys; the result holds its exit code and the .nsys-rep files it wrote.

        ``capture="process"`` (the default, as for `nsight run`) records the whole run into one report;
        ``"manual"`` records only the :func:`nsight_core.range` blocks ARGV opens, one report each.
        ARGV's stdout and stderr are its own; nsys' messages go to stderr. Raises
        :class:`CommandNotFoundError` before starting anything when ARGV[0] does not exist.
        """
        nsys_argv = self._nsys_argv(capture)
        if not argv:
            raise ValueError("no command to profile: give the program and its arguments.")
        _check_runnable(argv[0])
        self._prepare_output_dir()
        if why := tempspace.shortfall():  # profiling must never be what kills the program
            return RunResult(returncode=_run_plain(argv), output_dir=self.output_dir, reports=[],
                             diagnosis=f"{argv[0]} ran unprofiled: {why}")
        with tempfile.TemporaryDirectory(prefix="nsight-claims-") as scratch:
            self.claims = Path(scratch, "claims")
            env = self.child_env() if capture == "manual" else None
            finished = run_command(nsys_argv, argv, env=env, timeout=timeout,
                                   session=self.name if capture == "manual" else None)
            bases = ([Path(line) for line in self.claims.read_text().splitlines()] if self.claims.exists()
                     else []) if capture == "manual" else [self.output_dir / self.name]
            self.claims = None
        for base in bases:  # every process of the session has ended: claims left are its killed ones'
            _clear_claim(base)
        reports = sorted((report for base in bases if (report := base.with_name(base.name + ".nsys-rep")).exists()),
                         key=lambda p: p.stat().st_mtime)
        diagnosis, returncode = None, finished.returncode
        if not finished.started:
            diagnosis = (diagnose(finished.nsys_output, self.output_dir)
                         or f"the command did not run: {_never_started(finished.nsys_output)}")
            returncode = returncode or 1
        elif not reports:
            diagnosis = diagnose(finished.nsys_output, self.output_dir) or (
                "nsys wrote no report (see its messages above)" if capture == "process"
                else "the command opened no nsight_core.range() block" if not bases
                else f"nsys wrote no trace of the region(s) the command opened ({', '.join(b.name for b in bases)}): "
                "see the warnings above; at a terminal, a second Ctrl-C while nsys writes a trace makes it drop it")
        if diagnosis:  # nsys has ended: a raw stream it named never becomes a report
            for stream in named_raw_streams(finished.nsys_output):
                stream.unlink(missing_ok=True)
        else:
            self._point_latest()
        return RunResult(returncode=returncode, output_dir=self.output_dir, reports=reports,
                         diagnosis=diagnosis)

    def _prepare_output_dir(self) -> None:
        """Create the output folder (and point `latest` at a time-named one) or say why it cannot be."""
        try:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            if not os.access(self.output_dir, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, "not writable")
        except OSError as exc:
            raise NsightError(f"cannot write the reports to {self.output_dir}: {exc.strerror or exc}. "
                              "Choose a writable folder (nsight run -o DIR, Session(output_dir=...)).") from exc

    def _point_latest(self) -> None:
        """Point `nsight-runs/latest` at this run's time-named folder: only once it holds a report."""
        if self._runs is not None:
            link = self._runs / f".latest-{uuid.uuid4().hex[:8]}"
            try:
                link.symlink_to(self.output_dir.name)
                link.replace(self._runs / LATEST)
            except OSError as exc:  # a convenience only: never a reason not to profile
                link.unlink(missing_ok=True)
                log.debug("could not point %s at %s: %s", self._runs / LATEST, self.output_dir, exc)

    # -- the child side ----------------------------------------------------------------------
    @classmethod
    def current(cls) -> Session | None:
        """The session this process was launched into, or None when it runs without nsys."""
        return _current_session()

    @property
    def collecting(self) -> bool:
        return self._running is not None

    def _exists(self) -> bool:
        listing = self.nsys.sessions()
        return any(self.name in line.split() for line in listing.splitlines()[1:])

    def _report_base(self, region: str) -> Path:
        """A path no earlier region of any process used: same-name regions never overwrite.

        A name is reserved by a claim (see ``_take_claim``) held until the stop is done; a `Session.run`
        learns of it from the line the region adds to its claims list (``claims``), so the run's
        reports are the files its own regions created, whatever other runs write into the folder.
        """
        stem = sanitize(region, fallback="region")
        for attempt in itertools.count():
            candidate = self.output_dir / (stem if attempt == 0 else f"{stem}.{attempt}")
            if any(candidate.with_name(candidate.name + s).exists() for s in _REPORT_SUFFIXES):
                continue
            if (fd := _take_claim(candidate)) is not None:
                self._claim = fd
                if self.claims is not None:
                    with self.claims.open("a") as listing:  # one short append: atomic between processes
                        listing.write(f"{candidate}\n")
                return candidate
        raise AssertionError("unreachable")

    def start(self, region: str, retry_seconds: float = START_RETRY_SECONDS) -> int:
        """Start collecting REGION; returns the token of its collection. Raises NsightError when it
        cannot (nested in the region recording, another region past the wait, nsys refused, the output
        folder is not writable); nothing is left running then.

        While another region of this process holds the collection, REGION waits: through the other's
        `nsys start` and `nsys stop` (each bounded by its own timeout, uncounted) and for up to
        RETRY_SECONDS of its block, ``START_WAIT_CAP`` at most in all. A region whose block encloses
        this call (a :class:`Region` in this context, see ``_enclosing``) can never end first: then
        REGION fails at once.
        """
        if os.getpid() != self._pid:  # checked before the slot: its lock may have been held at the fork
            raise NsysCommandError(
                f"region {region!r} was opened in a forked child (pid {os.getpid()}) of the profiled process "
                f"(pid {self._pid}): nsys records the processes it started, and its collection belongs to "
                "that process; start workers with the 'spawn' method to record regions in them")
        token = self._take_slot(region, retry_seconds)
        try:
            self._begin(region, time.monotonic() + retry_seconds)
        except BaseException:
            self._release_slot()
            raise
        self._started_at = time.monotonic()
        with self._slot:
            self._phase = "recording"
            self._slot.notify_all()
        return token

    def _take_slot(self, region: str, retry_seconds: float) -> int:
        """Wait for the slot (see :meth:`start`) and take it for REGION; its token."""
        enclosing = _enclosing.get()
        cap = time.monotonic() + START_WAIT_CAP
        counted = 0.0  # how long the holder has recorded its block while REGION waited
        with self._slot:
            while (holder := self._collecting) is not None:
                recording = self._phase == "recording"
                if self._token in enclosing:
                    raise self._overlap(region, f"{region!r} is nested in region {holder!r}, which records it")
                now = time.monotonic()
                left = min(retry_seconds - counted if recording else cap - now, cap - now)
                if left <= 0:
                    raise self._overlap(region, (
                        f"region {holder!r} is recording and nsys records one collection per session; "
                        f"{region!r} waited for {retry_seconds:.0f} s of its block") if recording else (
                        f"{region!r} waited {START_WAIT_CAP:.0f} s for region {holder!r}, which is still "
                        f"{self._phase} (an nsys command outlived its timeout)"))
                self._slot.wait(left)  # every change of holder or phase wakes it
                if recording:
                    counted += time.monotonic() - now
            self._collecting, self._phase, self._token = region, "starting", next(_tokens)
            self._overlapped = []
            return self._token

    def _overlap(self, region: str, why: str) -> NsysCommandError:
        """REGION runs unprofiled beside the holder: its capture says so (called holding the lock)."""
        self._overlapped.append(region)
        where = {"starting": f"its activity may be in {self._collecting!r}'s trace",
                 "recording": f"its activity is in {self._collecting!r}'s trace",
                 "stopping": "its activity is in no trace"}[self._phase]
        return NsysCommandError(f"{why}; {region!r} runs unprofiled, and {where}. Do not nest or overlap regions.")

    def _begin(self, region: str, deadline: float) -> None:
        """`nsys start` for REGION, retried while another process of the session records."""
        if not self._exists():
            raise NsysCommandError(
                f"nsys session {self.name!r} does not exist: this process was not started by "
                "`nsys launch` for it (nsys start would exit 0 and record nothing)."
            )
        try:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            base = self._report_base(region)
        except OSError as exc:
            raise NsysCommandError(
                f"cannot write the trace of region {region!r} to {self.output_dir}: {exc.strerror or exc}. "
                f"Give the session a writable folder (${ENV_OUTPUT_DIR}, nsight launch --output-dir)."
            ) from exc
        try:
            while True:
                try:
                    result = self.nsys.start(self.name, base, self.sample)
                except NsysCommandError:
                    self._stop_quietly()  # a start that timed out may have started after all
                    raise
                if result.returncode == 0:
                    break
                if not Nsys.is_busy(result) or time.monotonic() >= deadline:
                    reason = ("another process of this session is recording" if Nsys.is_busy(result)
                              else one_line(result.output[-1000:]))
                    raise NsysCommandError(f"nsys start for region {region!r} failed: {reason}")
                time.sleep(_START_RETRY_INTERVAL)
            self._running = base
            time.sleep(START_SETTLE_SECONDS)
            mark(LIVE_MARK)  # the user's window starts here (analysis/footprint.py)
        except BaseException:  # also KeyboardInterrupt / cancellation: leave no collection running
            if self._running is not None:
                self.abort(f"region {region!r} was interrupted while it started")
            self._release_claim(base)
            raise

    def _release_claim(self, base: Path) -> None:
        fd, self._claim = self._claim, None
        _release_claim(base, fd)

    def _stop_quietly(self) -> None:
        with contextlib.suppress(NsightError):
            self.nsys.stop(self.name, timeout=QUICK_TIMEOUT)

    def _release_slot(self) -> None:
        with self._slot:
            self._collecting = None
            self._slot.notify_all()

    def stop(self) -> Capture:
        """Stop the running collection and return its verified capture."""
        with self._slot:
            base, region = self._running, self._collecting
            if base is None or region is None:
                raise NsysCommandError("stop without a running collection in this process.")
            self._running = None
            self._phase = "stopping"  # a waiting region no longer counts this time against the block
            self._slot.notify_all()
            overlapped = tuple(self._overlapped)
        duration = time.monotonic() - self._started_at
        try:
            mark(STOP_MARK)
            with _interrupts_deferred():
                result = self.nsys.stop(self.name)
        finally:
            self._release_claim(base)
            self._release_slot()
        report = base.with_name(base.name + ".nsys-rep")
        if not report.exists():
            _remove_raw_streams(base, result.output)
            cause = diagnose(result.output, self.output_dir) or one_line(result.output[-1000:]) or "no message"
            raise NsysCommandError(f"nsys stop for region {region!r} wrote no {report} (exit "
                                   f"{result.returncode}): {cause}")
        capture = Capture(region=region, path=report, session=self.name, duration_s=duration,
                          nsys_output=result.output, overlapped=overlapped)
        self.captures.append(capture)
        return capture

    def abort(self, why: str, timeout: float = ABORT_STOP_TIMEOUT) -> None:
        """Stop the running collection, if any, within TIMEOUT and without taking a lock.

        For a signal handler or interpreter exit: the trace nsys writes is kept, nobody publishes it.
        """
        base = self._running
        if base is None:
            return
        self._running = None
        try:
            self.nsys.stop(self.name, timeout=timeout)
            kept = base.with_name(base.name + ".nsys-rep")
            outcome = f"its trace is {kept}" if kept.exists() else "nsys wrote no trace"
        except NsightError as exc:
            outcome = f"nsys stop failed: {one_line(exc)}"
        finally:
            self._release_claim(base)
        print(f"nsight: WARNING: {why}: stopped the collection of region {self._collecting!r}; {outcome}.",
              file=sys.stderr, flush=True)

    def range(self, name: str, on_capture: Callable[[Capture], None] | None = None) -> Region:
        """A `with` / `async with` block recorded as its own capture (see :class:`Region`)."""
        return Region(self, name, on_capture)


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C back while nsys writes the trace: a second Ctrl-C right after the first (which ended
    the block) killed `nsys stop` half way, so the trace was lost and its raw stream left behind. One
    that came while the block ended normally is raised once the trace is written; one that came while
    a KeyboardInterrupt already unwinds is dropped. In the main thread only (Python's signal rule)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and not isinstance(sys.exc_info()[1], KeyboardInterrupt):
        raise KeyboardInterrupt


def _take_claim(base: Path) -> int | None:
    """Reserve BASE for this process: an exclusive `flock` on BASE.claim; its descriptor, or None when
    another process holds it. The kernel frees the lock when its holder dies, however it dies, so a
    claim left by a killed process is free to take (no name shifts to `x.1`), and a reused pid can
    never fake an owner. Raises OSError when the folder cannot be written."""
    claim = base.with_name(base.name + _CLAIM)
    while True:
        fd = os.open(claim, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        with contextlib.suppress(FileNotFoundError):
            held, named = os.fstat(fd), os.stat(claim)
            if (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
                return fd
        os.close(fd)  # its holder deleted the file between our open and our lock: a new one


def _release_claim(base: Path, fd: int | None) -> None:
    """Delete BASE's claim, then let go of it (in this order: a waiter then finds no file to lock)."""
    if fd is not None:
        base.with_name(base.name + _CLAIM).unlink(missing_ok=True)
        os.close(fd)


def _clear_claim(base: Path) -> None:
    """Delete BASE's claim unless a live process holds it (after a run: those of its killed processes)."""
    with contextlib.suppress(OSError):
        _release_claim(base, _take_claim(base))


def _remove_raw_streams(base: Path, nsys_output: str) -> None:
    """After a stop that wrote no report: delete the raw .qdstrm nsys left for it, beside the report or
    the one nsys' output names (`$TMPDIR/nsys-report-XXXX.qdstrm`); with the disk full it can never
    become a report, and in a pod it only fills ephemeral storage. Only those: another session's
    stream in the same $TMPDIR is live."""
    for stream in (base.with_name(base.name + ".qdstrm"), *named_raw_streams(nsys_output)):
        with contextlib.suppress(OSError):
            stream.unlink()


_QDSTRM = re.compile(r"""['"]?(/[^'"\n]*?\.qdstrm)['"]?""")


def named_raw_streams(nsys_output: str) -> list[Path]:
    """The .qdstrm files nsys' messages name ("Generating '/tmp/nsys-report-1a2b.qdstrm'")."""
    return sorted({Path(found) for found in _QDSTRM.findall(nsys_output)})


class Region:
    """Records its block as one capture. Never raises because of profiling.

    When a collection cannot start, it logs ``could not start collection`` and runs the block
    unprofiled: at once when it is nested in the region recording (that region's ``with`` / ``async
    with`` block encloses it in this context: the same thread, or an asyncio task or
    ``asyncio.to_thread`` call started inside it), after the wait of :meth:`Session.start` when
    another region records (a thread started inside a block counts as such). ``on_capture`` runs
    after the stop, also when the block raised, before the block's exception propagates; its own
    errors are logged. A cancellation while the collection starts stops it again once the start is done.
    """

    def __init__(self, session: Session | None, name: str,
                 on_capture: Callable[[Capture], None] | None = None) -> None:
        self.session = session
        self.name = name
        self.on_capture = on_capture
        self.capture: Capture | None = None
        self._started = False
        self._token = 0
        self._pid = os.getpid()  # a forked child that leaves the block stops nothing of its parent's

    def __enter__(self) -> Self:
        self._start()
        self._enclose()
        return self

    def _start(self) -> None:
        if self.session is None:
            return
        self._pid = os.getpid()
        try:
            self._token = self.session.start(self.name)
            self._started = True
        except NsightError as exc:
            log.warning("could not start collection for region %r; running it unprofiled: %s", self.name,
                        one_line(exc))

    def _enclose(self) -> None:
        """Mark the code of the block, in the caller's context, as recorded by this region."""
        if self._started:
            _enclosing.set((*_enclosing.get(), self._token))

    def _disclose(self) -> None:
        if self._token:
            _enclosing.set(tuple(token for token in _enclosing.get() if token != self._token))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._disclose()
        self._finish()

    def _finish(self) -> None:
        if self.session is None or not self._started or os.getpid() != self._pid:
            return
        self._started = False
        try:
            self.capture = self.session.stop()
        except NsightError as error:
            log.warning("could not stop collection for region %r: %s", self.name, one_line(error))
            return
        if self.on_capture is not None:
            try:
                self.on_capture(self.capture)
            except Exception as error:
                log.warning("processing the capture of region %r failed: %s", self.name, one_line(error))

    async def __aenter__(self) -> Self:
        starting = asyncio.ensure_future(asyncio.to_thread(self._start))
        try:
            await asyncio.shield(starting)
        except asyncio.CancelledError:
            # The start cannot be interrupted; once it is done, stop what it started, in a thread of
            # its own (not daemonic: interpreter exit waits for it), whatever else is cancelled.
            starting.add_done_callback(lambda _done: threading.Thread(target=self._undo).start())
            raise
        self._enclose()  # here, not in the thread: its context is a copy of this task's
        return self

    def _undo(self) -> None:
        if self.session is not None and self._started and os.getpid() == self._pid:
            self._started = False
            with contextlib.suppress(NsightError):
                self.session.stop()
            log.warning("region %r was cancelled while its collection started; the collection was stopped",
                        self.name)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._disclose()
        await asyncio.to_thread(self._finish)


_current: Session | None = None
_current_lock = threading.Lock()
_previous_sigterm: Any = None


def _renew_lock_in_child() -> None:
    """A forked child gets a fresh lock: another thread of the parent may have held it at the fork."""
    global _current_lock
    _current_lock = threading.Lock()


os.register_at_fork(after_in_child=_renew_lock_in_child)


def _current_session() -> Session | None:
    global _current
    name = os.environ.get(ENV_SESSION)
    if not name:
        return None
    with _current_lock:
        if _current is None or _current.name != sanitize(name):
            nsys_path = os.environ.get(ENV_NSYS)
            nsys = nsys_at(nsys_path) if nsys_path else None
            _current = Session(name, trace=os.environ.get(ENV_TRACE, ",".join(DEFAULT_TRACE)).split(","),
                               sample=os.environ.get(ENV_SAMPLE), output_dir=os.environ.get(ENV_OUTPUT_DIR),
                               nsys=nsys)
            _current.claims = Path(claims) if (claims := os.environ.get(ENV_CLAIMS)) else None
    _handle_termination()
    return _current


def _handle_termination() -> None:
    """In a process launched into a session: on SIGTERM (a preempted pod) or at exit, stop the running
    collection, so its trace is flushed within the grace period instead of lost with the process.

    Python's default for SIGTERM is to die at once; the handler stops the collection, then hands the
    signal to whatever handled it before, or re-raises it so the exit status still says SIGTERM.
    Installable from the main thread only: elsewhere this is left to the next call from there.
    """
    global _previous_sigterm
    if _previous_sigterm is not None or threading.current_thread() is not threading.main_thread():
        return
    _previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
    atexit.register(_abort_current, "the process is exiting")


def _abort_current(why: str) -> None:
    """Stop this process's collection; a forked child's copy of the session is its parent's, not its own."""
    if _current is not None and _current._pid == os.getpid():
        _current.abort(why)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _abort_current("SIGTERM")
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        if os.environ.get(ENV_PRIMARY_PID) == str(os.getpid()):  # a worker's death is not the program's
            with contextlib.suppress(OSError, KeyError):  # tell `nsight launch`/`run`: nsys may exit 0
                Path(os.environ[ENV_SIGNAL_FILE]).write_text(str(signum))
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def range(name: str, on_capture: Callable[[Capture], None] | None = None) -> Region:
    """Record the block as its own capture when this process runs in an nsight session; else do nothing."""
    return Region(Session.current(), name, on_capture)


def default_output_dir(session_name: str) -> Path:
    """Where a launched session writes its reports when nobody said: a temp folder per session."""
    return Path(tempfile.gettempdir()) / "nsight" / session_name


def exec_launch(argv: Sequence[str], *, name: str, trace: Sequence[str] | str = DEFAULT_TRACE,
                sample: str | None = None, output_dir: str | Path | None = None) -> NoReturn:
    """Run ARGV under `nsys launch` and exit as it did, or replace this process with ARGV alone.

    This is what a container runtime re-execs into (Flyte's exec wrapper): a missing nsys or a bad
    setting must cost the profile, never the job, so every failure here falls back to exec'ing ARGV
    unprofiled after one warning line. When profiling, this process stays as nsys' parent instead of
    exec'ing into it: nsys exits 0 when it is signalled itself, so a preempted pod (SIGTERM to its
    first process) would report success. Staying lets SIGTERM/SIGINT be forwarded to nsys (which
    passes them on and writes the trace) and the exit status say 128+N. The session name gets a
    random suffix: a retried attempt never reuses the previous attempt's session, folder or paths.
    """
    if not argv:
        raise ValueError("no command to launch: give the program and its arguments after --.")
    try:
        unique = f"{sanitize(name)[:80]}-{uuid.uuid4().hex[:6]}"
        session = Session(unique, trace=trace, sample=sample, output_dir=output_dir or default_output_dir(unique))
        session._prepare_output_dir()
        nsys_argv, env = session._nsys_argv("manual"), session.child_env()
    except (NsightError, ValueError, OSError) as exc:
        _exec_unprofiled(argv, one_line(exc))
    if why := tempspace.shortfall():
        _exec_unprofiled(argv, why)
    finished = run_command(nsys_argv, argv, env=env, session=session.name)
    if not finished.started:
        _exec_unprofiled(argv, _never_started(finished.nsys_output))
    sys.exit(finished.returncode)


def _run_plain(argv: Sequence[str]) -> int:
    """Run ARGV without nsys; its exit code (128+N after signal N, as the profiled run would give)."""
    code = subprocess.run(list(argv), check=False).returncode
    return 128 - code if code < 0 else code


def _check_runnable(program: str) -> None:
    """Refuse, before anything starts, a PROGRAM that does not exist (127) or cannot be executed (126),
    as a shell would: nsys would report either only after its own start, as its own failure."""
    if shutil.which(program) is not None:
        return
    if os.sep in program and Path(program).is_file():
        raise CommandNotExecutableError(f"permission denied: {program!r} is not executable (chmod +x it, or run "
                                        "it through its interpreter); nothing was run.")
    raise CommandNotFoundError(f"command not found: {program!r} is not an executable file nor on PATH; "
                               "nothing was run.")


def _never_started(nsys_output: str) -> str:
    """Why the command never ran, in nsys' words (all of them where they are few: a rejected setting is
    followed by usage text), with the remedies where nsys was refused permissions."""
    words = one_line(nsys_output)
    why = f"nsys ended without starting it (its last words: {words[-600:] or 'no message'})"
    return f"{why}. {PERMISSION_REMEDIES}" if is_permission_failure(words) else why


def _exec_unprofiled(argv: Sequence[str], why: str) -> NoReturn:
    print(f"nsight: WARNING: profiling is off for this run, {argv[0]} runs unprofiled: {why}",
          file=sys.stderr, flush=True)
    os.execvp(argv[0], list(argv))


# The exec wrapper for container runtimes (Flyte's _F_EXEC_WRAPPER): a POSIX sh script, because the
# runtime execvp's the wrapper's first word and a missing `nsight` would kill the job before it
# starts. It looks for `nsight` on PATH, then beside the entrypoint (an unactivated venv), then asks
# the entrypoint's own interpreter (its #! line) for `-m nsight_core.cli` (a --target install), and
# otherwise runs the job unprofiled after one warning line. Positional: $1 session, $2 trace,
# $3 sample ('' for nsys' default), then the command. No $NAME in the script: runtimes expand those.
_WRAPPER = """__nsight_s=$1 __nsight_t=$2 __nsight_m=$3; shift 3
for __nsight_c in "$(command -v nsight)" "${1%/*}/nsight"; do
  if [ -f "$__nsight_c" ] && [ -x "$__nsight_c" ]; then
    exec "$__nsight_c" launch --session "$__nsight_s" --trace "$__nsight_t" \
      ${__nsight_m:+--sample "$__nsight_m"} -- "$@"
  fi
done
__nsight_p=$(sed -n '1s/^#![[:space:]]*//p;q' "$1" 2>/dev/null)
if [ -n "$__nsight_p" ] && $__nsight_p -c 'import nsight_core.cli' 2>/dev/null; then
  exec $__nsight_p -m nsight_core.cli launch --session "$__nsight_s" --trace "$__nsight_t" \
    ${__nsight_m:+--sample "$__nsight_m"} -- "$@"
fi
echo "nsight: WARNING: profiling is off for this run, $1 runs unprofiled: the nsight command is neither on" \
  "PATH nor beside $1, and ${__nsight_p:-its interpreter} cannot import nsight_core; install nsight-core" \
  "into the task image's Python environment" >&2
exec "$@"
"""


def exec_wrapper(session: str, trace: Sequence[str], sample: str | None) -> list[str]:
    """The words of an exec wrapper that runs the command it is given under `nsight launch`."""
    return ["/bin/sh", "-c", _WRAPPER, "nsight-wrapper", session, ",".join(validate_trace(trace)), sample or ""]


if os.environ.get(ENV_SESSION):  # imported by a launched process: usually first from its main thread
    _handle_termination()
