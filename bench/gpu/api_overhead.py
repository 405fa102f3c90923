"""What nsys' CUDA tracing adds to each CUDA API call: bursts timed without collection, then inside a region.

    nsight run --capture manual --trace cuda,nvtx -o DIR -- python bench/gpu/api_overhead.py DIR/api_overhead.json
    python bench/gpu/api_overhead.py --time-only PLAIN.json      (no region: the unprofiled times alone)

In one process, for each kind of call below, a burst of N calls (a device synchronise before and after, the
time of the whole burst over N) is timed REPEATS times with nothing collecting, then REPEATS times inside one
nsight region `api_overhead` (each burst in an NVTX range `<kind>_<repeat>`), then REPEATS times unprofiled
again (the two unprofiled passes together give the unprofiled median, and their spread the noise). The
added time per call is the profiled median minus the unprofiled one. Kinds:

- launch:        `t.add_(1)` on a 1-element tensor: one tiny kernel (cudaLaunchKernel) and PyTorch's dispatch.
- torch_zero:    `t.zero_()` on a 4-byte tensor: what PyTorch makes of a zero fill (a fill kernel, not a memset).
- memset:        cudaMemsetAsync of 4 bytes, called through ctypes on the process' own libcudart.
- h2d_4B:        cudaMemcpyAsync of 4 bytes host-to-device from pinned memory (ctypes): the bare copy.
- torch_h2d_4B:  `dst.copy_(pinned_src, non_blocking=True)` of 4 bytes: the copy as PyTorch issues it.
- event_record:  cudaEventRecord of a timing-disabled event (ctypes).
- stream_sync:   cudaStreamSynchronize of the idle current stream (ctypes).
- device_sync:   `torch.cuda.synchronize()` (cudaDeviceSynchronize) of an idle device.

The ctypes kinds are skipped (and say why) when the process' libcudart cannot be found. Several runs may share
one JSON file: each run is appended to its "runs" list with its --label (e.g. the sampling setting).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch

N = 2000
REPEATS = 5
H2D = 1  # cudaMemcpyHostToDevice


def find_cudart() -> ctypes.CDLL | None:
    """The libcudart PyTorch loaded (so the calls go through the same runtime nsys injected into)."""
    with open("/proc/self/maps") as maps:
        paths = sorted({line.split()[-1] for line in maps
                        if "libcudart.so" in line and line.split()[-1].startswith("/")})
    for name in [*paths, "libcudart.so.13", "libcudart.so.12", "libcudart.so"]:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        for fn, args in (("cudaMemsetAsync", [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]),
                         ("cudaMemcpyAsync", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                              ctypes.c_void_p]),
                         ("cudaEventCreateWithFlags", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]),
                         ("cudaEventRecord", [ctypes.c_void_p, ctypes.c_void_p]),
                         ("cudaStreamSynchronize", [ctypes.c_void_p])):
            getattr(lib, fn).argtypes = args
            getattr(lib, fn).restype = ctypes.c_int
        lib.path = name  # type: ignore[attr-defined]
        return lib
    return None


def checked(code: int) -> None:
    if code != 0:
        raise RuntimeError(f"CUDA runtime error {code}")


def kinds() -> tuple[dict[str, Callable[[], object]], dict[str, str], str | None]:
    """The call of each kind, why a kind is missing, and the libcudart the ctypes kinds call."""
    one = torch.zeros(1, device="cuda")
    small = torch.zeros(1, device="cuda")
    dst = torch.zeros(1, device="cuda")
    src = torch.ones(1).pin_memory()
    calls: dict[str, Callable[[], object]] = {
        "launch": lambda: one.add_(1),
        "torch_zero": small.zero_,
        "torch_h2d_4B": lambda: dst.copy_(src, non_blocking=True),
        "device_sync": torch.cuda.synchronize,
    }
    missing: dict[str, str] = {}
    cudart = find_cudart()
    if cudart is None:
        for kind in ("memset", "h2d_4B", "event_record", "stream_sync"):
            missing[kind] = "no libcudart found in the process"
        return calls, missing, None
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    event = ctypes.c_void_p()
    checked(cudart.cudaEventCreateWithFlags(ctypes.byref(event), 2))  # cudaEventDisableTiming
    target = ctypes.c_void_p(small.data_ptr())
    pinned = ctypes.c_void_p(src.data_ptr())
    device_dst = ctypes.c_void_p(dst.data_ptr())
    memset, memcpy = cudart.cudaMemsetAsync, cudart.cudaMemcpyAsync
    record, sync = cudart.cudaEventRecord, cudart.cudaStreamSynchronize
    calls["memset"] = lambda: memset(target, 0, 4, stream)
    calls["h2d_4B"] = lambda: memcpy(device_dst, pinned, 4, H2D, stream)
    calls["event_record"] = lambda: record(event, stream)
    calls["stream_sync"] = lambda: sync(stream)
    for kind in ("memset", "h2d_4B", "event_record", "stream_sync"):  # each must work before it is timed
        checked(int(calls[kind]()))  # type: ignore[call-overload]
    torch.cuda.synchronize()
    return calls, missing, str(cudart.path)  # type: ignore[attr-defined]


def burst(call: Callable[[], object]) -> float:
    """Microseconds per call of a burst of N, from a synchronised start to a synchronised end."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(N):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / N * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the JSON file (a run is appended to its 'runs')")
    parser.add_argument("--label", default="", help="what distinguishes this run (e.g. the sampling setting)")
    parser.add_argument("--time-only", action="store_true", help="no region: unprofiled times only")
    args = parser.parse_args()
    if args.time_only:
        region: Callable[[str], object] = lambda name: nullcontext()  # noqa: E731
    else:
        import nsight_core
        region = nsight_core.range
    calls, missing, cudart = kinds()
    for call in calls.values():  # warm-up: first launches, lazy module loads
        for _ in range(200):
            call()
    torch.cuda.synchronize()
    plain: dict[str, list[float]] = {kind: [] for kind in calls}
    profiled: dict[str, list[float]] = {kind: [] for kind in calls}
    for kind, call in calls.items():
        plain[kind] += [burst(call) for _ in range(REPEATS)]
    with region("api_overhead"):  # type: ignore[attr-defined]
        for kind, call in calls.items():
            for repeat in range(REPEATS):
                torch.cuda.nvtx.range_push(f"{kind}_{repeat}")
                profiled[kind].append(burst(call))
                torch.cuda.nvtx.range_pop()
    for kind, call in calls.items():
        plain[kind] += [burst(call) for _ in range(REPEATS)]
    results = {}
    for kind in calls:
        unprofiled = statistics.median(plain[kind])
        entry = {"unprofiled_us": unprofiled, "unprofiled_runs_us": plain[kind]}
        if not args.time_only:
            during = statistics.median(profiled[kind])
            entry |= {"profiled_us": during, "profiled_runs_us": profiled[kind], "added_us": during - unprofiled}
        results[kind] = entry
        added = f", profiled {entry['profiled_us']:.2f}, added {entry['added_us']:+.2f}" if not args.time_only else ""
        print(f"api_overhead: {kind}: unprofiled {unprofiled:.2f} us/call{added}", flush=True)
    run = {"label": args.label, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "calls_per_burst": N, "repeats": REPEATS, "cudart": cudart,
           "profiled_process": not args.time_only, "nsys": os.environ.get("NSIGHT_NSYS"), "kinds": results,
           "missing": missing}
    data = json.loads(args.out.read_text()) if args.out.exists() else {"runs": []}
    data["runs"].append(run)
    args.out.write_text(json.dumps(data, indent=1))
    print(f"api_overhead: appended to {args.out}")


if __name__ == "__main__":
    main()
