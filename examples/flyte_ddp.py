"""Profiling distributed training: only global rank 0 runs under nsys (needs 2 nodes x 2 GPUs).

    python examples/flyte_ddp.py

A clustered worker has no controller, so the trace is not a traced step's output: rank 0 uploads
the .nsys-rep to the task's raw data path and the GPU Profile tab prints where. Download it with:

    import flyte
    from flyte.io import File

    flyte.init_from_config()
    File.from_existing_remote("<trace-location>").download_sync("rank0.nsys-rep")
"""

import flyte
from flyte.clustered import ClusteredTaskEnvironment
from flyte_quick_start import image

from flyteplugins.nsight import nsys_profile, nvtx

env = ClusteredTaskEnvironment(
    name="nsight_ddp",
    image=image,
    resources=flyte.Resources(cpu="8", memory="32Gi", gpu="T4:2"),
    replicas=2,  # two pods
    nproc_per_node=2,  # one process per GPU, four ranks in total
)


@nsys_profile(trace=["cuda", "nvtx"])
@env.task
async def train_ddp(steps: int = 30) -> str:
    import os

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)

    model = DDP(nn.Linear(4096, 4096).cuda(), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    for i in range(steps):
        with nvtx.range(f"step_{i}"):
            loss = model(torch.randn(512, 4096, device="cuda")).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces gradients here
            opt.step()
    torch.cuda.synchronize()

    rank = dist.get_rank()
    dist.destroy_process_group()
    return f"rank {rank} done, loss {loss.item():.4f}"


if __name__ == "__main__":
    flyte.init_from_config()
    print(flyte.run(train_ddp).url)
