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
- small_step: a small eager training step, 33 kernels (a 4-layer 512-wide FP32 MLP, batch 256: forward,
              backward, SGD; host-bound, 1.4-1.9 ms on the H200 machine) with `torch.cuda.empty_cache()` at the
              end of every step (allocator churn: each step one cudaMalloc of what the cache gave back and one
              cudaFree, ~0.1 ms each) | without it.
- per_param:  the optimizer step alone of 240 small parameters (120 64x64 weights and their biases; gradients
              made once): SGD with momentum, Nesterov and weight decay, `foreach=False` (5 kernels a parameter,
              1,200 a step) | `foreach=True` (the same maths in a few dozen multi-tensor kernels). Recorded
              over STEPS_OF["per_param"] steps, so that its 1,200 launches a step keep the capture small.
- deep_adam:  a deep, narrow training step: a 96-layer 256-wide FP32 MLP, batch 128, forward and backward (about
              600 kernels), then Adam with `foreach=False` (about 1,000 more, a few per parameter) | `foreach=True`:
              the fixed twin still launches hundreds of kernels a step and stays host-bound. Recorded over
              STEPS_OF["deep_adam"] steps.
- train_graph: small_step's training step without empty_cache, eager (forward on the step's thread, backward
              launched by autograd's) | the whole step (forward, backward, SGD) captured once as a CUDA graph and
              replayed (torch.cuda.graph, static input and gradients).
- prefetch:   a 128 MiB fp32 batch in pinned memory copied on the compute stream right before a ~4 ms bf16
              training step (copy and compute in series) | the batch of step i+1 copied on a side stream
              (torch.cuda.Stream, an event the compute stream waits on, record_stream) while step i computes.
- bf16:       an FP32 GEMM-bound training step (three 4096-wide layers, batch 2048, TF32 off) | the same under
              `torch.autocast("cuda", dtype=torch.bfloat16)` (FP32 master weights, bf16 tensor-core GEMMs).
- bf16_tf32:  bf16's step with TF32 on for matmuls | under bf16 autocast: TF32 GEMMs against bf16 ones.
- conv_tf32:  a convolution-bound training step (six 3x3 convolutions of 128 channels on 56x56 images, batch 32,
              NCHW, SGD) in FP32 with cuDNN's TF32 off | on (`torch.backends.cudnn.allow_tf32`, PyTorch's default).
- conv_bf16:  the same step in FP32, TF32 off | under bf16 autocast.
- conv_default: the same step with PyTorch's defaults (cuDNN's TF32 on) | under bf16 autocast: TF32 convolutions
              against bf16 ones.
- tf32_small: small_step's FP32 MLP (4 layers of 512, batch 256) without empty_cache, TF32 off | on: the host
              bounds the step, so faster GEMMs leave longer gaps.
- tf32_balanced: the same at 1024 wide, batch 512: GEMMs about as long as the host's launches.
- tf32_wide:  the same at 2048 wide, batch 1024: the GPU bounds the FP32 step.
- bf16_small: tf32_small's problem | under bf16 autocast (more kernels: the casts).
- small_copies: 256 per-sample tensors (3x32x32 fp32) copied to the GPU one by one with `.to("cuda")` from
              pageable memory (a cudaMemcpyAsync and a stream synchronise each), then stacked on the GPU |
              stacked on the host, pinned and copied once with non_blocking=True. A small MLP then trains.
- checkpoint: the model's state (48 MiB: three 2048-wide FP32 layers) copied device-to-host and `torch.save`d
              to a file in a temporary folder every step | every 100 steps (step indices 99, 199, ...: never
              among the steps timed or recorded here). The training step itself is ~1.5 ms.
- mask_sync:  a bf16 GEMM (~0.8 ms of GPU), then boolean-mask indexing `h[h > 0]` whose result size the host
              must read (nonzero: a device-to-host copy and a stream synchronise), then the mean of the selected
              values and a tail of 60 tiny ops, every step | the same mean as a fixed-shape
              `torch.where(h > 0, h, 0).sum() / (h > 0).sum()`: nothing the host waits for.
