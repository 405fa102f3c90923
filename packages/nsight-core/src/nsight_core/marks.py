"""NVTX marks a region emits about itself (in domain ``OWN_DOMAIN``), so an analysis can tell the profiler's time from
the user's: ``LIVE_MARK`` once collection is live, ``STOP_MARK`` just before `nsys stop`; the user's block lies between
(analysis/user_window.py). Emitted with the `nvtx` extra, else skipped; a failing mark never reaches the user's code."""

from __future__ import annotations

import functools
import importlib.util
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

log = logging.getLogger("nsight")

OWN_DOMAIN = "nsight"
LIVE_MARK = "collection live"
STOP_MARK = "collection stopping"
CALIBRATION_MARK = "nsight: tracing cost per CUDA call:"
"""Followed by the cost in ns (nsight_core.calibration); emitted through torch's NVTX, in the default domain."""
HOST_SPEED_MARK = "nsight: host time for the same Python once live:"
"""Followed by the ratio, once collection was live against just before, of the host's time for one pure-Python loop
(``1.000 x``: unchanged); emitted beside CALIBRATION_MARK."""
CALIBRATION_RANGE = "nsight: calibration"
"""The NVTX range of the calibration's traced launches."""


def is_calibration_range(name: str = "name") -> pl.Expr:
    """Whether a range (its NAME column, and its domain) is CALIBRATION_RANGE: nsight's own work, in the default
    domain, never the program's."""
    import polars as pl

    return (pl.col(name) == CALIBRATION_RANGE) & (pl.col("domain") == "")


@functools.cache
def _emitter() -> Callable[[str], None] | None:
    if importlib.util.find_spec("nvtx") is None:
        return None
    import nvtx  # the optional `nvtx` extra

    return lambda message: nvtx.mark(message=message, domain=OWN_DOMAIN)


def mark(message: str) -> None:
    """Emit MESSAGE as an NVTX mark in OWN_DOMAIN, if the `nvtx` package is there; never raise."""
    if (emit := _emitter()) is None:
        return
    try:
        emit(message)
    except Exception as exc:  # a label must never break the user's job
        log.debug("could not emit the NVTX mark %r: %s", message, exc)


def marked_window(marks: pl.DataFrame | pl.LazyFrame) -> tuple[int | None, int | None]:
    """Where the user's block began and ended by MARKS (``nvtx_marks``: time_ns, name, domain): the last LIVE_MARK and
    the first STOP_MARK, each None where there is none. Polars is imported here: the user's process emits marks only."""
    import polars as pl

    own = marks.lazy().filter(pl.col("domain") == OWN_DOMAIN)
    found = own.select(pl.col("time_ns").filter(pl.col("name") == LIVE_MARK).max().alias("live"),
                       pl.col("time_ns").filter(pl.col("name") == STOP_MARK).min().alias("stop")).collect()
    live, stop = found.row(0)
    return (None if live is None else int(live)), (None if stop is None else int(stop))


def _last_value(marks: pl.DataFrame | pl.LazyFrame, prefix: str, unit: str) -> float | None:
    """The number before UNIT in the last of MARKS whose name starts with PREFIX, or None."""
    import polars as pl

    found = (marks.lazy().filter(pl.col("name").str.starts_with(prefix)).sort("time_ns").last()
             .select(pl.col("name").str.extract(rf"(\d+(?:\.\d+)?) {unit}$").cast(pl.Float64)).collect())
    return float(found.item()) if found.height and found.item() is not None else None


def calibrated_until(marks: pl.DataFrame | pl.LazyFrame) -> int | None:
    """When the region's calibration was done (the last CALIBRATION_MARK or HOST_SPEED_MARK of MARKS), or None."""
    import polars as pl

    done = (marks.lazy().filter(pl.col("name").str.starts_with(CALIBRATION_MARK)
                                | pl.col("name").str.starts_with(HOST_SPEED_MARK))
            .select(pl.col("time_ns").max()).collect().item())
    return None if done is None else int(done)


def calibrated_ns(marks: pl.DataFrame | pl.LazyFrame) -> float | None:
    """What tracing cost each CUDA call as the region measured it (the last CALIBRATION_MARK of MARKS), or None."""
    return _last_value(marks, CALIBRATION_MARK, "ns")


def host_slowdown(marks: pl.DataFrame | pl.LazyFrame) -> float | None:
    """How many times longer the host took for the same pure-Python loop once collection was live than just before
    (the last HOST_SPEED_MARK of MARKS), or None where the region did not measure it."""
    return _last_value(marks, HOST_SPEED_MARK, "x")


START_SETTLE_SECONDS = 0.25
"""How long a region waits after `nsys start` returns before its block runs: collection is not live at once, and a
region that starts at once loses its first events. The analysis knows the wait as the profiler's own time."""
