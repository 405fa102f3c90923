"""Fix pairs: each problem beside its fixed twin, timed without the profiler, then recorded as regions.

    nsight run --capture manual --trace cuda,nvtx -o DIR -- python bench/gpu/fix_pairs.py DIR/truth.json
    python bench/gpu/fix_pairs.py --time-only PLAIN.json        (the same timings in a process nsys never saw)

A finding's saving is a prediction; this is how it is checked. For every case below, each variant runs
WARMUP steps, then its step time is measured with no collection running (REPEATS runs of STEPS steps, a
device synchronise at each end; the median of the per-step times), then the same STEPS steps are recorded
as one region `<case>-<variant>` with NVTX ranges `step_0..step_{STEPS-1}` (and `data`/`log` ranges where
the host loads or logs). The real saving of a fix is the difference of the unprofiled step times. The
truth file holds, per case and variant, the median step time, the three repeats and what the step does.

Cases (variants: the problem first, then its fixes):
- host_load:  an 8 ms host load per step (a sleep in a `data` range) before ~4 ms of GPU work | prefetched
              by a pool of loader threads.
- dataloader: a DataLoader whose samples cost CPU time, num_workers=0 | num_workers=4 (the loop still waits
              ~0.5 ms a step for its batches; with 8 workers too: docs/gpu-verification.md, session J).
- sync_log:   `loss.item()` every step, then 2 ms of host logging | the loss kept on the GPU.
- graph:      a small MLP (30 kernels a step) launched eagerly | the same step replayed as a CUDA graph.
- pageable:   a 64 MiB host batch copied from pageable memory | from pinned memory, non_blocking.
- two:        the 8 ms load and the pageable copy together | load fixed | copy fixed | both fixed.
- gpu_bound:  a bf16 MLP (three 8192-wide layers, batch 8192) with a device synchronise every step |
              without it (the loop is device-bound either way: the saving is close to nothing).
- tf32:       FP32 matrix multiplies with TF32 off | on (tensor cores).
- quick_start: the README's model as it is (no fix; the GPU step it must be given).
"""

from __future__ import annotations

import argparse
import json
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

STEPS = 20
WARMUP = 5
REPEATS = 3
LOAD_S = 0.008
LOG_S = 0.002
COPY_BYTES = 64 * 2**20

Step = Callable[[int], None]


def nvtx(name: str) -> object:
    """An NVTX range around host work (what a user marks with flyteplugins.nsight.nvtx)."""
    return torch.cuda.nvtx.range(name)


def mlp(width: int, layers: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    parts: list[nn.Module] = []
    for _ in range(layers):
        parts += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*parts).cuda().to(dtype)


