"""Passes over windows of events (analysis/windows.py) that carry a small state from each window into the next: the
loop written once, so that a pass is a pure step function of the state and one window. Each window is let go before
the next is read: a pass holds one window and the carried state, whatever the capture's size."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

State = TypeVar("State")
Window = TypeVar("Window")
Out = TypeVar("Out")


def fold(windows: Iterable[Window], state: State, step: Callable[[State, Window], State]) -> State:
    """STATE carried through WINDOWS in order, STEP making each window's from the one before: the last."""
    for window in windows:
        state = step(state, window)
        del window
    return state


def scan(windows: Iterable[Window], state: State, step: Callable[[State, Window], tuple[State, Out]]) -> Iterator[Out]:
    """What STEP makes of each of WINDOWS with the STATE carried from the windows before it, one at a time (lazily:
    its caller may let each go before the next is made)."""
    for window in windows:
        state, out = step(state, window)
        del window
        yield out
        del out
