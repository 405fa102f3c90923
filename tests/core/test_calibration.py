"""The tracing-cost calibration a region runs as it starts (nsight_core.calibration) never initialises CUDA: it runs
only where the program already did (the GPU recordings of tests/fixtures/h100-fix-pairs-2025.tar.xz show it at work)."""

from __future__ import annotations

import pytest

from nsight_core import calibration


def test_a_program_whose_torch_has_not_started_cuda_is_not_calibrated() -> None:
    torch = pytest.importorskip("torch")
    assert calibration.before_start(("cuda", "nvtx")) is None
    calibration.after_start(None)  # nothing to finish, nothing raised
    assert not torch.cuda.is_initialized()


def test_a_capture_without_cuda_traced_is_not_calibrated() -> None:
    assert calibration.before_start(("nvtx", "osrt")) is None
