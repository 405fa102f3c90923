"""A small training-like loop with known problems, recorded as a fixture for the findings work.

    nsight run --capture manual --trace cuda,nvtx -o DIR -- python bench/gpu/diagnosis.py [--steps 12]

One region, `diagnosis`, of NVTX steps step_0..step_N-1. What each step does, and what a diagnosis
should find in it:
- step_0 is a warm-up outlier: the buffers are allocated and the kernels first launched inside it;
- ~200 tiny elementwise kernels on a 1024-element tensor: launch bound (GPU time per kernel ~µs,
  gaps between them set by the CPU);
- one 64 MiB device-to-host copy into pageable (not pinned) memory;
- a `.item()`: a device-to-host synchronisation that stalls the CPU;
- a 20 ms CPU gap (time.sleep) while the GPU has nothing to do;
- with NCCL on one GPU (world size 1), one all_reduce per step (skipped, with a line on stderr, when
  the process group cannot start).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

import torch

import nsight_core

TINY_OPS = 100  # x2 kernels each (mul_, add_)
COPY_BYTES = 64 * 2**20


def nccl_group() -> object | None:
    """torch.distributed with one rank on this GPU, or None (stderr says why) when it cannot start."""
    import torch.distributed as dist

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
        probe_tensor = torch.ones(1, device="cuda")
        dist.all_reduce(probe_tensor)
        torch.cuda.synchronize()
    except Exception as exc:  # one GPU, no NCCL: the fixture still has every other problem
        print(f"diagnosis: no all_reduce (NCCL world size 1 failed: {exc})", file=sys.stderr)
        return None
    return dist


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    torch.cuda.init()
    dist = nccl_group()
    with nsight_core.range("diagnosis"):
        big = small = host = None
        grads = None
        for i in range(args.steps):
            torch.cuda.nvtx.range_push(f"step_{i}")
            if big is None:  # step_0: first allocation and first launches, the warm-up outlier
                big = torch.empty(COPY_BYTES // 4, device="cuda")
                small = torch.ones(1024, device="cuda")
                grads = torch.ones(4096, device="cuda")
            for _ in range(TINY_OPS):
                small.mul_(1.0001).add_(1e-4)
            host = big.cpu()  # pageable host memory: a synchronous, slow D2H copy
            if dist is not None:
                dist.all_reduce(grads)
            loss = small.sum().item()  # device-to-host sync
            time.sleep(0.02)  # CPU work while the GPU idles
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
    if dist is not None:
        dist.destroy_process_group()
    print(f"diagnosis: {args.steps} steps, loss {loss:.4f}, host copy {host.numel() * 4 // 2**20} MiB")


if __name__ == "__main__":
    main()
