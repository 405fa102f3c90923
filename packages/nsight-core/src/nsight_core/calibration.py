"""What nsys' CUDA tracing costs each CUDA call in this process, measured as a region starts: it times a burst of empty
kernel launches before `nsys start` and again once collection is live, and marks the difference per launch
(``CALIBRATION_MARK``; else analysis/overhead.py's table applies). Only where the program initialised CUDA through torch
and CUDA is traced; any failure skips it. ``LIVE_MARK`` follows the traced burst."""

from __future__ import annotations

import logging
import sys
import time
from types import ModuleType

from nsight_core.marks import CALIBRATION_MARK, CALIBRATION_RANGE, LIVE_MARK, mark

log = logging.getLogger("nsight")

LAUNCHES = 500
"""Empty kernels a burst launches: short beside a region's START_SETTLE_SECONDS wait."""
CHUNK = 50
"""Launches between two synchronisations: far fewer than a launch queue holds."""
BURSTS = 3
"""Bursts on each side of the start; the fastest of each side's is kept (the host's noise only ever adds time)."""


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


def before_start(trace: tuple[str, ...]) -> float | None:
    """Untraced host time per launch (ns), to be compared after the start; None where it cannot be measured."""
    if (torch := _torch_with_cuda() if "cuda" in trace else None) is None:
        return None
    try:
        _per_launch_ns(torch)  # the first launches load the kernel: not timed
        return _per_launch_ns(torch)
    except Exception as exc:  # calibration must never break the user's job
        log.debug("could not time CUDA launches before the collection: %s", exc)
        return None


def after_start(untraced_ns: float | None) -> None:
    """Time the burst with collection live, mark what tracing added per call, then mark the user's window's start."""
    torch = _torch_with_cuda() if untraced_ns is not None else None
    if torch is None or untraced_ns is None:
        return
    try:
        torch.cuda.nvtx.range_push(CALIBRATION_RANGE)
        traced_ns = _per_launch_ns(torch)
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.mark(f"{CALIBRATION_MARK} {max(traced_ns - untraced_ns, 0.0):.0f} ns")
    except Exception as exc:
        log.debug("could not time CUDA launches in the collection: %s", exc)
    mark(LIVE_MARK)
