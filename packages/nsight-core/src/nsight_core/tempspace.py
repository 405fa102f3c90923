"""nsys' temp space: whether the folder nsys streams a recording into has room for one.

nsys writes every collection first as a raw stream, ``$TMPDIR/nsys-report-XXXX.qdstrm``. When that folder fills up (a
pod's small tmpfs) nsys' injected library crashes the profiled program, so the space is checked before anything starts
(too little: the program runs unprofiled), and :func:`watch` stops the collection before the folder fills."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from nsight_core.errors import NsightError
from nsight_core.memory import parse_size
from nsight_core.units import size

ENV_MIN_TEMP_SPACE = "NSIGHT_MIN_TEMP_SPACE"
MIN_TEMP_SPACE = 256 * 1024**2
"""The free space nsys' temp folder needs by default, for the raw stream of a capture of a few minutes (which grows
faster than the `.nsys-rep` it becomes)."""


def nsys_temp_dir() -> Path:
    """The folder nsys streams into: $TMPDIR, else /tmp (nsys has no other fallback)."""
    return Path(os.environ.get("TMPDIR") or "/tmp")


def needed() -> int | None:
    """The free space a recording needs to start: ``NSIGHT_MIN_TEMP_SPACE`` (``1G``, ``64M``; one that is not
    a size counts as unset), else MIN_TEMP_SPACE; None when it is ``off`` (no check, no watchdog)."""
    setting = os.environ.get(ENV_MIN_TEMP_SPACE, "").strip()
    if setting.lower() == "off":
        return None
    try:
        return parse_size(setting) if setting else MIN_TEMP_SPACE
    except NsightError:
        return MIN_TEMP_SPACE


def shortfall() -> str | None:
    """Why nsys' temp folder is too small to record into, in words with the remedy; None when it has room."""
    if (wanted := needed()) is None:
        return None
    folder = nsys_temp_dir()
    try:
        free = shutil.disk_usage(folder).free
        with tempfile.TemporaryFile(dir=folder):
            pass
    except FileNotFoundError:
        return None  # a folder that does not exist: nsys' own message says so
    except OSError as exc:  # read-only, not ours: that is the cause to name, whatever the space
        return (f"nsys' temp folder {folder} cannot be written ({exc.strerror or exc}): point TMPDIR at a "
                "writable folder")
    return None if free >= wanted else (
        f"nsys' temp folder {folder} has {size(free)} free and a recording needs at least {size(wanted)} there (a full "
        f"one crashes the program): point TMPDIR at a larger folder, or set {ENV_MIN_TEMP_SPACE} to the space nsys may "
        "use (e.g. 64M) or off")


WATCH_INTERVAL = 0.2
"""Seconds between two looks at the temp folder's free space while nsys records."""


@contextlib.contextmanager
def watch(stop: Callable[[], object], *, once: bool = False) -> Iterator[None]:
    """While the block runs (nsys records), call STOP when nsys' temp folder falls below an eighth of :func:`needed`.
    STOP ends the collection running then (`nsys stop`, which keeps the trace so far); the program runs on, and a later
    region may record again once there is room. ONCE: the session has one collection only (`nsys profile`), so the first
    STOP ends the watch too. One warning, the first time. Off with ``NSIGHT_MIN_TEMP_SPACE=off``."""
    if (wanted := needed()) is None:
        yield
        return
    # An eighth of what a recording needs to start: left for nsys to finish its stream and for the program's temp files.
    done, limit, folder = threading.Event(), wanted // 8, nsys_temp_dir()

    def look() -> None:
        warned = False
        while not done.wait(WATCH_INTERVAL):
            with contextlib.suppress(OSError):
                if (free := shutil.disk_usage(folder).free) >= limit:
                    continue
                if not warned:
                    print(f"nsight: WARNING: nsys' temp folder {folder} is down to {size(free)} free (less than "
                          f"{size(limit)}): stopped the collection so far, its trace is kept; point TMPDIR at a "
                          "larger folder to record more", file=sys.stderr, flush=True)
                    warned = True
                with contextlib.suppress(NsightError):
                    stop()
                if once:
                    return

    watcher = threading.Thread(target=look, name="nsight-temp-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
