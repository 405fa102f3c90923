"""A region: a ``with`` / ``async with`` block recorded as a capture of its own, in the collection slot of this
process (:mod:`nsight_core.collection`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Self

from nsight_core import calibration
from nsight_core.capture import Capture
from nsight_core.collection import ENCLOSING, Collector, current_collector
from nsight_core.errors import NsightError, one_line

log = logging.getLogger("nsight")


class Region:
    """Records its block as one capture; profiling never makes it raise: where a collection cannot start (nested in the
    recording region, or past :meth:`Collector.start`'s wait) it logs ``could not start collection`` and runs the block
    unprofiled. ``on_capture`` runs after the stop, even if the block raised. A cancelled start is undone."""

    def __init__(self, session: Collector | None, name: str,
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
        untraced = calibration.before_start(self.session.settings.trace)
        try:
            self._token = self.session.start(self.name)
            self._started = True
        except NsightError as exc:
            log.warning("could not start collection for region %r; running it unprofiled: %s", self.name,
                        one_line(exc))
            return
        calibration.after_start(untraced)

    def _enclose(self) -> None:
        """Mark the code of the block, in the caller's context, as recorded by this region."""
        if self._started:
            ENCLOSING.set((*ENCLOSING.get(), self._token))

    def _disclose(self) -> None:
        if self._token:
            ENCLOSING.set(tuple(token for token in ENCLOSING.get() if token != self._token))

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
            # The start cannot be interrupted: once done, stop it in a thread of its own (exit waits for it).
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


def range(name: str, on_capture: Callable[[Capture], None] | None = None) -> Region:
    """Record the block as its own capture when this process runs in an nsight session; else do nothing."""
    return Region(current_collector(), name, on_capture)
