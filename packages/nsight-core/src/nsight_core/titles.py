"""A capture's section title: its file's name, or for an unnamed run's whole-process capture the command it recorded."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from itertools import count, takewhile
from pathlib import Path

import polars as pl

from nsight_core.trace.model import Trace
from nsight_core.trace.schema import pid_of
from nsight_core.trace.streamed import events

GENERATED_NAME = re.compile(r"nsight-[0-9a-f]{8}")
"""The name a Session without one gives itself, and so the file of its whole-process capture (`nsight run`)."""


def capture_title(path: Path, trace: Trace) -> str:
    """A capture's section title: its file's name (a region's, or a named run's); for an unnamed run's (nsight-cb27362c)
    the command it recorded where the export holds it (META_DATA_CAPTURE), else the program with the most CPU events,
    named by its main thread (nsys names a process at its start: for `nsight run`, the shell)."""
    if not GENERATED_NAME.fullmatch(path.stem):
        return path.stem
    if command := recorded_command(trace.meta):
        text = shlex.join(command)
        return text if len(text) <= MAX_TITLE else text[:MAX_TITLE - 1] + "…"
    frames = events(trace)  # streamed queries: a large capture's frames are never read whole for its title
    threads = pl.concat([frame.select("thread") for frame in (frames.nvtx, frames.cuda_api, frames.osrt)])
    by_pid = (threads.group_by(pid_of(pl.col("thread")).alias("pid")).agg(pl.len())
              .sort(["len", "pid"], descending=[True, False]).head(1).collect(engine="streaming"))
    if not by_pid.height:
        return f"whole-process capture {path.stem}"
    pid = by_pid["pid"].item()
    main = trace.threads.filter((pl.col("pid") == pid) & (pl.col("tid") == pid))["name"].to_list()
    named = trace.processes.filter(pl.col("pid") == pid)["name"].to_list()
    program = next((name for name in (*main, *named) if name and Path(name).name not in NOT_PROGRAMS), None)
    return f"{program} (whole process, pid {pid})" if program else f"whole-process capture, pid {pid}"


NOT_PROGRAMS = frozenset({"sh", "bash", "dash", "nsys-launcher"})
"""What nsys may name the command's process before its exec (`nsight run`'s shell, nsys' launcher): not a program."""

MAX_TITLE = 100


def recorded_command(meta: Mapping[str, str]) -> list[str]:
    """The command a capture recorded, from the export's META (empty when it does not say): without the shell that
    `nsight run` starts it with (``/bin/sh -c SCRIPT nsight PENDING FD FD CMD...``, supervise.py)."""
    arguments = takewhile(lambda key: key in meta, (f"PROCESS_0:ARGUMENT_{index}" for index in count()))
    argv = [meta.get("PROCESS_0:COMMAND", ""), *(meta[key] for key in arguments)]
    if argv[:2] == ["/bin/sh", "-c"] and argv[3:4] == ["nsight"]:
        argv = argv[7:]
    return argv if argv and argv[0] else []
