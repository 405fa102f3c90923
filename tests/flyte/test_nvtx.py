"""nvtx.range / nvtx.mark pick a backend that works, and never fail the code they label."""

from __future__ import annotations

import importlib
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
    """Backends chosen anew, with room for a stub torch on the path; yields a function hiding `nvtx`.

    The real torch modules (if any) are set aside and put back afterwards, the stub's dropped.
    """
    real = {name: module for name, module in sys.modules.items() if name == "torch" or name.startswith("torch.")}
    for name in real:
        del sys.modules[name]
    monkeypatch.setattr(nvtx, "_chain", None)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield lambda: monkeypatch.setitem(sys.modules, "nvtx", None)
    for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
        del sys.modules[name]
    sys.modules.update(real)


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
        importlib.import_module("torch.cuda.nvtx").range_push("x")
    monkeypatch.setattr(nvtx, "_chain", None)
    assert label_some_code() == 42
    assert nvtx._backends()[0].name == "nvtx"
