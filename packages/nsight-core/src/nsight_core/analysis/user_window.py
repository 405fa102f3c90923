"""The part of a capture that is the user's: the profiler's own start-up and calls are not.

After `nsys start` the region sleeps START_SETTLE_SECONDS so collection is live before the user's code runs; with
`osrt` tracing that sleep shows as the user's ``clock_nanosleep``. The user's window therefore runs from the NVTX mark
``LIVE_MARK`` a region emits once collection is live to ``STOP_MARK`` before it stops, where the capture has them; else
from the first to the last CUDA or NVTX event after the region's calibration (its marks: emitted through torch, they
are there without the `nvtx` package that LIVE_MARK needs), a sleep as long as the settle wait at the start being the
profiler's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import polars as pl
from pydantic import BaseModel, Field

from nsight_core.marks import START_SETTLE_SECONDS, calibrated_until, marked_window

if TYPE_CHECKING:
    from nsight_core.trace.frames import EventTables
    from nsight_core.trace.streamed import Events

SLEEP_CALLS = r"^(clock_nanosleep|nanosleep|usleep|sleep|select|poll)$"
_SETTLE_NS = int(START_SETTLE_SECONDS * 1e9)
_SETTLE_SLACK_NS = 50_000_000
"""How far past the settle wait's length the profiler's sleep may end (process start-up jitter)."""


class UserWindow(BaseModel):
    """The user's part of the collection window, on the capture's clock."""

    start_ns: int
    end_ns: int
    source: Literal["marks", "events", "collection"] = Field(
        description="Bounded by the region's marks, by the first/last CUDA or NVTX event, or the whole window")
    profiler_ns: int = Field(description="Time of the collection window outside the user's window")

    @property
    def span_ns(self) -> int:
        return max(self.end_ns - self.start_ns, 0)


def user_window(window_start_ns: int, window_end_ns: int, marks: pl.DataFrame | pl.LazyFrame,
                events: Sequence[pl.DataFrame | pl.LazyFrame], osrt: pl.DataFrame | pl.LazyFrame) -> UserWindow:
    """The user's window within the collection window [WINDOW_START_NS, WINDOW_END_NS): from MARKS (nvtx_marks), else
    EVENTS (the user's CUDA and NVTX frames), else OSRT calls (the settle sleep). Lazy frames are streamed."""
    live, stop = marked_window(marks)
    total = window_end_ns - window_start_ns
    if live is not None:
        start, end = live, stop if stop is not None else window_end_ns
        return UserWindow(start_ns=start, end_ns=end, source="marks", profiler_ns=total - (end - start))
    # Each frame's first start and last end in the window after the calibration (no frame of all their events at once).
    after = max(window_start_ns, calibrated_until(marks) or window_start_ns)
    in_window = (pl.col("end_ns") > after) & (pl.col("start_ns") < window_end_ns)
    bounds = pl.concat([frame.lazy().select(pl.col("start_ns").filter(in_window).min(),
                                            pl.col("end_ns").filter(in_window).max()) for frame in events]
                       ).drop_nulls().collect(engine="streaming")
    if bounds.height:
        first, last = bounds.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
        start, end = max(int(first), after), min(int(last), window_end_ns)
        return UserWindow(start_ns=start, end_ns=end, source="events", profiler_ns=total - (end - start))
    settle = profiler_calls(osrt.lazy(), window_start_ns).collect(engine="streaming")
    start = int(settle.select(pl.col("end_ns").max()).item()) if settle.height else window_start_ns
    return UserWindow(start_ns=start, end_ns=window_end_ns, source="collection", profiler_ns=start - window_start_ns)


def capture_window(trace: EventTables, frames: Events | None = None) -> UserWindow:
    """The :func:`user_window` of TRACE, read from its frames or from FRAMES (:func:`trace.streamed.events`)."""
    of: EventTables | Events = trace if frames is None else frames
    return user_window(trace.window.start_ns, trace.window.end_ns, of.nvtx_marks,
                       [of.kernels, of.memcpy, of.memset, of.cuda_api, of.nvtx], of.osrt)


def profiler_calls(osrt: pl.LazyFrame, window_start_ns: int) -> pl.LazyFrame:
    """OS-runtime calls that are the profiler's settle wait: a sleep as long as it, right at the start."""
    length = pl.col("end_ns") - pl.col("start_ns")
    return osrt.filter(pl.col("name").str.contains(SLEEP_CALLS) & (length >= _SETTLE_NS * 0.8)
                       & (pl.col("end_ns") <= window_start_ns + _SETTLE_NS + _SETTLE_SLACK_NS))


def users_calls(osrt: pl.DataFrame, window: UserWindow) -> pl.DataFrame:
    """OS-runtime calls of the user's window, clipped to it (the profiler's waits left out)."""
    return osrt.filter((pl.col("end_ns") > window.start_ns) & (pl.col("start_ns") < window.end_ns)).with_columns(
        pl.col("start_ns").clip(window.start_ns, window.end_ns), pl.col("end_ns").clip(window.start_ns, window.end_ns))
