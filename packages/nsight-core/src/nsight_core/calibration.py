"""What nsys' CUDA tracing costs each CUDA call in this process, measured as a region starts: it times a burst of empty
kernel launches before `nsys start` and again once collection is live, and marks the difference per launch
(``CALIBRATION_MARK``; else analysis/overhead.py's table applies). Beside it, a pure-Python loop timed on both sides
marks how the host's own speed changed across the start (``HOST_SPEED_MARK``): GPU machines' hosts switch between
speeds by themselves, and a capture taken in a slower spell than the program's usual one shows slower host-bound steps
than tracing explains. Only where the program initialised CUDA through torch and CUDA is traced; any failure skips it.
``LIVE_MARK`` follows the traced burst."""

from __future__ import annotations

import logging
import sys
import time
from types import ModuleType
from typing import NamedTuple

from nsight_core.marks import CALIBRATION_MARK, CALIBRATION_RANGE, HOST_SPEED_MARK, LIVE_MARK, mark

log = logging.getLogger("nsight")

LAUNCHES = 500
"""Empty kernels a burst launches: short beside a region's START_SETTLE_SECONDS wait."""
CHUNK = 50
"""Launches between two synchronisations: far fewer than a launch queue holds."""
BURSTS = 3
"""Bursts on each side of the start; the fastest of each side's is kept (the host's noise only ever adds time)."""
HOST_UNIT = 200
"""The host's unit of work: summing a range of this many integers, about 1-2 µs of Python and no CUDA call."""


class Untraced(NamedTuple):
    """What the host took per unit before the start, to compare with once collection is live."""

    launch_ns: float
    """Host time per empty kernel launch."""
    host_ns: float
    """Host time per HOST_UNIT of pure Python."""


def _torch_with_cuda() -> ModuleType | None:
    """The program's torch, where it has initialised CUDA (importing torch or starting CUDA is the program's call)."""
    torch = sys.modules.get("torch")
    try:
        return torch if torch is not None and torch.cuda.is_initialized() else None
    except Exception:  # a torch without CUDA, or a half-imported one
        return None


def _per_launch_ns(torch: ModuleType) -> float:
    """The fastest of BURSTS bursts of LAUNCHES empty kernels: the host's time per launch. A burst launches CHUNK at a
    time from an idle GPU: a full launch queue would block the host, timing the GPU instead."""
    times = []
    for _ in range(BURSTS):
        spent = 0
        for _ in range(LAUNCHES // CHUNK):
            torch.cuda.synchronize()
            start = time.perf_counter_ns()
            for _ in range(CHUNK):
                torch.cuda._sleep(0)
            spent += time.perf_counter_ns() - start
        times.append(spent / (LAUNCHES // CHUNK * CHUNK))
    torch.cuda.synchronize()
    return min(times)


def _per_host_unit_ns() -> float:
    """The fastest of BURSTS bursts of LAUNCHES units of pure Python: the host's own speed, which tracing leaves alone
    (no CUDA call in it)."""
    times = []
    for _ in range(BURSTS):
        start = time.perf_counter_ns()
        for _ in range(LAUNCHES):
            sum(range(HOST_UNIT))
        times.append((time.perf_counter_ns() - start) / LAUNCHES)
    return min(times)


def before_start(trace: tuple[str, ...]) -> Untraced | None:
    """Untraced host time per launch and per unit of Python, to be compared after the start; None where it cannot be
    measured."""
    if (torch := _torch_with_cuda() if "cuda" in trace else None) is None:
        return None
    try:
        _per_launch_ns(torch)  # the first launches load the kernel: not timed
        return Untraced(_per_launch_ns(torch), _per_host_unit_ns())
    except Exception as exc:  # calibration must never break the user's job
        log.debug("could not time CUDA launches before the collection: %s", exc)
        return None


def after_start(untraced: Untraced | None) -> None:
    """Time the bursts with collection live, mark what tracing added per call and how the host's own speed changed,
    then mark the user's window's start."""
    torch = _torch_with_cuda() if untraced is not None else None
    if torch is None or untraced is None:
        return
    try:
        torch.cuda.nvtx.range_push(CALIBRATION_RANGE)
        traced_ns = _per_launch_ns(torch)
        host_ns = _per_host_unit_ns()
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.mark(f"{CALIBRATION_MARK} {max(traced_ns - untraced.launch_ns, 0.0):.0f} ns")
        torch.cuda.nvtx.mark(f"{HOST_SPEED_MARK} {host_ns / untraced.host_ns:.3f} x")
    except Exception as exc:
        log.debug("could not time CUDA launches in the collection: %s", exc)
    mark(LIVE_MARK)
