"""200,000 tiny kernels in 200 NVTX steps (STEPS, default 200): the kernel-heavy capture of docs/performance.md.

Recorded on the H200 machine with the project's nsys 2023.4.4 (capture started after CUDA's warm-up,
as nsys 2023.4.4 loses a CUDA 13 program's kernels when it sees the runtime initialise):

    nsys profile --trace=cuda,nvtx --sample=none --cpuctxsw=none --capture-range=cudaProfilerApi \
        --capture-range-end=stop -o tiny_kernels python3 bench/gpu/tiny_kernels.py [STEPS]

Each step launches 500 x (mul_, add_) on a 256-float tensor (each kernel ~1-2 µs: launch bound) and
synchronises.
"""

from __future__ import annotations

import sys

import torch

PAIRS_PER_STEP = 500


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    x = torch.zeros(256, device="cuda")
    for _ in range(100):  # CUDA initialisation and the first launches, outside the capture
        x.mul_(0.5).add_(1.0)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for step in range(steps):
        torch.cuda.nvtx.range_push(f"step_{step}")
        for _ in range(PAIRS_PER_STEP):
            x.mul_(0.5)
            x.add_(1.0)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.profiler.stop()
    print(f"{steps * PAIRS_PER_STEP * 2} kernels, x[0] = {x[0].item()}")


if __name__ == "__main__":
    main()
