"""nvtx.range / nvtx.mark pick a backend that works, and never fail the code they label."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from flyteplugins.nsight import nvtx

CPU_TORCH_ERROR = "NVTX functions not installed. Are you sure you have a CUDA build?"


def stub_torch(root: Path, cuda_version: str | None) -> None:
    """A torch whose torch.cuda.nvtx imports fine and raises when called, like a CPU-only build."""
    package = root / "torch"
    (package / "cuda").mkdir(parents=True)
    (package / "__init__.py").write_text("from torch import cuda, version\n")
    (package / "version.py").write_text(f"cuda = {cuda_version!r}\n")
    (package / "cuda" / "__init__.py").write_text("")
    (package / "cuda" / "nvtx.py").write_text(
        "def _fail(*args):\n"
        f"    raise RuntimeError({CPU_TORCH_ERROR!r})\n"
        "range_push = range_pop = mark = _fail\n"
    )


@pytest.fixture
def fresh_backends(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Backends chosen anew, with a CPU-only torch on the path; returns a function hiding `nvtx`."""
    for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(nvtx, "_chain", None)
    monkeypatch.syspath_prepend(str(tmp_path))
    return lambda: monkeypatch.setitem(sys.modules, "nvtx", None)


def label_some_code() -> int:
    with nvtx.range("outer"):
        nvtx.mark("here")
        with nvtx.range("inner"):
            return 42


@pytest.mark.parametrize("cuda_version", [None, "12.4"])
def test_cpu_only_torch_falls_back_to_the_nvtx_package(fresh_backends, tmp_path, cuda_version):
    stub_torch(tmp_path, cuda_version)  # "12.4": a build that claims CUDA but still raises when called
    assert label_some_code() == 42
    assert nvtx._backends()[0].name == "nvtx"


def test_without_any_backend_labels_are_a_no_op(fresh_backends, tmp_path):
    stub_torch(tmp_path, None)
    fresh_backends()
    assert label_some_code() == 42
    assert [backend.name for backend in nvtx._backends()] == ["none"]


def test_range_lets_the_blocks_exception_through(fresh_backends, tmp_path):
    with pytest.raises(ZeroDivisionError), nvtx.range("failing"):
        _ = 1 / 0
    assert label_some_code() == 42


def test_real_cpu_only_torch_is_passed_over(monkeypatch):
    torch = pytest.importorskip("torch", reason="make test installs a CPU build of torch")
    if torch.version.cuda:
        pytest.skip("this torch is a CUDA build")
    with pytest.raises(RuntimeError):  # what a CPU build does when asked for NVTX
        torch.cuda.nvtx.range_push("x")
    monkeypatch.setattr(nvtx, "_chain", None)
    assert label_some_code() == 42
    assert nvtx._backends()[0].name == "nvtx"
