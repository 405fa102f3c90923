"""Passes over windows of events (analysis/windows.py) that carry a small state from each window into the next: the loop
written once, so that a pass is a pure step function of the state and one window, holding one at a time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import polars as pl

State = TypeVar("State")
Window = TypeVar("Window")
Out = TypeVar("Out")


def fold(windows: Iterable[Window], state: State, step: Callable[[State, Window], State]) -> State:
    """STATE carried through WINDOWS in order, STEP making each window's from the one before: the last."""
    for window in windows:
        state = step(state, window)
        del window
    return state


def row_counts(*frames: pl.LazyFrame) -> list[int]:
    """How many rows each of FRAMES holds (one streamed query each, run together)."""
    return [frame.item() for frame in pl.collect_all([frame.select(pl.len()) for frame in frames], engine="streaming")]


def scan(windows: Iterable[Window], state: State, step: Callable[[State, Window], tuple[State, Out]]) -> Iterator[Out]:
    """STEP's output for each of WINDOWS with the STATE carried so far, lazily: each may be let go before the next."""
    for window in windows:
        state, out = step(state, window)
        del window
        yield out
        del out
