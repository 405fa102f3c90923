"""Whether a capture's export and summary fit in the memory this process may still take, checked before each.

Why: the export (nsys, a child process) and the summary (reports, analysis, page) run inside the user's
task, after its body, in its container. Both grow with the capture. nsys' arrow export holds each table
whole before it writes it: measured 5-15x the .nsys-rep's bytes (454 MB for a 33 MB trace of 3 M NVTX
ranges), where its SQLite export stays at 33 MB. The summary holds the events it reads: 1.4-2.4x the bytes
of the export's event tables, plus 45-150 MB that grow with Polars' threads (docs/benchmarks.md, and
docs/gpu-verification.md for a 2 M-kernel capture on the 16-core H200 machine). A container that passes its memory
limit is killed, and with it the job that was profiled: profiling must never do that. So each step's
estimate is compared with what the process may still take (the container's limit less what it holds, and
the host's available memory) before it starts: the export's from the trace's size, the summary's from the
export's tables before any event is read. One that would not fit is refused with an error that gives
both numbers; the trace itself is kept, for `nsight report` where there is more memory, or nsys-ui.

``NSIGHT_SUMMARY_MEMORY`` overrides what the process may take: a size (``2G``, ``512M``: powers of 1024)
for a limit nsight cannot see, or ``off`` to go ahead whatever it needs.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from nsight_core.errors import NotEnoughMemoryError, NsightError
from nsight_core.render.units import size as _size

ENV_SUMMARY_MEMORY = "NSIGHT_SUMMARY_MEMORY"
EXPORT_BASE_BYTES = 32 << 20
"""What nsys' export takes whatever the trace (measured 32-44 MB for small ones)."""
EXPORT_BYTES_PER_TRACE_BYTE = {"arrowdir": 20, "sqlite": 0}
"""nsys' export's peak per byte of the .nsys-rep, by export type, with a margin. The arrow export holds each table
whole: measured 5.3x (2 M kernels) to 14.9x (1 M NVTX ranges), whatever the machine (docs/gpu-verification.md,
session I). The SQLite export streams its rows: 32-36 MB from 0.4 MB to 33 MB traces."""
SUMMARY_BASE_BYTES = 64 << 20
"""What a summary takes whatever its size, beside the per-thread part below (its frames', reports' and page's
fixed costs). The imports are not in it: a process that checks has made them."""
SUMMARY_BYTES_PER_THREAD = 8 << 20
"""Per thread of Polars' pool: each keeps its own allocator arena and works on its own part of the data. On the
H200 machine, from 2 to 16 threads the same summary took 74 MB (200 k kernels) to 233 MB (2 M kernels) more."""
SUMMARY_BYTES_PER_STORED_BYTE = 7
"""The summary's peak per byte of the event tables in the export, with a margin. Measured 1.4x (3 M NVTX ranges,
2 threads) to 2.4x (1 M NVTX ranges, 16 threads) over the base (docs/gpu-verification.md, session I) before the
analysis moved onto the GPU's clock; since then `make bench` measured 5.2x on the 200 k-kernel capture (342 MB
over the imports for 49.7 MB of event tables, 2 threads), which 3x no longer covered."""
STREAMED_SUMMARY_BYTES = 384 << 20
"""What a streamed capture's statistics, summary and completeness may peak at over the imports, whatever the capture's
size: its event tables stay on disk, one window of events (analysis/intervals.py WINDOW_ROWS) and the reports' groups
in memory. Measured (docs/memory.md): 10 M and 30 M NVTX ranges, `nsight stats` and `nsight report` peaking at
about 250 MB more than the imports, 2 threads."""
_UNLIMITED = 1 << 60
"""cgroup v1 writes "no limit" as a huge number (9223372036854771712); anything above this is none."""
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def summary_bytes(stored_bytes: int) -> int:
    """The memory a summary of events taking STORED_BYTES in their export may peak at (an upper estimate), with as
    many threads as Polars runs here."""
    import polars as pl  # here: the export's check, and `import nsight_core`, need no Polars

    return SUMMARY_BASE_BYTES + SUMMARY_BYTES_PER_THREAD * pl.thread_pool_size() \
        + SUMMARY_BYTES_PER_STORED_BYTE * stored_bytes


