"""How steady a region's tracing-cost calibration is, and whether the host's speed explains its spread.

    nsight run --capture manual --trace cuda,nvtx -o DIR -- python bench/gpu/calibration_drift.py DIR/drift.json

Runs REGIONS regions back to back in one process, each holding a second of a small training loop (so that nsys has a
report to write while the next region starts). Around each region's start it times, untraced before and traced just
after, the calibration's burst of empty launches (nsight_core.calibration) and a host-speed reference that makes no CUDA
call (a CPU tensor's `add_`, through the same dispatcher); late in the region and after it, both again. Per region
(ns per launch or op): `raw`, the traced burst less the untraced one (what a region marks); `scaled`, the traced burst
scaled by the reference's change first; `bracketed`, the late traced burst less the mean of the untraced ones before
and after. The JSON holds each region's numbers and their medians and standard deviations.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

from nsight_core import calibration

REGIONS = 10
LOOP_S = 1.0


def reference_ns() -> float:
    """The fastest of three bursts of 500 CPU tensor ops: the host's speed at Python-and-dispatcher work."""
    x = torch.zeros(1)
    times = []
    for _ in range(3):
        start = time.perf_counter_ns()
        for _ in range(500):
            x.add_(1)
        times.append((time.perf_counter_ns() - start) / 500)
    return min(times)


def main() -> None:
    import nsight_core

    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    data = torch.randn(64, 512, device="cuda")
    calibration._per_launch_ns(torch)  # kernels loaded
    rows = []
    for i in range(REGIONS):
        row: dict[str, float] = {"ref_before": reference_ns(), "launch_before": calibration._per_launch_ns(torch)}
        with nsight_core.range(f"drift_{i}"):
            row["ref_traced"] = reference_ns()
            row["launch_traced"] = calibration._per_launch_ns(torch)
            end = time.monotonic() + LOOP_S
            while time.monotonic() < end:
                opt.zero_grad()
                model(data).square().mean().backward()
                opt.step()
            torch.cuda.synchronize()
            row["ref_traced_late"] = reference_ns()
            row["launch_traced_late"] = calibration._per_launch_ns(torch)
        row["ref_after"] = reference_ns()
        row["launch_after"] = calibration._per_launch_ns(torch)
        row["raw"] = row["launch_traced"] - row["launch_before"]
        row["scaled"] = row["launch_traced"] * row["ref_before"] / row["ref_traced"] - row["launch_before"]
        row["bracketed"] = row["launch_traced_late"] - (row["launch_before"] + row["launch_after"]) / 2
        rows.append(row)
        print("drift: " + " ".join(f"{k} {v:.0f}" for k, v in row.items()), flush=True)
    summary = {key: {"median": statistics.median(r[key] for r in rows), "stdev": statistics.stdev(r[key] for r in rows)}
               for key in ("raw", "scaled", "bracketed")}
    print(f"drift summary: {summary}", flush=True)
    Path(sys.argv[1]).write_text(json.dumps({"regions": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
