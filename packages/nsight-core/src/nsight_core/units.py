"""The one formatter of durations, sizes, rates and shares, so that one quantity reads the same on every page, table,
chart, message and finding: sizes in binary units (nsys' tables keep their decimal ``*_mb``), durations in the largest
unit that keeps the number >= 1. No Polars, no pydantic: memory.py and the CLI's messages use it before anything heavy
is loaded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TextIO

MICROSECONDS = "µs"
ASCII_MICROSECONDS = "us"
Unit = Literal["ns", "bytes", "bytes_per_s", "fraction", "count"]
"""What a number measures, as analysis results name it (:func:`quantity`)."""

_DURATIONS = (("s", 1e9), ("ms", 1e6), (MICROSECONDS, 1e3))
_SIZES = ("KiB", "MiB", "GiB", "TiB")
MIB = 1 << 20
"""Bytes per MiB: charts that draw sizes draw them in MiB."""
BYTES_PER_NSYS_MB = 1_000_000
"""nsys' ``*_mb`` columns count decimal megabytes (bytes / 1e6)."""


def duration(ns: float | None, signed: bool = False) -> str:
    """NS nanoseconds as ``1.50 µs``, ``38.20 ms``, ``2.00 s`` or ``512 ns``; ``-`` for None; SIGNED: ``+`` before
    a positive value (a change)."""
    if ns is None:
        return "-"
    sign = "+" if signed and ns > 0 else ""
    for unit, scale in _DURATIONS:
        if abs(ns) >= scale:
            return f"{sign}{ns / scale:,.2f} {unit}"
    return f"{sign}{ns:,.0f} ns"


def size(count: float | None) -> str:
    """COUNT bytes in binary units: ``64.00 MiB``, ``1.50 GiB``, ``512 B``; ``-`` for None."""
    if count is None:
        return "-"
    scaled, unit = float(count), "B"
    for name in _SIZES:
        if abs(scaled) < 1024:
            break
        scaled, unit = scaled / 1024, name
    return f"{scaled:,.0f} {unit}" if unit == "B" else f"{scaled:,.2f} {unit}"


def nsys_megabytes(megabytes: float | None) -> str:
    """A size nsys reported in its decimal MB (the ``*_mb`` columns), in binary units like every other size."""
    return size(None if megabytes is None else megabytes * BYTES_PER_NSYS_MB)


def rate(bytes_per_s: float | None) -> str:
    """A bandwidth in binary units per second: ``1.46 GiB/s``."""
    return "-" if bytes_per_s is None else f"{size(bytes_per_s)}/s"


def quantity(value: float | None, unit: Unit | str) -> str:
    """VALUE in UNIT as a person reads it, for numbers whose unit comes with them (findings' evidence, diff deltas): a
    ``count`` has thousands separated, one decimal where not whole (a per-step mean)."""
    if value is None:
        return "-"
    formats: dict[str, Callable[[float], str]] = {"ns": duration, "bytes": size, "bytes_per_s": rate,
                                                  "fraction": lambda share: f"{share:.1%}"}
    return formats.get(unit, lambda n: f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}")(value)


def for_stream(text: str, stream: TextIO) -> str:
    """TEXT as STREAM can write it: unchanged where its encoding holds every character, else ``µs`` spelled ``us`` where
    ``µ`` is missing and any other missing character replaced, not a UnicodeEncodeError mid-table (``LANG=C``)."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        MICROSECONDS.encode(encoding)
    except UnicodeEncodeError:
        text = text.replace(MICROSECONDS, ASCII_MICROSECONDS)
    return text.encode(encoding, errors="replace").decode(encoding)