- list_tensor: per-step values held in a Python list (4096 sample weights, say) turned into a CUDA tensor
              with `torch.tensor(values, device="cuda")` after the same GEMM: a copy from pageable memory
              that PyTorch follows with cudaStreamSynchronize, so the host waits until all the GPU work queued
              before it is done, then the weighted mean and the tail | `torch.tensor(values,
              pin_memory=True).to("cuda", non_blocking=True)`: nothing the host waits for. (A real pattern:
              lengths, labels or weights built in Python each step.)

- alloc_churn: a 24-layer bf16 MLP (1024 wide, batch 8192: each activation 16 MiB, above the caching allocator's
              10 MiB split limit, so each is a segment of its own) trained with `torch.cuda.empty_cache()` every step:
              every step's activations are new cudaMalloc calls, and empty_cache gives them back with as many
              cudaFree calls (each waits for the GPU) | without it.
- mask_tail:  three bf16 GEMMs (~2.4 ms of GPU), then boolean-mask indexing `h[h > 0]` (nonzero: the host waits
              for the GEMMs), then TAIL_LONG tiny ops (~2 ms of launches) | the fixed-shape `torch.where` form:
              the tail's launches overlap the GEMMs.
- item_if:    the same GEMMs, then a Python `if` on a tensor (`if h.mean() > 0:`: a one-byte read back and a
              stream synchronise), then the tail | the branch as `torch.where` on the GPU.
- item_if_deep, mask_tail_deep: the same with DEEP_GEMMS GEMMs (~7 ms of GPU), so that the fixed twin is bound by
              the GPU, not by the host's launches (whose time moves from run to run).
- list_tensor_deep: list_tensor after DEEP_GEMMS GEMMs, with the TAIL_LONG tail: the pageable copy waits for them.
- alloc_churn_deep: alloc_churn at batch 32768 (64 MiB activations): the GPU's work outlasts the host's.
- item_if_spin, mask_tail_spin, list_tensor_spin: the same causes after a SPIN_MS spin kernel (the same cycles in
              both twins) instead of GEMMs: GPU work of another kind than the *_deep cases', whose fixed twins' GEMMs
              ran 6-9 % longer than their problems' (a GPU that never idles runs at lower clocks).

Options: `--cases` picks cases, `--variants` variants (e.g. `problem`), `--time-only` records nothing,
`--probe` times four kinds of host work (probes()) just before each region and inside it, into the truth, and
`--region cuda-profiler` makes each region a cudaProfilerStart/Stop pair (torch.cuda.profiler) instead of
an nsight region, for `nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop` (one region
then: nsys stops collecting at the first stop). The TF32 switches are set off before each case (the tf32 case
turns them on).
"""

from __future__ import annotations

import argparse
import atexit
import functools
import json
import queue
import shutil
import statistics
import sys
import tempfile
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
DEVICE = "cuda"
STEPS_OF = {"per_param": 12, "deep_adam": 12}
"""Cases recorded over fewer steps than STEPS (their steps launch so much that a capture would grow large)."""
TAIL_OPS = 30
"""mask_sync/list_tensor: the tiny ops after the value the host waits for (two kernels each)."""
TAIL_LONG = 100
"""mask_tail/item_if: the tiny ops after the value the host waits for (two kernels each, ~2 ms of launches)."""
SPIN_MS = 7.0
"""The *_spin cases: the spin kernel's time before the value the host waits for."""
DEEP_GEMMS = 9
"""The *_deep cases: GEMMs before the value the host waits for (~7 ms of GPU, above the host's ~2-3 ms a step)."""

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


def small_step() -> dict[str, Step]:
    train = trainer(mlp(512, 4))
    x = torch.randn(256, 512, device=DEVICE)

    def problem(i: int) -> None:
        train(x)
        torch.cuda.empty_cache()

    def fixed(i: int) -> None:
        train(x)

    return {"problem": problem, "fixed": fixed}


