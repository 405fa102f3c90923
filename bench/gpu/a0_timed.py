"""The tests' `a0` shim (tests/flyte/a0_shim.py: the real entrypoint, a LocalController) plus timers.

Measures our own costs from outside the packages: every nsys command nsight-core runs, each region's
start (nsys start + settle), stop and finalize (stats, tab, flush, trace upload), and the CPU time of
every `nvtx.range` block, as JSON lines in $NSIGHT_BENCH_LOG. Nothing in the packages changes; the
same patches apply whether or not the action runs under nsys, so profiled and unprofiled runs are
timed the same way. bench/gpu/actions.py installs this as an executable and runs the examples with it.
"""

import json
import os
import sys
import time

STARTED = time.time()

import contextlib  # noqa: E402
import functools  # noqa: E402
import inspect  # noqa: E402

sys.path.insert(0, os.environ["NSIGHT_BENCH_HARNESS"])  # tests/flyte, for a0_shim

import a0_shim  # noqa: E402  (patches the controller on import)

from flyteplugins.nsight import _flyte_io, nvtx  # noqa: E402
from nsight_core import collection as collection_module  # noqa: E402
from nsight_core import nsys as nsys_module  # noqa: E402

LOG = os.environ["NSIGHT_BENCH_LOG"]
PROCESS = "profiled" if os.environ.get("_F_EXEC_WRAPPED") else "entry"


def record(event: str, t0: float, t1: float, **info: object) -> None:
    with open(LOG, "a") as sink:
        sink.write(json.dumps({"event": event, "pid": os.getpid(), "process": PROCESS, "t0": t0, "t1": t1,
                               "seconds": t1 - t0, **info}) + "\n")


def timed(owner: object, name: str, event: str, keep_output: bool = False) -> None:
    """Replace OWNER.NAME (a function or async function) with one that records its wall time."""
    original = getattr(owner, name)

    def result_info(result: object) -> dict[str, object]:
        if keep_output and hasattr(result, "output"):
            return {"returncode": getattr(result, "returncode", None), "output": result.output[-20_000:]}
        return {}

    if inspect.iscoroutinefunction(original):
        @functools.wraps(original)
        async def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            t0 = time.time()
            try:
                result = await original(*args, **kwargs)
            except BaseException as exc:
                record(event, t0, time.time(), error=repr(exc)[:2000])
                raise
            record(event, t0, time.time(), **result_info(result))
            return result
    else:
        @functools.wraps(original)
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            t0 = time.time()
            try:
                result = original(*args, **kwargs)
            except BaseException as exc:
                record(event, t0, time.time(), error=repr(exc)[:2000])
                raise
            record(event, t0, time.time(), **result_info(result))
            return result
    setattr(owner, name, wrapper)


for method in ("start", "stop", "stats", "export", "sessions"):
    timed(nsys_module.Nsys, method, f"nsys {method}", keep_output=method in ("start", "stop", "stats"))
timed(collection_module.Collector, "start", "region start")
timed(collection_module.Collector, "stop", "region stop")
timed(_flyte_io, "_summarize", "finalize summarize")
timed(_flyte_io, "publish", "finalize publish")
timed(_flyte_io, "publish_sync", "finalize publish")

_range = nvtx.range


@contextlib.contextmanager
def timed_range(message: str):  # type: ignore[no-untyped-def]
    t0 = time.time()
    with _range(message):
        yield
    record("nvtx range", t0, time.time(), name=message)


nvtx.range = timed_range  # type: ignore[assignment]


def prefetch() -> None:
    """NSIGHT_BENCH_PREFETCH=1: what a proposed change would do, import the analysis/render stack in a
    background thread while the task starts, so the first finalize does not pay for it."""
    t0 = time.time()
    import nsight_core.profile
    import nsight_core.render.html  # noqa: F401
    record("prefetch import", t0, time.time())


if PROCESS == "profiled" and os.environ.get("NSIGHT_BENCH_PREFETCH") == "1":
    import threading

    threading.Thread(target=prefetch, daemon=True).start()

if __name__ == "__main__":
    record("process start", STARTED, time.time(), argv0=sys.argv[0])
    a0_shim.runtime.main()
