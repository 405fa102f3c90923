"""Two CUDA streams running small matmuls at the same time, recorded as one region.

Kernels on different streams overlap on the GPU, so the sum of kernel times exceeds the time the GPU
was busy: the recording (tests/fixtures/h200-two-streams) checks that the report's GPU busy is the
union of kernel intervals, not that sum.
"""

import torch

import nsight_core

a = torch.randn(1024, 1024, device="cuda")
b = torch.randn(1024, 1024, device="cuda")
streams = [torch.cuda.Stream(), torch.cuda.Stream()]
for _ in range(3):
    a @ b
torch.cuda.synchronize()
with nsight_core.range("two_streams"):
    for step in range(10):
        torch.cuda.nvtx.range_push(f"step_{step}")
        for stream in streams:
            with torch.cuda.stream(stream):
                for _ in range(4):
                    a @ b
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
print("done")
