"""Tens of millions of tiny kernels for issue 23's large capture: STEPS steps (default 50,000), each one replay of a
CUDA graph of 1,000 tiny kernels inside an NVTX range ``step_{n}``, no host sync in the loop (device-bound).

A graph replays 1,000 kernels for one launch, so the capture grows at the GPU's pace (~1.5 µs a kernel) rather
than eager PyTorch's launch cost (~5 µs): 50 M kernels take minutes, not an hour. Recorded on the H200 machine:

    nsys profile --trace=cuda,nvtx --sample=none --cpuctxsw=none --cuda-graph-trace=node \
        --capture-range=cudaProfilerApi --capture-range-end=stop -o many_kernels \
        python3 bench/gpu/many_kernels.py [STEPS]

(`bench/gpu/large_capture.py` records it and times nsight on it.) The file is not kept: it is 1 GB or more.

    python3 bench/gpu/many_kernels.py [STEPS [HOST_MS [FROM_STEP]]]

HOST_MS: host work (a sleep) inside each step from FROM_STEP on (default 0: none), which makes those steps host-bound
once it exceeds the graph's ~1.2 ms: a slowdown that starts part-way through the run (`bench/gpu/streamed_diff.py`).
"""

from __future__ import annotations

import sys
import time

import torch

KERNELS_PER_STEP = 1000


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    host_s = float(sys.argv[2]) / 1000 if len(sys.argv) > 2 else 0.0
    slow_from = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    x = torch.zeros(256, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up before the capture, as CUDA graphs require
        for _ in range(3):
            x.mul_(0.5).add_(1.0)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(KERNELS_PER_STEP // 2):
            x.mul_(0.5)
            x.add_(1.0)
    graph.replay()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for step in range(steps):
        torch.cuda.nvtx.range_push(f"step_{step}")
        graph.replay()
        if host_s and step >= slow_from:
            time.sleep(host_s)
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"{steps * KERNELS_PER_STEP} kernels, x[0] = {x[0].item()}")


if __name__ == "__main__":
    main()
