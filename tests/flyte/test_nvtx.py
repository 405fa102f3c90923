"""nvtx.range / nvtx.mark pick a backend that works, and never fail the code they label.

Each case runs in a fresh interpreter: which torch is importable decides the backend, and a torch
(stub or real) cannot be swapped in and out of one process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CPU_TORCH_ERROR = "NVTX functions not installed. Are you sure you have a CUDA build?"

LABEL_SOME_CODE = """
import sys
if "--hide-nvtx" in sys.argv:
    sys.modules["nvtx"] = None  # as if NVIDIA's nvtx package were not installed
from flyteplugins.nsight import nvtx

def labelled():
    with nvtx.range("outer"):
        nvtx.mark("here")
        with nvtx.range("inner"):
            return 42

try:
    with nvtx.range("failing"):
        1 / 0
except ZeroDivisionError:
    pass
assert labelled() == 42
print(",".join(backend.name for backend in nvtx._backends()))
"""


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


def backends_after_labelling(*args: str, path: Path | None = None) -> str:
    """The backend chain after labelling some code (the block that raises included) in a new Python."""
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", LABEL_SOME_CODE, *args], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("cuda_version", [None, "12.4"])
def test_cpu_only_torch_falls_back_to_the_nvtx_package(tmp_path, cuda_version):
    stub_torch(tmp_path, cuda_version)  # "12.4": a build that claims CUDA but still raises when called
    assert backends_after_labelling(path=tmp_path) == "nvtx,none"


def test_without_any_backend_labels_are_a_no_op(tmp_path):
    stub_torch(tmp_path, None)
    assert backends_after_labelling("--hide-nvtx", path=tmp_path) == "none"


def test_real_cpu_only_torch_is_passed_over():
    torch = pytest.importorskip("torch", reason="make test installs a CPU build of torch")
    if torch.version.cuda:
        pytest.skip("this torch is a CUDA build")
    with pytest.raises(RuntimeError):  # what a CPU build does when asked for NVTX
        torch.cuda.nvtx.range_push("x")
    assert backends_after_labelling() == "nvtx,none"
    assert backends_after_labelling("--hide-nvtx") == "none"


def test_a_cpu_only_torch_is_not_imported_to_find_that_out():
    """Labelling code in a task that never imports torch costs no torch import (1-2 s of CPU)."""
    torch = pytest.importorskip("torch", reason="make test installs a CPU build of torch")
    if torch.version.cuda:
        pytest.skip("this torch is a CUDA build")
    code = ("import sys\nfrom flyteplugins.nsight import nvtx\nwith nvtx.range('x'):\n    pass\n"
            "print(nvtx._backends()[0].name, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["nvtx", "False"]
