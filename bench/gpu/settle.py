"""How long after `nsys start` returns does CUDA/NVTX collection really begin? One region per wait.

Runs inside `nsys launch` (see bench/GPU.md). It calls nsys start/stop through nsight_core's Nsys
directly, below Session.start, so that Session's own settle time does not hide the effect.
"""

import time
from pathlib import Path

import torch

from nsight_core.session import Session

session = Session.current()
assert session is not None, "run me under nsys launch (Session.run with capture='manual')"
session.output_dir.mkdir(parents=True, exist_ok=True)
x = torch.randn(2048, 2048, device="cuda")
torch.cuda.synchronize()
for idx, wait in enumerate([0.0, 0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]):
    t0 = time.monotonic()
    session.nsys.start(session.name, Path(session.output_dir) / f"s{idx}_{int(wait * 1000)}ms", None)
    t1 = time.monotonic()
    time.sleep(wait)
    for i in range(20):
        torch.cuda.nvtx.range_push(f"r{i}")
        y = x @ x
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    t2 = time.monotonic()
    session.nsys.stop(session.name)
    print(f"wait {wait}: start {t1 - t0:.3f}s, work {t2 - t1 - wait:.4f}s, stop {time.monotonic() - t2:.3f}s")
