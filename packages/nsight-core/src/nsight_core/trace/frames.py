"""The event tables analysis reads: a protocol, so analysis depends on no loader.

``nsight_core.load_trace``'s Trace satisfies it, and so does any object with these frames (a test's frames
built by hand), which :func:`nsight_core.trace.streamed.events` makes lazy for the analysis' windows."""

from __future__ import annotations

from typing import Protocol

import polars as pl


class Window(Protocol):
    """The collection window (nsys start to stop) on the capture's clock."""

    @property
    def start_ns(self) -> int: ...
    @property
    def end_ns(self) -> int: ...


class EventTables(Protocol):
    """The frames analysis reads, with the column names of ``nsight_core.load_trace``'s Trace."""

    @property
    def kernels(self) -> pl.DataFrame: ...
    @property
    def memcpy(self) -> pl.DataFrame: ...
    @property
    def memset(self) -> pl.DataFrame: ...
    @property
    def cuda_api(self) -> pl.DataFrame: ...
    @property
    def nvtx(self) -> pl.DataFrame: ...
    @property
    def nvtx_marks(self) -> pl.DataFrame: ...
    @property
    def osrt(self) -> pl.DataFrame: ...
    @property
    def window(self) -> Window: ...