def train_graph() -> dict[str, Step]:
    x = torch.randn(256, 512, device=DEVICE)
    eager = trainer(mlp(512, 4))
    model = mlp(512, 4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    def step() -> None:
        model(x).float().pow(2).mean().backward()
        opt.step()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up where the capture will run: the graph sees settled allocations
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    captured = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(captured):
        step()

    def replay(i: int) -> None:
        captured.replay()

    return {"problem": lambda i: eager(x), "fixed": replay}


def per_param() -> dict[str, Step]:
    def optimizer(foreach: bool) -> torch.optim.Optimizer:
        params = []
        for _ in range(120):
            params += [nn.Parameter(torch.randn(64, 64, device=DEVICE)), nn.Parameter(torch.randn(64, device=DEVICE))]
        for param in params:
            param.grad = torch.randn_like(param)
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9, nesterov=True, weight_decay=1e-4, foreach=foreach)

    loops, multi = optimizer(False), optimizer(True)
    return {"problem": lambda i: loops.step(), "fixed": lambda i: multi.step()}


def deep_adam() -> dict[str, Step]:
    model = mlp(256, 96)
    x = torch.randn(128, 256, device=DEVICE)

    def train(foreach: bool) -> Step:
        opt = torch.optim.Adam(model.parameters(), lr=1e-6, foreach=foreach)

        def step(i: int) -> None:
            loss = model(x).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        return step

    return {"problem": train(False), "fixed": train(True)}


