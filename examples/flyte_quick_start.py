"""Quick start: profile a PyTorch training task with @nsys_profile (needs a GPU and a Flyte backend).

    python examples/flyte_quick_start.py

The run's report gets a "GPU Profile" tab, and the .nsys-rep is the output of its traced step
`capture_report_file`: download it and open it in nsys-ui. The other flyte_*.py examples reuse its
image (examples/nsight_image.py: build the wheels first).
"""

import flyte
from nsight_image import image  # NGC PyTorch + this repository's wheels (build them first: see there)

from flyteplugins.nsight import nsys_profile, nvtx

env = flyte.TaskEnvironment(
    name="nsight_train",
    image=image,
    resources=flyte.Resources(cpu="4", memory="16Gi", gpu="L4:1"),
)


@nsys_profile
@env.task
async def train(steps: int = 20) -> float:
    import torch
    import torch.nn as nn

    model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> torch.Tensor:
        loss = model(torch.randn(512, 4096, device="cuda")).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    # Unlabeled warmup keeps one-time CUDA startup costs out of the NVTX summary.
    for _ in range(3):
        step()
    torch.cuda.synchronize()

    for i in range(steps):
        with nvtx.range(f"step_{i}"):
            loss = step()

    torch.cuda.synchronize()
    return loss.item()


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(train)
    print(run.url)