def affordable_event_bytes() -> int | None:
    """The most bytes of event tables whose summary fits what this process may take now (the inverse of
    :func:`summary_bytes`; None where nothing is known of the limit): how much of a large capture its analysis reads
    whole (:func:`nsight_core.profile.first_part`). A limit set in ``NSIGHT_SUMMARY_MEMORY`` is the whole process's:
    what it holds already is taken from it (a container's headroom has that taken out already)."""
    import polars as pl

    allowed, source = allowed_memory()
    if allowed is None:
        return None
    if source.startswith(ENV_SUMMARY_MEMORY):
        allowed -= _settled_resident(Path("/proc/self/statm"))
    spare = allowed - SUMMARY_BASE_BYTES - SUMMARY_BYTES_PER_THREAD * pl.thread_pool_size()
    return max(0, spare // SUMMARY_BYTES_PER_STORED_BYTE)


def check_streamed_summary_memory(what: str) -> None:
    """Raise :class:`NotEnoughMemoryError` when even a streamed summary of WHAT (``STREAMED_SUMMARY_BYTES``) needs more
    than this process may take."""
    _check(STREAMED_SUMMARY_BYTES, f"summarising {what}", "streamed from disk, its size aside")


def streamed_summary_fits() -> bool:
    """Whether a streamed summary fits what this process may take (True where nothing is known of the limit)."""
    allowed, _ = allowed_memory()
    return allowed is None or allowed >= STREAMED_SUMMARY_BYTES


def export_bytes(trace_bytes: int, kind: str = "arrowdir", processes: int = 1) -> int:
    """The memory nsys' KIND export of a .nsys-rep of TRACE_BYTES may peak at (an upper estimate), in PROCESSES side by
    side (an SQLite export in slices of time: trace/export.py)."""
    return processes * (EXPORT_BASE_BYTES + EXPORT_BYTES_PER_TRACE_BYTE[kind] * trace_bytes)


def check_summary_memory(stored_bytes: int, what: str) -> None:
    """Raise :class:`NotEnoughMemoryError` when the summary of WHAT (events taking STORED_BYTES in their export)
    needs more than this process may take; do nothing when it fits or nothing is known of the limit."""
    _check(summary_bytes(stored_bytes), f"summarising {what}", f"its events take {_size(stored_bytes)} in the export")


def check_export_memory(trace_bytes: int, kind: str, what: str, processes: int = 1) -> None:
    """Raise :class:`NotEnoughMemoryError` when nsys' KIND export of WHAT (a .nsys-rep of TRACE_BYTES) in PROCESSES
    needs more than this process may take: its summary would need more still."""
    _check(export_bytes(trace_bytes, kind, processes), f"exporting {what} for its summary",
           f"nsys' {kind} export of a {_size(trace_bytes)} trace{f' in {processes} slices' if processes > 1 else ''}")


def export_fits(trace_bytes: int, kind: str, processes: int = 1) -> bool:
    """Whether nsys' KIND export of a .nsys-rep of TRACE_BYTES in PROCESSES fits what this process may take (True where
    nothing is known of the limit): a large capture is streamed where its arrow export would not fit, and exported in
    as many slices as fit (trace/export.py)."""
    allowed, _ = allowed_memory()
    return allowed is None or export_bytes(trace_bytes, kind, processes) <= allowed


def summary_fits(stored_bytes: int) -> bool:
    """Whether a summary of events taking STORED_BYTES in their export fits what this process may take (True where
    nothing is known of the limit): an SQLite export passed as it is streamed where it would not (trace/load.py)."""
    allowed, _ = allowed_memory()
    return allowed is None or summary_bytes(stored_bytes) <= allowed


def allowed_memory() -> tuple[int | None, str]:
    """What this process may still take (None: no limit known, or the guard is off), and where that comes from."""
    setting = os.environ.get(ENV_SUMMARY_MEMORY, "").strip()
    if setting.lower() == "off":
        return None, setting
    if setting:
        return parse_size(setting), f"{ENV_SUMMARY_MEMORY}={setting}"
    return headroom_bytes(), "this process's free memory (its container's limit and the host's)"


def check_comparison_memory(stored_bytes: int | None, what: str) -> None:
    """Raise :class:`NotEnoughMemoryError` when `nsight diff` of WHAT needs more than this process may take: with
    STORED_BYTES (what its events take in their export), read whole, as a summary read whole does; None, streamed from
    disk (a large capture's totals and step times), as a streamed summary does. Else it would get the process
    killed."""
    needed, why = (summary_bytes(stored_bytes), f"its events take {_size(stored_bytes)} in the export") \
        if stored_bytes is not None else (STREAMED_SUMMARY_BYTES, "streamed from disk, its size aside")
    _check(needed, f"comparing {what}", why, "compare",
           "compare captures of shorter regions, or compare it where there is more memory")


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
    found = [value for value in (_available(proc / "meminfo"), *_cgroup_headrooms(proc / "self" / "cgroup", cgroups))
             if value is not None]
    return max(0, min(found)) if found else None


SETTLE_S = 2.0
"""At most how long :func:`_settled_resident` waits for the allocator to hand back what was freed."""
SETTLED_READS = 3
"""How many reads 100 ms apart without a fall say that the resident set has settled: one was not enough under load,
where jemalloc's thread had not yet woken 100 ms after the free, and a 400 MB frame freed counted as held (the test
suite on 2 cores, 2026-12-04)."""


def _settled_resident(statm: Path) -> int:
    """The resident set of STATM's process once its allocator has handed back the pages freed just before.

    Right after a streamed summary, the resident set still holds the pages its frames freed: Polars' jemalloc
    returns them within its decay time (100 ms in nsight's CLI), and until then they are free for the analysis to
    reuse, not held. Read at once, the part of a capture its analysis read whole varied from run to run of the same
    command (2,045 to 2,186 steps of 3 M NVTX ranges with 2G allowed); read once it stops falling, by a step or so
    (2,277 to 2,279). Read every 100 ms until it has not fallen by 1 MiB for SETTLED_READS reads, at most SETTLE_S."""
    lowest, deadline, unchanged = _resident(statm), time.monotonic() + SETTLE_S, 0
    while unchanged < SETTLED_READS and time.monotonic() < deadline:
        time.sleep(0.1)
        now = _resident(statm)
        unchanged = unchanged + 1 if now > lowest - (1 << 20) else 0
        lowest = min(lowest, now)
    return lowest


def _resident(statm: Path) -> int:
    """The resident set of the process whose STATM this is, in bytes (0 where it cannot be read)."""
    try:
        return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _available(meminfo: Path) -> int | None:
    fields = _fields(meminfo)
    return fields["MemAvailable"] * 1024 if "MemAvailable" in fields else None


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
    fields = {}
    for line in lines:
        parts = line.replace(":", " ").split()
        if len(parts) >= 2 and parts[1].isdigit():
            fields[parts[0]] = int(parts[1])
    return fields
