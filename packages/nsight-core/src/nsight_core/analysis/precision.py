"""How much faster FP32 matrix work runs on tensor cores (TF32, or bf16 autocast), from the GPU's peak rates.

A large GEMM runs near peak on CUDA or tensor cores alike, so it runs tensor peak / FP32 peak times faster; small GEMMs
gain less: an estimate to check. What that wins a step depends on what waited for the GEMMs (analysis/what_if.py).
None before compute capability 8.0 (no TF32, no bf16)."""

from __future__ import annotations

from typing import NamedTuple


class PeakRates(NamedTuple):
    """Dense peak TFLOP/s of one GPU generation (NVIDIA's data sheets; sparsity not counted)."""

    fp32: float
    tf32: float | None
    bf16: float | None


PEAKS: dict[float, PeakRates] = {
    8.0: PeakRates(fp32=19.5, tf32=156.0, bf16=312.0),  # A100
    8.6: PeakRates(fp32=31.2, tf32=62.5, bf16=125.0),  # A10, RTX 30
    8.9: PeakRates(fp32=91.6, tf32=183.0, bf16=362.0),  # L40S, L4, RTX 40
    9.0: PeakRates(fp32=67.0, tf32=494.7, bf16=989.4),  # H100, H200
    10.0: PeakRates(fp32=80.0, tf32=1100.0, bf16=2250.0),  # B200
    12.0: PeakRates(fp32=104.8, tf32=104.8, bf16=209.5),  # RTX 50, RTX PRO Blackwell
}
"""By compute capability; a GPU between two entries takes the lower one's."""


class Speedups(NamedTuple):
    """How many times faster an FP32 GEMM runs with TF32 and under bf16 (None: no tensor cores for that type)."""

    tf32: float | None
    bf16: float | None


def speedups(capability: float | None) -> Speedups:
    """The TF32 and bf16 speedups of FP32 GEMMs on a GPU of this compute CAPABILITY (None: unknown GPU, none)."""
    known = [key for key in PEAKS if capability is not None and key <= capability]
    if not known:
        return Speedups(None, None)
    peak = PEAKS[max(known)]
    return Speedups(*(tensor / peak.fp32 if tensor is not None and tensor > peak.fp32 else None
                      for tensor in (peak.tf32, peak.bf16)))


class Replayed(NamedTuple):
    """What the steps would win over the capture with TF32 and under bf16 (None: no tensor cores for that type)."""

    tf32_ns: float | None
    bf16_ns: float | None


NOT_REPLAYED = Replayed(None, None)
"""No FP32 matrix kernel, or no tensor cores: nothing to win."""
