"""Profiling sessions: ``Session(...).run(argv)`` runs a command under nsys (:mod:`nsight_core.supervise`),
``Session.current().range(...)`` records a region from inside one (:mod:`nsight_core.collection`). No nsys exit code is
trusted alone: the reports a run lists are the files its regions created."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel

from nsight_core import tempspace
from nsight_core.capture import Capture
from nsight_core.claims import clear_claim, named_raw_streams, owned_folder
from nsight_core.collection import Collector, current_collector
from nsight_core.errors import CommandNotExecutableError, CommandNotFoundError, NsightError, one_line
from nsight_core.nsys import (
    DEFAULT_CAPTURE,
    DEFAULT_TRACE,
    CaptureMode,
    Nsys,
    find_nsys,
    validate_cuda_graph_trace,
    validate_python_backtrace,
)
from nsight_core.region import Region
from nsight_core.settings import LATEST, RUNS_DIR, Settings, diagnose, sanitize, validate_trace
from nsight_core.supervise import Finished, Launch, never_started, run_command, run_plain

log = logging.getLogger("nsight")


class RunResult(BaseModel):
    """What `Session.run` left behind."""

    returncode: int
    """The command's exit code; 128+N after signal N (130 for SIGINT, 143 for SIGTERM)."""
    output_dir: Path
    reports: list[Path]
    """The .nsys-rep files the run wrote, oldest first."""
    diagnosis: str | None = None
    """When no report was written: why, in words (nsys' own error when it gave one)."""


