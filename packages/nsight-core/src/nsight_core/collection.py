"""Recording regions from inside a process of a session: the collection slot.

nsys records one collection per session at a time. A launched process (:mod:`nsight_core.session`) holds one
:class:`Collector`: the slot its regions take in turn, the `nsys start`/`stop` around each block, and the handlers
stopping one left open at SIGTERM or exit; a forked child (:mod:`nsight_core.lineage`) never acts for its parent."""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import functools
import itertools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from nsight_core import lineage
from nsight_core.capture import Capture
from nsight_core.claims import REPORT_SUFFIXES, release_claim, remove_raw_streams, take_claim
from nsight_core.errors import NsightError, NsysCommandError, one_line
from nsight_core.marks import LIVE_MARK, START_SETTLE_SECONDS, STOP_MARK, mark
from nsight_core.nsys import QUICK_TIMEOUT, STOP_TIMEOUT, Nsys, find_nsys, nsys_at
from nsight_core.settings import ENV_OUTPUT_DIR, ENV_SESSION, Settings, diagnose, sanitize
from nsight_core.supervise import ENV_PRIMARY_PID, ENV_SIGNAL_FILE

log = logging.getLogger("nsight")

START_RETRY_SECONDS = 7.0
"""How long a region waits for another one's block (its `nsys start` and `nsys stop` waited out, uncounted), and how
long `nsys start` is retried while another process of the session records."""
START_WAIT_CAP = 2 * START_RETRY_SECONDS + 4 * QUICK_TIMEOUT + STOP_TIMEOUT
"""The longest a region ever waits for another of its process: the bounds of the other's start, block and stop summed,
reached only when an nsys command outlives its own timeout."""
_START_RETRY_INTERVAL = 0.5
ABORT_STOP_TIMEOUT = 20.0  # the stop must fit a pod's grace period between SIGTERM and SIGKILL (30 s by default)

# The collections (slot tokens) of the regions whose blocks enclose the code running in this context: asyncio tasks and
# asyncio.to_thread inherit it, a threading.Thread starts without it.
ENCLOSING: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar("nsight_enclosing", default=())
_tokens = itertools.count(1)
_Phase = Literal["starting", "recording", "stopping"]


