"""What nsys' CUDA tracing adds to a launch, by what launches: bursts and optimizer steps timed without collection,
then inside a region, then without again.

    nsight run --capture manual --trace cuda,nvtx -o DIR -- python bench/gpu/loop_cost.py DIR/loop_cost.json

Kinds: `sleep` (torch.cuda._sleep(0), what a region's calibration launches), `add` (`t.add_(1)` on a 64-element
tensor), `cycle` (seven different elementwise ops on small tensors in turn, as a per-parameter optimizer issues
them), `adam_loop` and `adam_foreach` (`optimizer.step()` alone of Adam over a 96-layer 256-wide MLP's parameters,
`foreach=False` and `True`). Each is timed REPEATS times (a device synchronise at each end, the time over its
launches); the JSON holds per kind the unprofiled median (both passes), the profiled median and the launches.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

REPEATS = 7
BURST = 1000


def timed(run: Callable[[], None], launches: int) -> list[float]:
    """REPEATS runs of RUN: nanoseconds per launch of each."""
    out = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        start = time.perf_counter_ns()
        run()
        torch.cuda.synchronize()
        out.append((time.perf_counter_ns() - start) / launches)
    return out


def kinds() -> dict[str, tuple[Callable[[], None], int]]:
    t = torch.zeros(64, device="cuda")
    a, b, c = (torch.rand(64, device="cuda") + 1 for _ in range(3))
    ops: list[Callable[[], object]] = [lambda: a.add_(1e-9), lambda: a.mul_(1.0), lambda: a.lerp_(b, 1e-9),
                                       lambda: c.addcmul_(b, b, value=1e-9), lambda: b.sqrt(), lambda: b.div(2.0),
                                       lambda: a.addcdiv_(b, c, value=-1e-9)]

    def sleep() -> None:
        for _ in range(BURST):
            torch.cuda._sleep(0)

    def add() -> None:
        for _ in range(BURST):
            t.add_(1)

    def cycle() -> None:
        for i in range(BURST):
            ops[i % len(ops)]()

    model = nn.Sequential(*[part for _ in range(96) for part in (nn.Linear(256, 256), nn.ReLU())]).cuda()
    for param in model.parameters():
        param.grad = torch.randn_like(param)
    loop = torch.optim.Adam(model.parameters(), lr=1e-9, foreach=False)
    multi = torch.optim.Adam(model.parameters(), lr=1e-9, foreach=True)
    params = len(list(model.parameters()))
    return {"sleep": (sleep, BURST), "add": (add, BURST), "cycle": (cycle, BURST),
            "adam_loop": (loop.step, 7 * params), "adam_foreach": (multi.step, 7 * params)}


def main() -> None:
    import nsight_core

    found = kinds()
    for run, launches in found.values():  # warm: kernels loaded, optimizer state made
        timed(run, launches)
    before = {name: timed(run, n) for name, (run, n) in found.items()}
    with nsight_core.range("loop_cost"):
        inside = {}
        for name, (run, n) in found.items():
            torch.cuda.nvtx.range_push(name)
            inside[name] = timed(run, n)
            torch.cuda.nvtx.range_pop()
    after = {name: timed(run, n) for name, (run, n) in found.items()}
    result = {name: {"launches": n, "unprofiled_ns": statistics.median(before[name] + after[name]),
                     "before_ns": before[name], "after_ns": after[name], "profiled_ns": statistics.median(inside[name]),
                     "profiled_runs_ns": inside[name]} for name, (_, n) in found.items()}
    for name, row in result.items():
        print(f"loop_cost: {name}: {row['unprofiled_ns']:.0f} ns a launch unprofiled, {row['profiled_ns']:.0f} "
              f"profiled (+{row['profiled_ns'] - row['unprofiled_ns']:.0f})", flush=True)
    Path(sys.argv[1]).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
