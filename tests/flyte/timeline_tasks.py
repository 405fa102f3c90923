"""Tasks that attach their Perfetto timeline (``@nsys_profile(perfetto=True)``), run through `a0` on CPU."""

import time

import flyte

from flyteplugins.nsight import nsys, nsys_profile, nvtx

env = flyte.TaskEnvironment(name="nsight_timeline_tests")


def work(steps: int) -> int:
    total = 0
    for i in range(steps):
        with nvtx.range(f"step_{i}"):
            time.sleep(0.01)
            total += i
    return total


@nsys_profile(trace=("nvtx", "osrt"), perfetto=True)
@env.task
async def whole_task_timeline(steps: int) -> int:
    return work(steps)


@nsys_profile(trace=("nvtx", "osrt"), capture="manual", perfetto=True)
@env.task
def region_timeline(steps: int) -> int:
    with nsys.range("training"):
        return work(steps)
