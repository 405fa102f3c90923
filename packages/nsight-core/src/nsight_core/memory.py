"""Whether a capture's export and summary fit in the memory allowed, checked before each.

Why: the export and the summary run inside the user's task, in its container, and grow with the capture; a container
past its memory limit is killed with the job profiled. So each step's estimate (the export's from the trace's size, the
summary's from the export's tables) is compared with what is allowed before it starts. A capture whose events would
not fit is scanned from disk in windows instead (trace/spill.py); one that would not fit even so is refused with an
error that gives both numbers, and the trace is kept.

What is allowed is a fixed budget (``DEFAULT_SUMMARY_BYTES``), not the machine's free memory, so that a capture is read
the same way on any machine with room for it; it is lowered only where the container's limit or the host leaves less.
``NSIGHT_SUMMARY_MEMORY`` sets another budget (``2G``, ``512M``: powers of 1024), or ``off`` to go ahead whatever it
needs."""

from __future__ import annotations

import os
import re
from pathlib import Path

from nsight_core.errors import NotEnoughMemoryError, NsightError
from nsight_core.units import size as _size

ENV_SUMMARY_MEMORY = "NSIGHT_SUMMARY_MEMORY"
DEFAULT_SUMMARY_BYTES = 1 << 30
"""What a summary may take unless NSIGHT_SUMMARY_MEMORY says otherwise: a capture whose events would need more is
scanned from disk in windows, which needs far less (``STREAMED_SUMMARY_BYTES``)."""
EXPORT_BASE_BYTES = 32 << 20
"""What nsys' export takes whatever the trace."""
EXPORT_BYTES_PER_TRACE_BYTE = {"arrowdir": 20, "sqlite": 0}
"""nsys' export's peak per byte of the .nsys-rep, by export type, with a margin: the arrow export holds each table
whole, the SQLite export streams its rows."""
SUMMARY_BASE_BYTES = 64 << 20
"""What a summary takes whatever its size, beside the per-thread part below (its frames', reports' and page's
fixed costs). The imports are not in it: a process that checks has made them."""
SUMMARY_BYTES_PER_THREAD = 8 << 20
"""Per thread of Polars' pool: each keeps its own allocator arena and works on its own part of the data."""
SUMMARY_BYTES_PER_STORED_BYTE = 7
"""The summary's peak per byte of the event tables in the export, with a margin (docs/performance.md)."""
STREAMED_SUMMARY_BYTES = 384 << 20
"""What a summary scanned from disk may peak at over the imports, whatever the capture's size: its event tables
stay on disk, one window of events (trace/streamed.py WINDOW_ROWS) and the reports' groups in memory."""
_UNLIMITED = 1 << 60
"""cgroup v1 writes "no limit" as a huge number (9223372036854771712); anything above this is none."""
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def summary_bytes(stored_bytes: int | None) -> int:
    """The memory a summary of events taking STORED_BYTES in their export may peak at (an upper estimate), with as
    many threads as Polars runs here; None: one streamed from disk, whatever their size."""
    if stored_bytes is None:
        return STREAMED_SUMMARY_BYTES
    import polars as pl  # here: the export's check, and `import nsight_core`, need no Polars

    return SUMMARY_BASE_BYTES + SUMMARY_BYTES_PER_THREAD * pl.thread_pool_size() \
        + SUMMARY_BYTES_PER_STORED_BYTE * stored_bytes


def export_bytes(trace_bytes: int, kind: str = "arrowdir", processes: int = 1) -> int:
    """The memory nsys' KIND export of a .nsys-rep of TRACE_BYTES may peak at (an upper estimate), in PROCESSES side by
    side (an SQLite export in slices of time: trace/export.py)."""
    return processes * (EXPORT_BASE_BYTES + EXPORT_BYTES_PER_TRACE_BYTE[kind] * trace_bytes)


def check_summary_memory(stored_bytes: int | None, what: str) -> None:
    """Raise :class:`NotEnoughMemoryError` when the summary of WHAT (events taking STORED_BYTES in their export, read
    whole; None: streamed from disk) needs more than this process may take (:func:`fits`)."""
    _check(summary_bytes(stored_bytes), f"summarising {what}", _events(stored_bytes))


def check_export_memory(trace_bytes: int, kind: str, what: str, processes: int = 1) -> None:
    """Raise :class:`NotEnoughMemoryError` when nsys' KIND export of WHAT (a .nsys-rep of TRACE_BYTES) in PROCESSES
    needs more than this process may take: its summary would need more still."""
    _check(export_bytes(trace_bytes, kind, processes), f"exporting {what} for its summary",
           f"nsys' {kind} export of a {_size(trace_bytes)} trace{f' in {processes} slices' if processes > 1 else ''}")


def fits(needed: int) -> bool:
    """Whether NEEDED bytes fit what this process may take (True where nothing is known of the limit): how a capture is
    exported and read is chosen by it."""
    allowed, _ = allowed_memory()
    return allowed is None or needed <= allowed