class Collector:
    """This process's collection slot in its nsys session, one collection at a time: a region that wants to start while
    another holds it waits (:meth:`start`), else runs unprofiled; the lock is never held while nsys runs."""

    def __init__(self, settings: Settings, nsys: Callable[[], Nsys]) -> None:
        """NSYS finds nsys when a region first needs it: a missing one costs that region's profile, not the look-up."""
        self.settings = settings
        self.name = settings.name
        self.output_dir = settings.output_dir
        self._nsys = nsys
        self.captures: list[Capture] = []
        self._slot = threading.Condition()
        self._collecting: str | None = None  # the region holding the slot (starting, recording or stopping)
        self._phase: _Phase = "starting"  # what the region holding the slot is doing
        self._token = 0  # that region's collection, as Region marks the blocks it encloses
        self._running: Path | None = None  # the report base of the collection nsys is recording
        self._overlapped: list[str] = []
        self._started_at = 0.0
        self._pid = lineage.forked_from() or os.getpid()  # whose collections these are (a forked child inherits them)
        self._claim: int | None = None  # the descriptor holding the running collection's claim
        self._named: set[Path] = set()  # names taken here: one whose stop wrote nothing stays named in its warning

    @property
    def nsys(self) -> Nsys:
        return self._nsys()

    def _report_base(self, region: str) -> Path:
        """A path no earlier region of any process used, nor one of this process whose stop wrote nothing, claimed
        (:mod:`nsight_core.claims`) until its stop is done and listed in the run's ``claims``: the run's reports."""
        stem = sanitize(region, fallback="region")
        for attempt in itertools.count():
            candidate = self.output_dir / (stem if attempt == 0 else f"{stem}.{attempt}")
            if candidate in self._named or any(candidate.with_name(candidate.name + s).exists()
                                                for s in REPORT_SUFFIXES):
                continue
            if (fd := take_claim(candidate)) is not None:
                self._claim = fd
                self._named.add(candidate)
                if self.settings.claims is not None:
                    with self.settings.claims.open("a") as listing:  # one short append: atomic between processes
                        listing.write(f"{candidate}\n")
                return candidate
        raise AssertionError("unreachable")

    def start(self, region: str, retry_seconds: float = START_RETRY_SECONDS) -> int:
        """Start collecting REGION; the token of its collection. Raises NsightError, leaving nothing running, when it
        cannot. While another region of this process holds the collection, REGION waits through its start and stop and
        up to RETRY_SECONDS of its block, ``START_WAIT_CAP`` in all; one enclosing this call (``ENCLOSING``) never ends
        first, so REGION then fails at once."""
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
        enclosing = ENCLOSING.get()
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
        if not any(self.name in line.split() for line in self.nsys.sessions().splitlines()[1:]):
            raise NsysCommandError(f"nsys session {self.name!r} does not exist: this process was not started by "
                                   "`nsys launch` for it (nsys start would exit 0 and record nothing).")
        try:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            base = self._report_base(region)
        except OSError as exc:
            raise NsysCommandError(f"cannot write the trace of region {region!r} to {self.output_dir}: "
                                   f"{exc.strerror or exc}. Give the session a writable folder (${ENV_OUTPUT_DIR}, "
                                   "nsight launch --output-dir).") from exc
        try:
            while True:
                try:
                    result = self.nsys.start(self.name, base, self.settings.sample)
                except NsysCommandError:
                    with contextlib.suppress(NsightError):  # a start that timed out may have started after all
                        self.nsys.stop(self.name, timeout=QUICK_TIMEOUT)
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
            mark(LIVE_MARK)  # the user's window starts here (analysis/user_window.py)
        except BaseException:  # also KeyboardInterrupt / cancellation: leave no collection running
            if self._running is not None:
                self.abort(f"region {region!r} was interrupted while it started")
            else:  # nothing recorded under the name, nothing warns of it: free for the next region
                self._named.discard(base)
            self._release_claim(base)
            raise

    def _release_claim(self, base: Path) -> None:
        fd, self._claim = self._claim, None
        release_claim(base, fd)

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
        if (again := self.nsys.import_kept_stream(base)) and report.exists():
            result = again  # what the capture keeps as nsys' words on it is the import that wrote it
        if not report.exists():
            remove_raw_streams(base, result.output)
            cause = diagnose(result.output, self.output_dir) or one_line(result.output[-1000:]) or "no message"
            raise NsysCommandError(f"nsys stop for region {region!r} wrote no {report} (exit "
                                   f"{result.returncode}): {cause}")
        capture = Capture(region=region, path=report, session=self.name, duration_s=duration,
                          nsys_output=result.output, overlapped=overlapped)
        self.captures.append(capture)
        return capture

    def abort(self, why: str, timeout: float = ABORT_STOP_TIMEOUT) -> None:
        """Stop the running collection, if any, within TIMEOUT and without a lock (a signal handler, the exit); its
        trace kept, unpublished. A stream nsys failed to import is imported again in the time left: none later would."""
        if (base := self._running) is None:
            return
        self._running = None
        deadline = time.monotonic() + timeout
        try:
            self.nsys.stop(self.name, timeout=timeout)
            kept = base.with_name(base.name + ".nsys-rep")
            self.nsys.import_kept_stream(base, timeout=max(deadline - time.monotonic(), 1.0))
            outcome = f"its trace is {kept}" if kept.exists() else "nsys wrote no trace"
        except NsightError as exc:
            outcome = f"nsys stop failed: {one_line(exc)}"
        finally:
            self._release_claim(base)
        print(f"nsight: WARNING: {why}: stopped the collection of region {self._collecting!r}; {outcome}.",
              file=sys.stderr, flush=True)


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C back while nsys writes the trace (a second one kills `nsys stop` half way, losing it): raised once
    the trace is written where the block ended normally, else dropped. Main thread only (Python's rule)."""
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


_current: Collector | None = None
_current_lock = threading.Lock()
_previous_sigterm: Any = None


def _mask_sigterm(how: int) -> None:
    """Around a fork once the SIGTERM handler is ours, SIGTERM blocked in the forking thread (HOW: SIG_BLOCK, then
    SIG_UNBLOCK in the parent) stays pending: CPython drops one that reaches a child before its re-initialisation."""
    if _previous_sigterm is not None:
        signal.pthread_sigmask(how, {signal.SIGTERM})


def _after_fork_in_child() -> None:
    """A forked child: a fresh lock (another thread may have held it at the fork), SIGTERM handled as before nsight (the
    collection is the parent's; the default kills at once), then any SIGTERM held back during the fork delivered."""
    global _current_lock, _previous_sigterm
    _current_lock = threading.Lock()
    if _previous_sigterm is None:
        return
    with contextlib.suppress(ValueError, OSError):  # not the main thread: the handler stays, and passes on
        signal.signal(signal.SIGTERM, _previous_sigterm)
        _previous_sigterm = None
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


os.register_at_fork(before=lambda: _mask_sigterm(signal.SIG_BLOCK),
                    after_in_parent=lambda: _mask_sigterm(signal.SIG_UNBLOCK), after_in_child=_after_fork_in_child)


def current_collector() -> Collector | None:
    """This process's slot in the session it was launched into (:meth:`Settings.from_env`), or None when it runs without
    nsys; the first look-up from the main thread installs the SIGTERM and exit handlers."""
    global _current
    if (settings := Settings.from_env()) is None:
        return None
    with _current_lock:
        if _current is None or _current.name != settings.name:
            found = settings.nsys
            _current = Collector(settings, functools.cache(lambda: (nsys_at(str(found)) if found else None)
                                                           or find_nsys()))
    _handle_termination()
    return _current


def _handle_termination() -> None:
    """In a launched process, on SIGTERM (a preempted pod) or at exit: stop the running collection so its trace is
    flushed in the grace period, then hand the signal to its previous handler or re-raise it. Main thread only."""
    global _previous_sigterm
    if _previous_sigterm is not None or threading.current_thread() is not threading.main_thread():
        return
    _previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
    atexit.register(_abort_current, "the process is exiting")


def _abort_current(why: str) -> None:
    """Stop this process's collection; a forked child's copy of the slot is its parent's, not its own."""
    if _current is not None and _current._pid == os.getpid():
        _current.abort(why)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _abort_current("SIGTERM")
    if callable(_previous_sigterm):
        _previous_sigterm(signum, frame)
    elif _previous_sigterm != signal.SIG_IGN:
        if os.environ.get(ENV_PRIMARY_PID) == str(os.getpid()):  # a worker's death is not the program's
            with contextlib.suppress(OSError, KeyError):  # tell `nsight launch`/`run`: nsys may exit 0
                Path(os.environ[ENV_SIGNAL_FILE]).write_text(str(signum))
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


if os.environ.get(ENV_SESSION):  # imported by a launched process: usually first from its main thread
    _handle_termination()