def prefetch() -> dict[str, Step]:
    train = trainer(mlp(4096, 3, torch.bfloat16))
    host = torch.randn(8192, 4096).pin_memory()  # 128 MiB, already pinned: only where the copy runs differs

    def problem(i: int) -> None:
        x = host.to(DEVICE, non_blocking=True)
        train(x.to(torch.bfloat16))

    side = torch.cuda.Stream()

    def load() -> tuple[torch.Tensor, torch.cuda.Event]:
        with torch.cuda.stream(side):
            x = host.to(DEVICE, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(side)
        return x, ready

    ahead: list[tuple[torch.Tensor, torch.cuda.Event]] = []

    def fixed(i: int) -> None:
        x, ready = ahead.pop() if ahead else load()
        compute = torch.cuda.current_stream()
        compute.wait_event(ready)
        x.record_stream(compute)  # x was allocated on the side stream: keep it until compute is done with it
        ahead.append(load())  # step i+1's batch: copied while this step computes
        train(x.to(torch.bfloat16))

    return {"problem": problem, "fixed": fixed}


def precision_step(model: nn.Module, x: torch.Tensor, switch: Callable[[bool], None]) -> Callable[..., Step]:
    """An SGD training step of MODEL on X whose variants set SWITCH (a TF32 flag) and bf16 autocast."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    def run(tf32: bool, autocast: bool) -> Step:
        def step(i: int) -> None:
            switch(tf32)
            with torch.autocast("cuda", dtype=torch.bfloat16) if autocast else nullcontext():
                loss = model(x).float().pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return step

    return run


def bf16(tf32: bool = False) -> dict[str, Step]:
    run = precision_step(mlp(4096, 3), torch.randn(2048, 4096, device=DEVICE),
                         lambda allow: setattr(torch.backends.cuda.matmul, "allow_tf32", allow))
    return {"problem": run(tf32, False), "fixed": run(tf32, True)}


def small_precision(width: int, batch: int, autocast: bool = False) -> dict[str, Step]:
    """The tf32_small, tf32_balanced, tf32_wide and bf16_small cases: an FP32 MLP of 4 layers of WIDTH, batch
    BATCH, whose fixed twin allows TF32 (or runs under bf16 autocast, AUTOCAST)."""
    run = precision_step(mlp(width, 4), torch.randn(batch, width, device=DEVICE),
                         lambda allow: setattr(torch.backends.cuda.matmul, "allow_tf32", allow))
    return {"problem": run(False, False), "fixed": run(not autocast, autocast)}


def convolutions(tf32: tuple[bool, bool], autocast: tuple[bool, bool]) -> dict[str, Step]:
    """The conv_* cases: the problem's and the fixed twin's cuDNN TF32 switch and bf16 autocast."""
    layers: list[nn.Module] = []
    for _ in range(6):
        layers += [nn.Conv2d(128, 128, 3, padding=1), nn.ReLU()]
    run = precision_step(nn.Sequential(*layers).to(DEVICE), torch.randn(32, 128, 56, 56, device=DEVICE),
                         lambda allow: setattr(torch.backends.cudnn, "allow_tf32", allow))
    return {"problem": run(tf32[0], autocast[0]), "fixed": run(tf32[1], autocast[1])}


def small_copies() -> dict[str, Step]:
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 1024), nn.ReLU(), nn.Linear(1024, 10))
    train = trainer(model.to(DEVICE))
    samples = [torch.randn(3, 32, 32) for _ in range(256)]  # as a Dataset hands them over: pageable, one by one

    def problem(i: int) -> None:
        train(torch.stack([sample.to(DEVICE) for sample in samples]))

    def fixed(i: int) -> None:
        train(torch.stack(samples).pin_memory().to(DEVICE, non_blocking=True))

    return {"problem": problem, "fixed": fixed}


def checkpoint() -> dict[str, Step]:
    model = mlp(2048, 3)  # 3 x (2048 x 2048 + 2048) FP32 parameters: 48 MiB
    train = trainer(model)
    x = torch.randn(1024, 2048, device=DEVICE)
    folder = Path(tempfile.mkdtemp(prefix="fix_pairs-checkpoint-"))
    atexit.register(shutil.rmtree, folder, True)

    def save() -> None:
        torch.save({name: value.detach().cpu() for name, value in model.state_dict().items()}, folder / "model.pt")

    def run(every: int) -> Step:
        def step(i: int) -> None:
            train(x)
            if i % every == every - 1:
                save()
        return step

    return {"problem": run(1), "fixed": run(100)}


def tail(value: torch.Tensor, ops: int = TAIL_OPS) -> torch.Tensor:
    """A little GPU work after the step's value: OPS tiny ops of two kernels each (a metric's upkeep)."""
    for _ in range(ops):
        value = value * 0.5 + 1.0
    return value


def gemm_then(select: Callable[[torch.Tensor], torch.Tensor], gemms: int = 1, ops: int = TAIL_OPS) -> Step:
    """GEMMS 4096x8192x8192 bf16 GEMMs (~0.8 ms of GPU each, one launch), then SELECT of the result, then the tail
    of OPS tiny ops."""
    a = torch.randn(4096, 8192, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16)
    total = torch.zeros((), device=DEVICE)

    def step(i: int) -> None:
        nonlocal total
        h = a @ b
        for _ in range(gemms - 1):
            h = h @ b
        total = total + tail(select(h), ops)

    return step


@functools.cache
def spin_cycles() -> int:
    """The spin kernel's cycles for SPIN_MS, measured once (after a first spin that loads the kernel), so that a
    problem and its fixed twin spin alike."""
    torch.cuda._sleep(1_000_000)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    stop.record()
    torch.cuda.synchronize()
    return int(10_000_000 * SPIN_MS / start.elapsed_time(stop))


def spin_then(select: Callable[[torch.Tensor], torch.Tensor], ops: int = TAIL_LONG) -> Step:
    """A SPIN_MS spin kernel (torch.cuda._sleep: a fixed number of cycles), then SELECT of a 4096x8192 bf16 tensor
    made after it, then the tail of OPS tiny ops."""
    x = torch.randn(4096, 8192, device=DEVICE, dtype=torch.bfloat16)
    cycles = spin_cycles()
    total = torch.zeros((), device=DEVICE)

    def step(i: int) -> None:
        nonlocal total
        torch.cuda._sleep(cycles)
        total = total + tail(select(x * 1.0), ops)

    return step


def mask_sync() -> dict[str, Step]:
    def masked(h: torch.Tensor) -> torch.Tensor:
        return h[h > 0].float().mean()  # the result's size is data: the host reads it before going on

    def fixed_shape(h: torch.Tensor) -> torch.Tensor:
        positive = h > 0
        return torch.where(positive, h, 0).float().sum() / positive.sum()

    return {"problem": gemm_then(masked), "fixed": gemm_then(fixed_shape)}


def list_tensor(gemms: int = 1, ops: int = TAIL_OPS, spin: bool = False) -> dict[str, Step]:
    values = [float(j % 7) for j in range(4096)]  # built in Python (weights, lengths, labels...)

    def pageable(h: torch.Tensor) -> torch.Tensor:
        weights = torch.tensor(values, device=DEVICE)  # pageable copy: waits for the GEMM
        return (h[: len(values), 0].float() * weights).mean()

    def pinned(h: torch.Tensor) -> torch.Tensor:
        weights = torch.tensor(values, pin_memory=True).to(DEVICE, non_blocking=True)
        return (h[: len(values), 0].float() * weights).mean()

    if spin:
        return {"problem": spin_then(pageable, ops), "fixed": spin_then(pinned, ops)}
    return {"problem": gemm_then(pageable, gemms, ops), "fixed": gemm_then(pinned, gemms, ops)}


def alloc_churn(batch: int = 8192) -> dict[str, Step]:
    train = trainer(mlp(1024, 24, torch.bfloat16))
    x = torch.randn(batch, 1024, device=DEVICE, dtype=torch.bfloat16)  # 16 MiB activations and more: a segment each

    def problem(i: int) -> None:
        train(x)
        torch.cuda.empty_cache()

    def fixed(i: int) -> None:
        train(x)

    return {"problem": problem, "fixed": fixed}


def mask_tail(gemms: int = 3, spin: bool = False) -> dict[str, Step]:
    def masked(h: torch.Tensor) -> torch.Tensor:
        return h[h > 0].float().mean()

    def fixed_shape(h: torch.Tensor) -> torch.Tensor:
        positive = h > 0
        return torch.where(positive, h, 0).float().sum() / positive.sum()

    if spin:
        return {"problem": spin_then(masked), "fixed": spin_then(fixed_shape)}
    return {"problem": gemm_then(masked, gemms, TAIL_LONG), "fixed": gemm_then(fixed_shape, gemms, TAIL_LONG)}


def item_if(gemms: int = 3, spin: bool = False) -> dict[str, Step]:
    def branch(h: torch.Tensor) -> torch.Tensor:
        m = h.float().mean()
        if m > 0:  # a Python `if` on a tensor: reads one byte back and waits for the GPU
            return m * 2.0
        return m * 0.5

    def on_gpu(h: torch.Tensor) -> torch.Tensor:
        m = h.float().mean()
        return torch.where(m > 0, m * 2.0, m * 0.5)

    if spin:
        return {"problem": spin_then(branch), "fixed": spin_then(on_gpu)}
    return {"problem": gemm_then(branch, gemms, TAIL_LONG), "fixed": gemm_then(on_gpu, gemms, TAIL_LONG)}


CASES: dict[str, Callable[[], dict[str, Step]]] = {
    "dataloader": dataloader,  # first: its workers fork before any region has been opened
    "host_load": host_load, "sync_log": sync_log, "graph": graph, "pageable": pageable, "two": two,
    "gpu_bound": gpu_bound, "tf32": tf32, "quick_start": quick_start,
    "small_step": small_step, "train_graph": train_graph, "per_param": per_param, "deep_adam": deep_adam,
    "prefetch": prefetch, "bf16": bf16,
    "bf16_tf32": lambda: bf16(tf32=True),
    "conv_tf32": lambda: convolutions((False, True), (False, False)),
    "conv_bf16": lambda: convolutions((False, False), (False, True)),
    "conv_default": lambda: convolutions((True, True), (False, True)),
    "tf32_small": lambda: small_precision(512, 256), "tf32_balanced": lambda: small_precision(1024, 512),
    "tf32_wide": lambda: small_precision(2048, 1024), "bf16_small": lambda: small_precision(512, 256, autocast=True),
    "small_copies": small_copies, "checkpoint": checkpoint, "mask_sync": mask_sync, "list_tensor": list_tensor,
    "alloc_churn": alloc_churn, "mask_tail": mask_tail, "item_if": item_if,
    # The same causes in steps the GPU bounds once fixed: their truth moves less with the host.
    "item_if_deep": lambda: item_if(DEEP_GEMMS), "mask_tail_deep": lambda: mask_tail(DEEP_GEMMS),
    "list_tensor_deep": lambda: list_tensor(DEEP_GEMMS, TAIL_LONG), "alloc_churn_deep": lambda: alloc_churn(32768),
    # ...and after a spin kernel instead of GEMMs.
    "item_if_spin": lambda: item_if(spin=True), "mask_tail_spin": lambda: mask_tail(spin=True),
    "list_tensor_spin": lambda: list_tensor(ops=TAIL_LONG, spin=True),
}


PROBE = False
"""--probe: time probes() before and inside each region."""


def timed(step: Step, steps: int = STEPS) -> list[float]:
    """REPEATS runs of STEPS steps with nothing collecting: seconds per step of each run."""
    runs = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(steps):
            step(i)
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - start) / steps)
    return runs


class CudaProfilerRegion:
    """A region as cudaProfilerStart/Stop, for `nsys profile --capture-range=cudaProfilerApi`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        torch.cuda.profiler.start()

    def __exit__(self, *exc: object) -> None:
        torch.cuda.profiler.stop()