def trainer(model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    def train(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return train


POOLS: list[Prefetcher] = []
"""The loader pools a case started: closed when the case ends, so they take no CPU from the next."""


class Prefetcher:
    """LOAD run by a pool of threads ahead of the loop: what `num_workers>0` or a prefetch queue does."""

    def __init__(self, load: Callable[[], torch.Tensor], threads: int = 4, depth: int = 8) -> None:
        POOLS.append(self)
        self._load = load
        self._queue: queue.Queue[torch.Tensor] = queue.Queue(depth)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            item = self._load()
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue

    def get(self) -> torch.Tensor:
        with nvtx("data"):
            return self._queue.get()

    def close(self) -> None:
        self._stop.set()


# -- the cases -------------------------------------------------------------------------------------------

def tokens() -> torch.Tensor:
    """A batch as the host loads it: 4096 token ids (32 KiB), after LOAD_S of host work."""
    time.sleep(LOAD_S)
    return torch.randint(0, 1024, (4096,))


def host_load() -> dict[str, Step]:
    train = trainer(mlp(4096, 3, torch.bfloat16))
    table = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)

    def problem(i: int) -> None:
        with nvtx("data"):
            ids = tokens()
        train(table[ids.cuda(non_blocking=True)])

    pool = Prefetcher(tokens)

    def fixed(i: int) -> None:
        train(table[pool.get().cuda(non_blocking=True)])

    return {"problem": problem, "fixed": fixed}


class CpuSamples(torch.utils.data.Dataset[torch.Tensor]):
    """Samples that cost CPU time to make (decode/augment stand-in): ~0.5 ms of numpy each."""

    def __len__(self) -> int:
        return 10**6

    def __getitem__(self, index: int) -> torch.Tensor:
        rng = np.random.default_rng(index)
        sample = rng.standard_normal((256, 512), dtype=np.float32)
        for _ in range(3):
            sample = np.tanh(sample * 1.01)
        return torch.from_numpy(sample[:, :256].copy().reshape(-1)[:4096])


def dataloader() -> dict[str, Step]:
    train = trainer(mlp(4096, 3, torch.bfloat16))
    loaders = {}
    for variant, workers in (("problem", 0), ("fixed", 4)):
        loader = torch.utils.data.DataLoader(CpuSamples(), batch_size=8, num_workers=workers,
                                             persistent_workers=workers > 0, prefetch_factor=4 if workers else None)
        loaders[variant] = iter(loader)  # workers start here, before any region opens

    def run(variant: str) -> Step:
        def step(i: int) -> None:
            with nvtx("data"):
                batch = next(loaders[variant])
            x = batch.cuda(non_blocking=True).to(torch.bfloat16).repeat(512, 1)
            train(x)
        return step

    return {"problem": run("problem"), "fixed": run("fixed")}


def sync_log() -> dict[str, Step]:
    train = trainer(mlp(8192, 3, torch.bfloat16))  # ~7 ms of GPU work: more than the host's 2 ms log + launches
    x = torch.randn(4096, 8192, device="cuda", dtype=torch.bfloat16)
    total = torch.zeros((), device="cuda")

    def log() -> None:
        with nvtx("log"):
            time.sleep(LOG_S)

    def problem(i: int) -> None:
        loss = train(x)
        loss.item()
        log()

    def fixed(i: int) -> None:
        nonlocal total
        total = total + train(x).detach()
        log()

    return {"problem": problem, "fixed": fixed}


def graph() -> dict[str, Step]:
    model = mlp(256, 15)
    static_x = torch.randn(64, 256, device="cuda")

    def eager(i: int) -> None:
        with torch.no_grad():
            model(static_x)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    captured = torch.cuda.CUDAGraph()
    with torch.cuda.graph(captured), torch.no_grad():
        model(static_x)

    def replay(i: int) -> None:
        captured.replay()

    return {"problem": eager, "fixed": replay}


def copies(pinned: bool, load: bool, pool: Prefetcher | None) -> Step:
    train = trainer(mlp(4096, 3, torch.bfloat16))
    host = torch.randn(COPY_BYTES // 2, dtype=torch.bfloat16)
    if pinned:
        host = host.pin_memory()

    def step(i: int) -> None:
        if pool is not None:
            pool.get()
        elif load:
            with nvtx("data"):
                time.sleep(LOAD_S)
        x = host.to("cuda", non_blocking=pinned).view(4096, -1)[:, :4096]
        train(x)

    return step


def pageable() -> dict[str, Step]:
    return {"problem": copies(False, False, None), "fixed": copies(True, False, None)}


def two() -> dict[str, Step]:
    def load() -> torch.Tensor:
        time.sleep(LOAD_S)
        return torch.empty(0)

    return {"problem": copies(False, True, None), "fix_load": copies(False, True, Prefetcher(load)),
            "fix_copy": copies(True, True, None), "fixed": copies(True, True, Prefetcher(load))}


def gpu_bound() -> dict[str, Step]:
    train = trainer(mlp(8192, 3, torch.bfloat16))
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def synced(i: int) -> None:
        train(x)
        torch.cuda.synchronize()

    def free(i: int) -> None:
        train(x)

    return {"problem": synced, "fixed": free}


def tf32() -> dict[str, Step]:
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")

    def run(allow: bool) -> Step:
        def step(i: int) -> None:
            torch.backends.cuda.matmul.allow_tf32 = allow
            torch.backends.cudnn.allow_tf32 = allow
            for _ in range(4):
                torch.mm(a, b)
        return step

    return {"problem": run(False), "fixed": run(True)}


def quick_start() -> dict[str, Step]:
    model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step(i: int) -> None:
        loss = model(torch.randn(512, 4096, device="cuda")).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return {"as_is": step}


CASES: dict[str, Callable[[], dict[str, Step]]] = {
    "dataloader": dataloader,  # first: its workers fork before any region has been opened
    "host_load": host_load, "sync_log": sync_log, "graph": graph, "pageable": pageable, "two": two,
    "gpu_bound": gpu_bound, "tf32": tf32, "quick_start": quick_start,
}


def timed(step: Step) -> list[float]:
    """REPEATS runs of STEPS steps with nothing collecting: seconds per step of each run."""
    runs = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(STEPS):
            step(i)
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - start) / STEPS)
    return runs


def recorded(name: str, step: Step, region: Callable[[str], object]) -> None:
    torch.cuda.synchronize()
    with region(name):  # type: ignore[attr-defined]
        for i in range(STEPS):
            torch.cuda.nvtx.range_push(f"step_{i}")
            step(i)
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("truth", type=Path, help="where the ground truth JSON goes")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated cases (default: all)")
    parser.add_argument("--time-only", action="store_true", help="time the variants, record nothing")
    args = parser.parse_args()
    if args.time_only:
        region: Callable[[str], object] = lambda name: nullcontext()  # noqa: E731
    else:
        import nsight_core
        region = nsight_core.range
    torch.manual_seed(0)
    truth: dict[str, object] = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "steps": STEPS, "warmup": WARMUP, "repeats": REPEATS, "profiled_process": not args.time_only, "cases": {}}
    cases: dict[str, object] = truth["cases"]  # type: ignore[assignment]
    for case in args.cases.split(","):
        try:
            variants = CASES[case]()
            result = {}
            for variant, step in variants.items():
                for i in range(WARMUP):
                    step(i)
                runs = timed(step)
                result[variant] = {"step_ms": statistics.median(runs) * 1e3, "runs_ms": [r * 1e3 for r in runs],
                                   "region": f"{case}-{variant}"}
                recorded(f"{case}-{variant}", step, region)
                print(f"fix_pairs: {case}-{variant}: {result[variant]['step_ms']:.3f} ms/step "
                      f"({', '.join(f'{r * 1e3:.3f}' for r in runs)})", flush=True)
            cases[case] = {"variants": result}
        except Exception as exc:  # one broken case must not lose the others' recordings
            print(f"fix_pairs: {case} failed: {exc!r}", file=sys.stderr, flush=True)
            cases[case] = {"error": repr(exc)}
        finally:
            for pool in POOLS:
                pool.close()
            POOLS.clear()
        args.truth.write_text(json.dumps(truth, indent=1))
    print(f"fix_pairs: truth in {args.truth}")


if __name__ == "__main__":
    main()
