"""Quick start: profile a PyTorch training task with @nsys_profile (needs a GPU and a Flyte backend).

    python examples/flyte_quick_start.py

The run's report gets a "GPU Profile" tab, and the .nsys-rep is the output of its traced step
`capture_report_file`: download it and open it in nsys-ui. The other flyte_*.py examples reuse the
image defined here.
"""

from pathlib import Path

import flyte

from flyteplugins.nsight import nsys_profile, nvtx

PACKAGES = Path(__file__).resolve().parent.parent / "packages"

# NGC PyTorch images ship torch and the nsys CLI. This repository's two packages are copied in and
# installed into Flyte's venv, which is told to see NGC's system site-packages (for torch).
image = (
    flyte.Image.from_base("nvcr.io/nvidia/pytorch:26.09-py3")
    # python_version must match the base image's Python (3.12 in NGC 26.xx images).
    .clone(extendable=True, name="nsight", python_version=(3, 12))
    .with_pip_packages("flyte>=2.5.10,<2.13")
    .with_source_folder(PACKAGES, "/opt/nsight-packages")
    .with_commands([
        "sed -i 's/include-system-site-packages = false/include-system-site-packages = true/' /opt/venv/pyvenv.cfg",
        "uv pip install --python /opt/venv/bin/python"
        " /opt/nsight-packages/nsight-core /opt/nsight-packages/nsight-flyte",
    ])
)

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
