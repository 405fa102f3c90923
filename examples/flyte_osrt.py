"""Tracing OS runtime calls (osrt): the pod needs CAP_SYS_ADMIN and an unconfined AppArmor profile.

    python examples/flyte_osrt.py

`allow_nested_sandboxing()` grants both without making the container privileged; it imports the
`kubernetes` package, so install that locally and in the image. Without the capability, leave
'osrt' out of trace and drop the pod template. The body is CPU work, so it runs anywhere.
"""

import tempfile
import time
from pathlib import Path

import flyte
from flyte_quick_start import image

from flyteplugins.nsight import nsys_profile, nvtx

env = flyte.TaskEnvironment(
    name="nsight_osrt",
    image=image.with_pip_packages("kubernetes"),
    resources=flyte.Resources(cpu="4", memory="16Gi", gpu="L4:1"),
    pod_template=flyte.PodTemplate().allow_nested_sandboxing(),
)


@nsys_profile(trace=["cuda", "nvtx", "osrt"])
@env.task
async def train(steps: int = 5) -> int:
    """Labelled file I/O and sleeps: the OS runtime calls osrt records."""
    written = 0
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(steps):
            with nvtx.range(f"checkpoint_{i}"):
                written += Path(scratch, f"ckpt_{i}.bin").write_bytes(b"\0" * 1_000_000)
                time.sleep(0.01)
    return written


if __name__ == "__main__":
    flyte.init_from_config()
    print(flyte.run(train).url)