class Session:
    """An nsys profiling session, seen from a script. In the parent:
    ``Session(trace=("nvtx", "osrt")).run(["python", "train.py"], capture="manual")``; in the process it started:
    ``with Session.current().range("training"): ...`` or :func:`nsight_core.range` (nothing without a session)."""

    def __init__(self, name: str | None = None, *, trace: Sequence[str] | str = DEFAULT_TRACE,
                 sample: str | None = None, output_dir: str | Path | None = None,
                 nsys: Nsys | None = None, cuda_graph_trace: str | None = None,
                 python_backtrace: bool = False) -> None:
        short = uuid.uuid4().hex[:8]
        self.name = sanitize(name) if name else f"nsight-{short}"
        self.trace = validate_trace(trace)
        self.sample = sample
        self.cuda_graph_trace = validate_cuda_graph_trace(cuda_graph_trace)
        self.python_backtrace = validate_python_backtrace(python_backtrace, sample)
        self._runs: Path | None = None
        if output_dir:  # absolute: the program may change directory before it opens a region
            self.output_dir = Path(output_dir).absolute()
        else:  # named by time, so the latest run is the last one listed (and `latest` points at it)
            self._runs = Path.cwd() / RUNS_DIR
            self.output_dir = self._runs / f"{time.strftime('%Y%m%d-%H%M%S')}-{self.name if name else short}"
        self._nsys = nsys
        self._collector: Collector | None = None
        self._recording = self.name  # the nsys session of the run's attempt that runs now (supervise.attempt_names)

    @property
    def nsys(self) -> Nsys:
        if self._nsys is None:
            self._nsys = find_nsys()
        return self._nsys

    @property
    def settings(self) -> Settings:
        return Settings(name=self.name, trace=self.trace, output_dir=self.output_dir, sample=self.sample,
                        nsys=self.nsys.path)

    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment a process started under `nsys launch` needs to find this session."""
        return self.settings.to_env(base)

    def command(self, argv: Sequence[str], capture: CaptureMode = DEFAULT_CAPTURE) -> list[str]:
        """The nsys command line that runs ARGV: `launch` for manual regions, `profile` for the process."""
        if not argv:
            raise ValueError("no command to profile: give the program and its arguments.")
        return [*self._nsys_argv(capture), *argv]

    def _nsys_argv(self, capture: CaptureMode, name: str | None = None) -> list[str]:
        """nsys' command line in nsys session NAME (the session's own unless given); the trace of a whole process is
        named by the session whatever NAME is."""
        name = name or self.name
        if capture == "manual":
            return self.nsys.launch_argv(name, self.trace, [], self.cuda_graph_trace, self.python_backtrace)
        if capture == "process":
            return self.nsys.profile_argv(name, self.output_dir / self.name, self.trace, self.sample, [],
                                          self.cuda_graph_trace, self.python_backtrace)
        raise ValueError(f"capture={capture!r} is not a capture mode: use 'process' or 'manual'.")

    def _launch(self, capture: CaptureMode, claims: Path | None = None) -> Launch:
        """What each attempt of :func:`run_command` runs in the nsys session it names (the one a full temp folder's stop
        ends): nsys' command line, and for regions an environment naming that session and CLAIMS."""

        def attempt(name: str) -> tuple[list[str], dict[str, str] | None]:
            self._recording = name
            env = replace(self.settings, name=name, claims=claims).to_env() if capture == "manual" else None
            return self._nsys_argv(capture, name), env

        return attempt

    def run(self, argv: Sequence[str], capture: CaptureMode = DEFAULT_CAPTURE,
            timeout: float | None = None) -> RunResult:
        """Run ARGV under nsys (its stdout and stderr its own, nsys' messages on stderr); its exit code and the
        .nsys-rep files it wrote: with ``capture="process"`` the whole run's, with ``"manual"`` one for each
        :func:`nsight_core.range` block. Raises :class:`CommandNotFoundError` first where ARGV[0] does not exist."""
        self._nsys_argv(capture)  # a bad capture mode, or no nsys, raises before anything runs
        if not argv:
            raise ValueError("no command to profile: give the program and its arguments.")
        _check_runnable(argv[0])
        self._prepare_output_dir()
        if why := tempspace.shortfall():  # profiling must never be what kills the program
            return RunResult(returncode=run_plain(argv), output_dir=self.output_dir, reports=[],
                             diagnosis=f"{argv[0]} ran unprofiled: {why}")
        finished, bases = self._record(argv, capture, timeout)
        reports = sorted((report for base in bases if (report := base.with_name(base.name + ".nsys-rep")).exists()),
                         key=lambda p: p.stat().st_mtime)
        diagnosis, returncode = None, finished.returncode
        if not finished.started:
            diagnosis = (diagnose(finished.nsys_output, self.output_dir)
                         or f"the command did not run: {never_started(finished.nsys_output)}")
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
        return RunResult(returncode=returncode, output_dir=self.output_dir, reports=reports, diagnosis=diagnosis)

    def _record(self, argv: Sequence[str], capture: CaptureMode,
                timeout: float | None = None) -> tuple[Finished, list[Path]]:
        """Run ARGV under nsys (:func:`run_command`; a collection is stopped where nsys' temp folder fills); how it
        ended, and the base of every trace it recorded. Once every process of the session has ended, a raw stream nsys
        kept of one of them is imported once more: nsys' own import fails at times under load, and nothing else does."""
        with owned_folder("nsight-claims-") as scratch:
            claims = scratch / "claims"
            # A full temp folder stops the collection a region records now, in the attempt's nsys session.
            with tempspace.watch(lambda: self.nsys.stop(self._recording), once=capture == "process"):
                finished = run_command(self.name, self._launch(capture, claims), argv, timeout=timeout)
            bases = ([Path(line) for line in claims.read_text().splitlines()] if claims.exists()
                     else []) if capture == "manual" else [self.output_dir / self.name]
        for base in bases:  # claims left are those of the session's killed processes
            clear_claim(base)
            self._import_kept_stream(base)
        return finished, bases

    def _import_kept_stream(self, base: Path) -> None:
        """Import the raw stream nsys kept of BASE once more (:meth:`Nsys.import_kept_stream`); say how that went."""
        report = base.with_name(base.name + ".nsys-rep")
        written = report.exists()
        if not (again := self.nsys.import_kept_stream(base)):
            return
        if written:
            log.info("nsys' import of %s had non-fatal errors; the raw stream it kept imported cleanly into %s",
                     base.name, report)
        elif report.exists():
            log.info("nsys' import of %s failed; the raw stream it kept, imported once more, is %s", base.name, report)
        else:
            log.warning("nsys' import of %s failed, and again from the raw stream it kept: %s", base.name,
                        one_line(again.output))

    def _prepare_output_dir(self) -> None:
        """Create the output folder or say why it cannot be."""
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

    @classmethod
    def current(cls) -> Session | None:
        """The session this process was launched into, or None when it runs without nsys."""
        if (collector := current_collector()) is None:
            return None
        settings = collector.settings
        session = cls(settings.name, trace=settings.trace, sample=settings.sample, output_dir=settings.output_dir)
        session._collector = collector
        return session

    @property
    def collector(self) -> Collector:
        """This process's collection slot for the session (see :mod:`nsight_core.collection`)."""
        if self._collector is None:
            self._collector = Collector(self.settings, lambda: self.nsys)
        return self._collector

    @property
    def captures(self) -> list[Capture]:
        """The captures this process's regions recorded, oldest first."""
        return self.collector.captures

    def range(self, name: str, on_capture: Callable[[Capture], None] | None = None) -> Region:
        """A `with` / `async with` block recorded as its own capture (see :class:`Region`)."""
        return Region(self.collector, name, on_capture)


def _check_runnable(program: str) -> None:
    """Refuse, before anything starts, a PROGRAM that does not exist (127) or cannot be executed (126), as a shell
    would: nsys would report either after its own start, as its own failure."""
    if shutil.which(program) is not None:
        return
    if os.sep in program and Path(program).is_file():
        raise CommandNotExecutableError(f"permission denied: {program!r} is not executable (chmod +x it, or run "
                                        "it through its interpreter); nothing was run.")
    raise CommandNotFoundError(f"command not found: {program!r} is not an executable file nor on PATH; "
                               "nothing was run.")
