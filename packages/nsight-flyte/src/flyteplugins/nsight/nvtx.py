"""NVTX labels: named spans and instants on the Nsight timeline and in the report's NVTX breakdown.

``nvtx.range`` / ``nvtx.mark`` only label code; they never start a recording (that is
``nsys.range``). The backend is chosen once, on first use:

1. ``torch.cuda.nvtx`` when torch is a CUDA build, so labels line up with the kernels torch launches;
2. NVIDIA's ``nvtx`` package when it is installed, so CPU-side phases show on the timeline too;
3. nothing: annotated code runs unchanged on a laptop or in a CPU-only test.

A CPU-only torch imports ``torch.cuda.nvtx`` fine but raises when it is called; that first failure
demotes the backend to the next one instead of failing the user's code.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("flyteplugins.nsight")


@dataclass(frozen=True)
class _Backend:
    name: str
    push: Callable[[str], object]
    pop: Callable[[], object]
    mark: Callable[[str], object]


_NOOP = _Backend("none", lambda _message: None, lambda: None, lambda _message: None)


def _torch_backend() -> _Backend | None:
    """torch.cuda.nvtx, only for a CUDA build of torch (a CPU build cannot emit NVTX)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or _cpu_only_torch(spec):
        return None
    torch = importlib.import_module("torch")
    if not getattr(torch.version, "cuda", None):
        return None
    cuda_nvtx = importlib.import_module("torch.cuda.nvtx")
    return _Backend("torch.cuda.nvtx", cuda_nvtx.range_push, cuda_nvtx.range_pop, cuda_nvtx.mark)


def _cpu_only_torch(spec: importlib.machinery.ModuleSpec) -> bool:
    """Whether the torch SPEC finds says it is a CPU-only build, read from its ``torch/version.py``.

    Why not ``import torch``: a task that labels code without using torch (its image has torch
    anyway) would pay 1-2 s of CPU for the import only to learn that no NVTX comes of it. The file
    holds ``cuda = None`` (or ``cuda: Optional[str] = None``) in a CPU build; anything unexpected
    counts as "maybe CUDA", and torch is imported to ask it.
    """
    if "torch" in sys.modules or not spec.submodule_search_locations:
        return False
    try:
        tree = ast.parse((Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text())
    except (OSError, SyntaxError, ValueError, StopIteration):
        return False
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "cuda":
            return isinstance(value, ast.Constant) and value.value is None
    return False


def _nvtx_backend() -> _Backend | None:
    """NVIDIA's `nvtx` package: works without torch and without a GPU."""
    if importlib.util.find_spec("nvtx") is None:
        return None
    package = importlib.import_module("nvtx")
    return _Backend("nvtx", lambda message: package.push_range(message), package.pop_range,
                    lambda message: package.mark(message))


_CANDIDATES: tuple[Callable[[], _Backend | None], ...] = (_torch_backend, _nvtx_backend)
_lock = threading.Lock()
_chain: list[_Backend] | None = None


def _backends() -> list[_Backend]:
    """The usable backends, best first, ending with the no-op (found once per process)."""
    global _chain
    with _lock:
        if _chain is None:
            found: list[_Backend] = []
            for candidate in _CANDIDATES:
                try:
                    backend = candidate()
                except Exception as exc:  # a broken install must cost the labels, never the task
                    log.debug("nvtx backend %s is unusable: %s", candidate.__name__, exc)
                    continue
                if backend is not None:
                    found.append(backend)
            _chain = [*found, _NOOP]
        return _chain


def _run(operation: Callable[[_Backend], object]) -> _Backend:
    """Run OPERATION on the best backend and return the one that did it.

    A backend that raises is dropped for the rest of the process (a CPU-only torch raises on every
    call), and the next one takes over; the no-op at the end never raises.
    """
    chain = _backends()
    while True:
        backend = chain[0]
        try:
            operation(backend)
            return backend
        except Exception as exc:
            log.debug("nvtx backend %s failed (%s); falling back", backend.name, exc)
            with _lock:
                if chain[0] is backend:
                    chain.pop(0)


@contextmanager
def range(message: str) -> Iterator[None]:
    """Label the block as a span named MESSAGE (push on enter, pop on exit, also when it raises)."""
    backend = _run(lambda candidate: candidate.push(message))
    try:
        yield
    finally:
        try:
            backend.pop()
        except Exception as exc:
            log.debug("nvtx backend %s could not pop range %r: %s", backend.name, message, exc)


def mark(message: str) -> None:
    """Record one instant named MESSAGE on the timeline."""
    _run(lambda candidate: candidate.mark(message))