def allowed_memory() -> tuple[int | None, str]:
    """What a summary may take (None: the guard is off), and where that comes from: the budget, lowered to what this
    process may still take where that is less (see the module)."""
    setting = os.environ.get(ENV_SUMMARY_MEMORY, "").strip()
    if setting.lower() == "off":
        return None, setting
    budget, source = ((parse_size(setting), f"{ENV_SUMMARY_MEMORY}={setting}") if setting else
                      (DEFAULT_SUMMARY_BYTES, f"the default summary budget ({_size(DEFAULT_SUMMARY_BYTES)}; "
                                              f"{ENV_SUMMARY_MEMORY} sets another)"))
    headroom = headroom_bytes()
    if headroom is not None and headroom < budget:
        return headroom, "this process's free memory (its container's limit and the host's)"
    return budget, source


def check_comparison_memory(stored_bytes: int | None, what: str) -> None:
    """:func:`check_summary_memory` for `nsight diff` of WHAT, which reads as much as a summary."""
    _check(summary_bytes(stored_bytes), f"comparing {what}", _events(stored_bytes), "compare",
           "compare captures of shorter regions, or compare it where there is more memory")


def _events(stored_bytes: int | None) -> str:
    return "streamed from disk, its size aside" if stored_bytes is None else \
        f"its events take {_size(stored_bytes)} in the export"


def _check(needed: int, doing: str, why: str, verb: str = "summarise",
           remedy: str = "summarise it where there is more memory (nsight report TRACE) or open it in nsys-ui; or "
                         "give the task more memory") -> None:
    allowed, source = allowed_memory()
    if allowed is None or needed <= allowed:
        return
    raise NotEnoughMemoryError(
        f"{doing} needs about {_size(needed)} of memory ({why}) and {source} allows {_size(allowed)}, so it is "
        f"not {verb}d: that could get the process killed. The trace is kept: {remedy}, or set "
        f"{ENV_SUMMARY_MEMORY}=off to {verb} it anyway.")


def parse_size(text: str) -> int:
    """TEXT (``2G``, ``512M``, ``1.5GiB``, ``1048576``; powers of 1024) in bytes."""
    match = _SIZE.match(text)
    if not match:
        raise NsightError(f"{ENV_SUMMARY_MEMORY}={text!r} is not a size: write it as 2G, 512M or a number of "
                          "bytes, or off to build every summary whatever it needs.")
    number, unit = match.groups()
    return int(float(number) * 1024 ** "bkmgt".index(unit.lower() or "b"))


def headroom_bytes(proc: Path = Path("/proc"), cgroups: Path = Path("/sys/fs/cgroup")) -> int | None:
    """How much more memory this process may take: the least of the host's available memory and, for each
    memory limit on its cgroup or the cgroups above it, the limit less what they hold (reclaimable file cache
    left out, as Kubernetes counts its "working set"). None when none of it can be read."""
    available = _fields(proc / "meminfo").get("MemAvailable")  # kB
    found = [value for value in (None if available is None else available * 1024,
                                 *_cgroup_headrooms(proc / "self" / "cgroup", cgroups)) if value is not None]
    return max(0, min(found)) if found else None


def _cgroup_headrooms(membership: Path, cgroups: Path) -> list[int | None]:
    """The headroom under every memory limit on this process: cgroup v2 (each level up to the mount's root has
    its own memory.max) and v1 (memory.stat gives the limit in force over the hierarchy)."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return []
    headrooms: list[int | None] = []
    for line in lines:
        fields = line.split(":", 2)  # hierarchy-ID:controllers:path
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        relative = path.lstrip("/")
        if controllers == "":  # cgroup v2; in a container with its own cgroup namespace the path is "/"
            root = cgroups / "unified" if (cgroups / "unified").is_dir() else cgroups  # beside v1, or alone
            levels = (root / relative, *(root / relative).parents)
            headrooms += [_v2_headroom(level) for level in levels if level.is_relative_to(root)]
        elif "memory" in controllers.split(","):
            mount = cgroups / "memory"
            headrooms.append(_v1_headroom(mount / relative if (mount / relative).is_dir() else mount))
    return headrooms


def _v2_headroom(level: Path) -> int | None:
    limit, current = _number(level / "memory.max"), _number(level / "memory.current")
    if limit is None or current is None:
        return None
    return limit - current + _fields(level / "memory.stat").get("inactive_file", 0)


def _v1_headroom(level: Path) -> int | None:
    stat, usage = _fields(level / "memory.stat"), _number(level / "memory.usage_in_bytes")
    limit = stat.get("hierarchical_memory_limit", _number(level / "memory.limit_in_bytes"))
    if limit is None or usage is None or limit >= _UNLIMITED:
        return None
    return limit - usage + stat.get("total_inactive_file", 0)


def _number(path: Path) -> int | None:
    """The integer in PATH; None when it is missing, unreadable or "max" (no limit)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _fields(path: Path) -> dict[str, int]:
    """``name value`` (or ``Name: value kB``) lines of PATH; empty when it cannot be read."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    rows = [line.replace(":", " ").split() for line in lines]
    return {row[0]: int(row[1]) for row in rows if len(row) >= 2 and row[1].isdigit()}
