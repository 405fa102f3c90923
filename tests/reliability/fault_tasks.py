"""Tasks the fault matrix runs through `a0`, with the plugin's default trace, cuda and nvtx (CUDA
records nothing on these CPU machines). osrt, which slows every call of the task by about a third, is
exercised in tests/core and tests/flyte instead.

Every task returns (or raises) something computed from its input alone, so a test knows exactly what
the unprofiled run would give: `expected(task, steps)`.
"""

import asyncio
import contextlib
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any

import flyte

from flyteplugins.nsight import nsys, nsys_profile, nvtx

CPU_TRACE = ("cuda", "nvtx")
HOSTILE_NAMES = ["new\nline", "tab\tname", "quotes ' \"", "$(touch pwned)", "`touch pwned`", "semi;colon",
                 "../../escape", "x" * 300, "ünïcødé ✓"]
# The same hostile parts as region names, three regions rather than nine (each region costs an nsys
# start, stop and summary): shell code, a path out of the folder, every awkward character, length.
HOSTILE_REGIONS = ["$(touch pwned)`touch pwned`;../../escape", "new\nline\ttab quotes ' \" ünïcødé ✓", "x" * 300]
EPOCHS = 2
"""Runs of the region in `hostile_regions`' loop: the second already has a name of its own and an export to clear."""

env = flyte.TaskEnvironment(name="nsight_faults")


def work(steps: int, prefix: str = "step") -> int:
    """Labelled CPU work: STEPS NVTX ranges named <prefix>_<i>; returns the sum of 0..STEPS-1."""
    total = 0
    for i in range(steps):
        with nvtx.range(f"{prefix}_{i}"):
            time.sleep(0.01)
            total += i
    return total


class TrainingDiverged(RuntimeError):
    """The task's own error, which must reach error.pb unchanged."""


@nsys_profile(trace=CPU_TRACE)
@env.task
async def whole(steps: int) -> int:
    return work(steps)


@nsys_profile(trace=CPU_TRACE, capture="manual")
@env.task
async def region(steps: int) -> int:
    async with nsys.range("training"):
        return work(steps)


GAUNTLET = ("start_fails", "start_missing", "stop_loses", "stop_fills_disk", "truncated", "corrupt", "stats_fails",
            "stop_fails")
"""The regions of `gauntlet`, one nsys fault each (tests/reliability/test_faults.py injects them by region name)."""
EXPORT_GAUNTLET = ("export_fails", "export_corrupt")
"""The regions of `export_gauntlet`: faults of `nsys export`, which also fails its `--help` there."""


@nsys_profile(trace=CPU_TRACE, capture="manual")
@env.task
async def gauntlet(steps: int) -> int:
    """A region per fault of nsys start, stop and the trace (GAUNTLET), one after another: each region's fault is
    its own, and the task runs on as unprofiled. NVTX ranges <region>_<i>."""
    total = 0
    for name in GAUNTLET:
        async with nsys.range(name):
            total += work(steps, name)
    return total


@nsys_profile(trace=CPU_TRACE, capture="manual")
@env.task
async def export_gauntlet(steps: int) -> int:
    """As `gauntlet`, for the faults of `nsys export` (EXPORT_GAUNTLET)."""
    total = 0
    for name in EXPORT_GAUNTLET:
        async with nsys.range(name):
            total += work(steps, name)
    return total


@nsys_profile(trace=CPU_TRACE)
@env.task
async def raises(steps: int) -> int:
    work(steps)
    raise TrainingDiverged(f"loss is nan after {steps} steps")


@nsys_profile(trace=CPU_TRACE, capture="manual")
@env.task
async def gathered(steps: int) -> int:
    """Two regions at once on one event loop (asyncio.gather)."""

    async def one(name: str) -> int:
        async with nsys.range(name):
            return await asyncio.to_thread(work, steps, name)

    first, second = await asyncio.gather(one("first"), one("second"))
    return first + second


@nsys_profile(trace=CPU_TRACE, capture="manual")
@env.task
def threaded(steps: int) -> int:
    """Two regions at once from two threads of a def task."""
    results: dict[str, int] = {}

    def one(name: str) -> None:
        with nsys.range(name):
            results[name] = work(steps, name)

    threads = [threading.Thread(target=one, args=(name,)) for name in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results["first"] + results["second"]


@nsys_profile(trace=CPU_TRACE, capture="manual", attach_report=False)
@env.task
async def nested(steps: int) -> int:
    async with nsys.range("outer"), nsys.range("inner"):
        return work(steps)


@nsys_profile(trace=CPU_TRACE, capture="manual")
@env.task
async def cancelled(steps: int) -> int:
    """A region cancelled while its collection starts; a later region must start at once."""

    async def enter() -> None:
        async with nsys.range("cancelled"):
            await asyncio.sleep(60)

    starting = asyncio.create_task(enter())
    await asyncio.sleep(0.05)
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting
    async with nsys.range("after"):
        return work(steps)


@nsys_profile(trace=CPU_TRACE, capture="manual")
@env.task
async def hostile_regions(steps: int) -> int:
    """Regions of hostile names, then a region per iteration of a loop (`epoch`), whose exports must not pile up in
    the task's temp space: the two cases read one run (a run is the expensive part of each)."""
    total = 0
    for name in HOSTILE_REGIONS:
        async with nsys.range(name):
            total += work(1, "in")
    for i in range(EPOCHS):
        async with nsys.range("epoch"):
            total += work(steps, f"epoch{i}")
    return total + work(steps)


@nsys_profile(trace=CPU_TRACE)
@env.task
async def hostile_nvtx(steps: int) -> int:
    for name in HOSTILE_NAMES:
        with nvtx.range(name):
            time.sleep(0.001)
    return work(steps)


@nsys_profile(trace=CPU_TRACE, capture="manual")
@env.task
async def preempted(steps: int) -> int:
    """Records until a signal arrives: $NSIGHT_TEST_READY gets this process's pid once recording.

    It awaits, as a training loop's I/O does: flyte turns SIGINT into cancelling the task, which
    takes effect at an await (a loop of time.sleep would run its full minute first)."""
    async with nsys.range("training"):
        work(steps)
        Path(os.environ["NSIGHT_TEST_READY"]).write_text(str(os.getpid()))
        for _ in range(300):  # 30 s: the signal comes long before, or the test fails on its output
            await asyncio.sleep(0.1)
    return -1


def expected(task: str, steps: int) -> int:
    """What the task returns unprofiled."""
    plain = sum(range(steps))
    return {"gathered": 2 * plain, "threaded": 2 * plain, "hostile_regions": (EPOCHS + 1) * plain,
            "gauntlet": len(GAUNTLET) * plain, "export_gauntlet": len(EXPORT_GAUNTLET) * plain}.get(task, plain)


def _idle(ready: Any) -> None:
    ready.set()
    time.sleep(60)


@nsys_profile(trace=CPU_TRACE)
@env.task
async def workers(steps: int) -> int:
    """Ends a forked and a spawned worker of its own with SIGTERM, then works: neither worker's end is
    the task's, and the collection records on."""
    for method in ("fork", "spawn"):
        context = multiprocessing.get_context(method)
        ready = context.Event()
        worker = context.Process(target=_idle, args=(ready,))
        worker.start()
        ready.wait(60)  # a spawned worker has imported this module, nsight-core and its handlers by now
        worker.terminate()
        worker.join()
    return work(steps)
