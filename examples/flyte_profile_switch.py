"""Turning profiling on per run with an environment variable (runs on CPU too).

    PROFILE_GPU=1 flyte run examples/flyte_profile_switch.py train

`enabled` is evaluated at every import of this module: where you run `flyte run` / `flyte deploy`
and again in the task container. The environment passes PROFILE_GPU on to the container, so both
imports agree. With `flyte deploy`, the value in your shell at deploy time applies to every run.
"""

import os
import time

import flyte
from flyte_quick_start import image

from flyteplugins.nsight import nsys_profile, nvtx

PROFILE_GPU = os.getenv("PROFILE_GPU", "0")

env = flyte.TaskEnvironment(
    name="nsight_switch",
    image=image,
    resources=flyte.Resources(gpu="L4:1"),
    env_vars={"PROFILE_GPU": PROFILE_GPU},
)


@nsys_profile(enabled=PROFILE_GPU == "1")
@env.task
async def train(steps: int = 10) -> float:
    """A stand-in for training: labelled steps of CPU work, so the example runs anywhere."""
    loss = 1.0
    for i in range(steps):
        with nvtx.range(f"step_{i}"):
            time.sleep(0.01)
            loss *= 0.9
    return loss


if __name__ == "__main__":
    flyte.init_from_config()
    print(flyte.run(train).url)