def probes() -> dict[str, float]:
    """Host ns per unit of four kinds of work, each the fastest of 3 bursts: an empty kernel launch, `t.add_(1)` on
    the GPU, a small CPU tensor add (torch's dispatch, no CUDA call) and pure Python: what tracing adds to each, timed
    with and without the collection, tells a per-call cost from a slowdown of the host's own work."""
    gpu, cpu = torch.zeros(1, device="cuda"), torch.zeros(16)
    work: dict[str, Callable[[], object]] = {
        "empty": lambda: torch.cuda._sleep(0), "add": lambda: gpu.add_(1), "cpu_torch": lambda: torch.add(cpu, cpu),
        "python": lambda: sum(range(200))}
    out = {}
    for kind, unit in work.items():
        best = float("inf")
        for _ in range(3):
            spent = 0
            for _ in range(10):
                torch.cuda.synchronize()
                start = time.perf_counter_ns()
                for _ in range(50):
                    unit()
                spent += time.perf_counter_ns() - start
            best = min(best, spent / 500)
        out[kind] = best
    torch.cuda.synchronize()
    return out


PROBED: dict[str, dict[str, float]] = {}


def recorded(name: str, step: Step, region: Callable[[str], object], steps: int = STEPS) -> None:
    torch.cuda.synchronize()
    if PROBE:
        PROBED["before"] = probes()
    with region(name):  # type: ignore[attr-defined]
        if PROBE:
            PROBED["during"] = probes()
        for i in range(steps):
            torch.cuda.nvtx.range_push(f"step_{i}")
            step(i)
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("truth", type=Path, help="where the ground truth JSON goes")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated cases (default: all)")
    parser.add_argument("--variants", default="", help="comma-separated variants to run (default: all)")
    parser.add_argument("--time-only", action="store_true", help="time the variants, record nothing")
    parser.add_argument("--region", choices=("nsight", "cuda-profiler"), default="nsight",
                        help="what a region is: an nsight_core.range (default) or cudaProfilerStart/Stop")
    parser.add_argument("--probe", action="store_true", help="time probes() before and inside each region")
    args = parser.parse_args()
    global PROBE
    PROBE = args.probe
    wanted = {v for v in args.variants.split(",") if v}
    if args.time_only:
        region: Callable[[str], object] = lambda name: nullcontext()  # noqa: E731
    elif args.region == "cuda-profiler":
        region = CudaProfilerRegion
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
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # tf32 turns them on
            variants = CASES[case]()
            steps = STEPS_OF.get(case, STEPS)
            result = {}
            for variant, step in variants.items():
                if wanted and variant not in wanted:
                    continue
                for i in range(WARMUP):
                    step(i)
                runs = timed(step, steps)
                result[variant] = {"step_ms": statistics.median(runs) * 1e3, "runs_ms": [r * 1e3 for r in runs],
                                   "region": f"{case}-{variant}", "steps": steps}
                recorded(f"{case}-{variant}", step, region, steps)
                if PROBE:
                    result[variant]["probe"] = dict(PROBED)
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
