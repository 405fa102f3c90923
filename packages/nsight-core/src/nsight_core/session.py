"""Profiling sessions: running a command under nsys, and recording regions from inside it.

A parent builds the command (`nsys launch` for regions, `nsys profile` for a whole process) and the
environment that tells the child which session it is in. The child, through :meth:`Session.current`,
starts and stops collections around :meth:`Session.range` blocks. Nothing here trusts an nsys exit
code on its own: the session is checked to exist before `start`, and the report file after `stop`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal, NoReturn, Self

from pydantic import BaseModel

from nsight_core.capture import Capture
from nsight_core.errors import NsightError, NsysCommandError
from nsight_core.nsys import ENV_NSYS, Nsys, find_nsys, nsys_at, run_command

log = logging.getLogger("nsight")

ENV_SESSION = "NSIGHT_SESSION"
ENV_OUTPUT_DIR = "NSIGHT_OUTPUT_DIR"
ENV_SAMPLE = "NSIGHT_SAMPLE"
ENV_TRACE = "NSIGHT_TRACE"

DEFAULT_TRACE: tuple[str, ...] = ("cuda", "nvtx")
START_RETRY_SECONDS = 7.0
# `nsys start` returns before CUDA/NVTX collection is live in the target: on an H200 a region that
# began at once lost its first NVTX ranges and, right after another region, everything; 20 ms of
# waiting gave exact counts (bench/GPU.md). The margin is cheap next to a start (~0.3 s there).
START_SETTLE_SECONDS = 0.25
_START_RETRY_INTERVAL = 0.5
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
_REPORT_SUFFIXES = (".nsys-rep", ".qdstrm", ".qdrep")

CaptureMode = Literal["process", "manual"]


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


def _claim(base: Path) -> Path:
    """A marker that reserves BASE for one region until its report exists (names may contain dots)."""
    return base.with_name(base.name + ".claim")


class RunResult(BaseModel):
    """What `Session.run` left behind."""

    returncode: int
    output_dir: Path
    reports: list[Path]


class Session:
    """An nsys profiling session, seen from a script.

    In the parent: ``Session(trace=("nvtx", "osrt")).run(["python", "train.py"], capture="manual")``.
    In the process it started: ``with Session.current().range("training"): ...`` or the module-level
    :func:`nsight_core.range`, which does nothing when there is no session.
    """

    def __init__(self, name: str | None = None, *, trace: Sequence[str] | str = DEFAULT_TRACE,
                 sample: str | None = None, output_dir: str | Path | None = None,
                 nsys: Nsys | None = None) -> None:
        self.name = sanitize(name) if name else f"nsight-{uuid.uuid4().hex[:12]}"
        self.trace = validate_trace(trace)
        self.sample = sample
        self.output_dir = Path(output_dir) if output_dir else Path.cwd() / "nsight-runs" / self.name
        self._nsys = nsys
        self.captures: list[Capture] = []
        self._lock = threading.Lock()
        self._collecting: str | None = None
        self._base = self.output_dir / "region"
        self._started_at = 0.0

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
                    ENV_TRACE: ",".join(self.trace), ENV_NSYS: str(self.nsys.path)})
        if self.sample is not None:
            env[ENV_SAMPLE] = self.sample
        else:
            env.pop(ENV_SAMPLE, None)
        return env

    def command(self, argv: Sequence[str], capture: CaptureMode = "manual") -> list[str]:
        """The nsys command line that runs ARGV: `launch` for manual regions, `profile` for the process."""
        if not argv:
            raise ValueError("no command to profile: give the program and its arguments.")
        if capture == "manual":
            return self.nsys.launch_argv(self.name, self.trace, argv)
        if capture == "process":
            return self.nsys.profile_argv(self.output_dir / self.name, self.trace, self.sample, argv)
        raise ValueError(f"capture={capture!r} is not a capture mode: use 'process' or 'manual'.")

    def run(self, argv: Sequence[str], capture: CaptureMode = "manual", timeout: float | None = None) -> RunResult:
        """Run ARGV under nsys and return the reports it wrote (one per region, or one for the process)."""
        command = self.command(argv, capture)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        before = set(self.output_dir.glob("*.nsys-rep"))
        env = self.child_env() if capture == "manual" else None
        returncode = run_command(command, env=env, timeout=timeout)
        reports = sorted(set(self.output_dir.glob("*.nsys-rep")) - before, key=lambda p: p.stat().st_mtime)
        return RunResult(returncode=returncode, output_dir=self.output_dir, reports=reports)

    # -- the child side ----------------------------------------------------------------------
    @classmethod
    def current(cls) -> Session | None:
        """The session this process was launched into, or None when it runs without nsys."""
        return _current_session()

    @property
    def collecting(self) -> bool:
        return self._collecting is not None

    def _exists(self) -> bool:
        listing = self.nsys.sessions()
        return any(self.name in line.split() for line in listing.splitlines()[1:])

    def _report_base(self, region: str) -> Path:
        """A path no earlier region of any process used: same-name regions never overwrite."""
        stem = sanitize(region, fallback="region")
        for attempt in itertools.count():
            candidate = self.output_dir / (stem if attempt == 0 else f"{stem}.{attempt}")
            claim = _claim(candidate)
            if any(candidate.with_name(candidate.name + s).exists() for s in _REPORT_SUFFIXES):
                continue
            try:
                claim.touch(exist_ok=False)
            except FileExistsError:
                continue
            return candidate
        raise AssertionError("unreachable")

    def start(self, region: str, retry_seconds: float = START_RETRY_SECONDS) -> None:
        """Start collecting REGION. Raises NsightError when nsys cannot start it (busy past the retry)."""
        with self._lock:
            if not self._exists():
                raise NsysCommandError(
                    f"nsys session {self.name!r} does not exist: this process was not started by "
                    "`nsys launch` for it (nsys start would exit 0 and record nothing)."
                )
            self.output_dir.mkdir(parents=True, exist_ok=True)
            base = self._report_base(region)
            deadline = time.monotonic() + retry_seconds
            while True:
                result = self.nsys.start(self.name, base, self.sample)
                if result.returncode == 0:
                    break
                if not Nsys.is_busy(result) or time.monotonic() >= deadline:
                    _claim(base).unlink(missing_ok=True)
                    reason = "another collection is running in this session" if Nsys.is_busy(result) \
                        else result.output[-1000:]
                    raise NsysCommandError(f"nsys start for region {region!r} failed: {reason}")
                time.sleep(_START_RETRY_INTERVAL)
            time.sleep(START_SETTLE_SECONDS)
            self._collecting = region
            self._base = base
            self._started_at = time.monotonic()

    def stop(self) -> Capture:
        """Stop the running collection and return its verified capture."""
        with self._lock:
            if self._collecting is None:
                raise NsysCommandError("stop without a running collection in this process.")
            region, base = self._collecting, self._base
            self._collecting = None
            duration = time.monotonic() - self._started_at
            try:
                result = self.nsys.stop(self.name)
            finally:
                _claim(base).unlink(missing_ok=True)
            report = base.with_name(base.name + ".nsys-rep")
            if not report.exists():
                raise NsysCommandError(
                    f"nsys stop for region {region!r} wrote no {report} (exit {result.returncode}): "
                    f"{result.output[-1000:]}"
                )
            capture = Capture(region=region, path=report, session=self.name, duration_s=duration)
            self.captures.append(capture)
            return capture

    def range(self, name: str, on_capture: Callable[[Capture], None] | None = None) -> Region:
        """A `with` / `async with` block recorded as its own capture (see :class:`Region`)."""
        return Region(self, name, on_capture)


class Region:
    """Records its block as one capture. Never raises because of profiling.

    When a collection cannot start (nested regions: after a ~7 s retry), it logs
    ``could not start collection`` and runs the block unprofiled. ``on_capture`` runs after the stop,
    also when the block raised, before the block's exception propagates; its own errors are logged.
    """

    def __init__(self, session: Session | None, name: str,
                 on_capture: Callable[[Capture], None] | None = None) -> None:
        self.session = session
        self.name = name
        self.on_capture = on_capture
        self.capture: Capture | None = None
        self._started = False

    def __enter__(self) -> Self:
        if self.session is None:
            return self
        try:
            self.session.start(self.name)
            self._started = True
        except NsightError as exc:
            log.warning("could not start collection for region %r; running it unprofiled: %s", self.name, exc)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.session is None or not self._started:
            return
        self._started = False
        try:
            self.capture = self.session.stop()
        except NsightError as error:
            log.warning("could not stop collection for region %r: %s", self.name, error)
            return
        if self.on_capture is not None:
            try:
                self.on_capture(self.capture)
            except Exception:
                log.warning("processing the capture of region %r failed", self.name, exc_info=True)

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.__enter__)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await asyncio.to_thread(self.__exit__, exc_type, exc, tb)


_current: Session | None = None
_current_lock = threading.Lock()


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
        return _current


def range(name: str, on_capture: Callable[[Capture], None] | None = None) -> Region:
    """Record the block as its own capture when this process runs in an nsight session; else do nothing."""
    return Region(Session.current(), name, on_capture)


def default_output_dir(session_name: str) -> Path:
    """Where a launched session writes its reports when nobody said: a temp folder per session."""
    return Path(tempfile.gettempdir()) / "nsight" / session_name


def exec_launch(argv: Sequence[str], *, name: str, trace: Sequence[str] | str = DEFAULT_TRACE,
                sample: str | None = None, output_dir: str | Path | None = None) -> NoReturn:
    """Replace this process with ARGV under `nsys launch`, or with ARGV alone when that cannot work.

    This is what a container runtime re-execs into (Flyte's exec wrapper): a missing nsys or a bad
    setting must cost the profile, never the job, so every failure here falls back to running ARGV
    unprofiled after one warning line.
    """
    if not argv:
        raise ValueError("no command to launch: give the program and its arguments after --.")
    command, env = list(argv), dict(os.environ)
    try:
        session = Session(name, trace=trace, sample=sample,
                          output_dir=output_dir or default_output_dir(sanitize(name)))
        session.nsys.check_launch(session.name, session.trace)
        command, env = session.command(argv, "manual"), session.child_env()
        session.output_dir.mkdir(parents=True, exist_ok=True)
    except (NsightError, ValueError, OSError) as exc:
        reason = " ".join(str(exc).split())  # one line, whatever nsys printed
        print(f"nsight: WARNING: profiling is off for this run, {argv[0]} runs unprofiled: {reason}",
              file=sys.stderr, flush=True)
    os.execvpe(command[0], command, env)
