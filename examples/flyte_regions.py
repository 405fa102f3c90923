"""Profiling part of a task: each `nsys.range` block is its own capture (needs a GPU and a backend).

    python examples/flyte_regions.py

`train_regions` (async def, `async with`) gives two sections, "Nsight region: training" and
"Nsight region: evaluation", each with its own .nsys-rep from a `capture_report_file` step.
`train_regions_sync` (def, plain `with`) does the same through `capture_report_file_sync`.
"""

from typing import Any

import flyte
from flyte_quick_start import image

from flyteplugins.nsight import nsys, nsys_profile, nvtx

env = flyte.TaskEnvironment(
    name="nsight_regions",
    image=image,
    resources=flyte.Resources(cpu="4", memory="16Gi", gpu="L4:1"),
)


def build_model() -> tuple[Any, Any]:
    """The quick start's model and optimizer, on the GPU."""
    import torch
    import torch.nn as nn

    model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096)).cuda()
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def train_step(model: Any, opt: Any) -> Any:
    import torch

    loss = model(torch.randn(512, 4096, device="cuda")).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def evaluate(model: Any, batches: int = 5) -> None:
    import torch

    with torch.no_grad():
        for _ in range(batches):
            with nvtx.range("eval"):
                model(torch.randn(512, 4096, device="cuda"))


@nsys_profile(capture="manual", trace=["cuda", "nvtx"])
@env.task
async def train_regions(steps: int = 30) -> float:
    import torch

    model, opt = build_model()
    for _ in range(3):  # warmup, not profiled
        train_step(model, opt)
    torch.cuda.synchronize()

    async with nsys.range("training"):
        for i in range(steps):
            with nvtx.range(f"step_{i}"):
                loss = train_step(model, opt)
        torch.cuda.synchronize()

    async with nsys.range("evaluation"):
        evaluate(model)
        torch.cuda.synchronize()

    return loss.item()


@nsys_profile(capture="manual", trace=["cuda", "nvtx"])
@env.task
def train_regions_sync(steps: int = 30) -> float:
    import torch

    model, opt = build_model()
    for _ in range(3):
        train_step(model, opt)
    torch.cuda.synchronize()

    with nsys.range("training"):
        for i in range(steps):
            with nvtx.range(f"step_{i}"):
                loss = train_step(model, opt)
        torch.cuda.synchronize()

    return loss.item()


if __name__ == "__main__":
    flyte.init_from_config()
    print(flyte.run(train_regions).url)
    print(flyte.run(train_regions_sync).url)
