"""Recording part of a task: ``nsys.range(name)`` around the code under investigation.

With ``@nsys_profile(capture="manual")`` the task runs inside an nsys session that records nothing
until a block like this starts a collection. Each run of a block is its own capture: its own
.nsys-rep, its own ``Nsight region: <name>`` section in the GPU Profile tab, and its own traced step
holding the trace. Write ``async with`` in an ``async def`` task and ``with`` in a ``def`` task.

Outside a profiled run (a local ``flyte.run``, nsys missing from the image) the block runs as plain
code. Starting and stopping go through nsight-core's ``Region``, which never raises for profiling: a
nested block logs ``could not start collection`` at once and runs unprofiled inside the collection
already running; an overlapping one (``asyncio.gather``, threads) waits for the other to stop (its
start and stop, and up to about seven seconds of its body), then records on its own.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from flyteplugins.nsight import _flyte_io
from nsight_core import Region


class ProfiledRange:
    """One recorded block. The sync and async protocols differ only in how they wait."""

    def __init__(self, name: str, title: str) -> None:
        self.name = name
        self.title = title
        self._state: _flyte_io.Profiling | None = None
        self._region: Region | None = None
        self._foreign = False

    def _open(self) -> Region | None:
        self._state = _flyte_io.active.get()
        self._foreign = self._state is None and _flyte_io.task_state is not None
        if self._foreign:  # a thread the task body started: context variables did not follow it
            self._state = _flyte_io.task_state
        if self._state is None:  # the task already logged, once, why this run is unprofiled
            return None
        self._region = self._state.session.range(self.name)
        return self._region

    def __enter__(self) -> Self:
        region = self._open()
        if region is not None:
            region.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._region is None or self._state is None:
            return
        self._region.__exit__(exc_type, exc, tb)
        if self._region.capture is None:
            return
        if self._foreign:
            _flyte_io.in_task_context(self._state, _flyte_io.publish_sync, self._state, self._region.capture,
                                      self.title)
        else:
            _flyte_io.publish_sync(self._state, self._region.capture, self.title)

    async def __aenter__(self) -> Self:
        region = self._open()
        if region is not None:
            await region.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._region is None or self._state is None:
            return
        await self._region.__aexit__(exc_type, exc, tb)
        if self._region.capture is not None:
            await _flyte_io.publish(self._state, self._region.capture, self.title)


def range(name: str) -> ProfiledRange:
    """Record the block as its own capture, titled ``Nsight region: <name>`` in the GPU Profile tab."""
    return ProfiledRange(name, f"Nsight region: {name}")
