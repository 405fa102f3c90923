"""Tasks the tests run through `a0`. CPU machines: trace nvtx and osrt (no CUDA here)."""

import os
import time

import flyte
from flyte.clustered import ClusteredTaskEnvironment

from flyteplugins.nsight import nsys, nsys_profile, nvtx

CPU_TRACE = ("nvtx", "osrt")
HOSTILE = "<img src=x onerror=alert(1)> & co"  # a user's NVTX name must show as text, never as markup

env = flyte.TaskEnvironment(name="nsight_tests")
cluster = ClusteredTaskEnvironment(name="nsight_cluster", replicas=2, nproc_per_node=1)


def work(steps: int, prefix: str = "step") -> int:
    """Labelled CPU work: STEPS NVTX ranges named <prefix>_<i>."""
    total = 0
    for i in range(steps):
        with nvtx.range(f"{prefix}_{i}"):
            time.sleep(0.01)
            total += i
    return total


@nsys_profile(trace=CPU_TRACE)
@env.task
async def whole_task(steps: int) -> int:
    nvtx.mark("start")
    with nvtx.range(HOSTILE):
        return work(steps)


@nsys_profile(trace=CPU_TRACE, capture="manual")
@env.task
async def regions_async(steps: int) -> int:
    work(2, "warmup")
    async with nsys.range("training"):
        total = work(steps, "train")
    async with nsys.range("evaluation"):
        total += work(2, "eval")
    return total


@nsys_profile(trace=CPU_TRACE, capture="manual")
@env.task
def regions_sync(steps: int) -> int:
    work(2, "warmup")
    with nsys.range("training"):
        total = work(steps, "train")
    with nsys.range("evaluation"):
        total += work(2, "eval")
    return total


@nsys_profile(trace=CPU_TRACE)
@cluster.task
async def clustered(steps: int) -> str:
    work(steps)
    message = f"rank {os.environ.get('RANK')} done"
    print(message, flush=True)  # only rank 0 uploads outputs; every rank logs
    return message


@nsys_profile(trace=CPU_TRACE)
@cluster.task
async def ddp_cpu(steps: int) -> str:
    """Real data-parallel training on CPU (gloo): every rank all-reduces, rank 0 alone is profiled."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(64, 64))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for i in range(steps):
        with nvtx.range(f"step_{i}"):
            loss = model(torch.randn(32, 64)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    message = f"rank {rank} of {world} done"
    print(message, flush=True)
    return message


@nsys_profile(trace=CPU_TRACE, capture="manual")
@env.task
async def plain_with_in_async(steps: int) -> int:
    with nsys.range("training"):  # should be `async with` here
        return work(steps)
