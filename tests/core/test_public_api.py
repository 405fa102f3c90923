"""The public API is whole: every error nsight raises on purpose and every type its public functions return is
importable from ``nsight_core``, and the Flyte adapter imports nothing but public names (``nsight_core``,
``nsight_core.report``, the error module), so nsight-core's insides can change without breaking it."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import types
import typing
from pathlib import Path

import polars as pl

import nsight_core
import nsight_core.report
from nsight_core import NsightError

ADAPTER = Path(__file__).resolve().parents[2] / "packages" / "nsight-flyte" / "src" / "flyteplugins" / "nsight"
PUBLIC_MODULES = {"nsight_core", "nsight_core.report", "nsight_core.launch", "nsight_core.errors"}


def test_every_exported_name_resolves() -> None:
    assert all(getattr(nsight_core, name) is not None for name in nsight_core.__all__)


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    return found.union(*(_subclasses(sub) for sub in found)) if found else found


def test_every_error_is_exported() -> None:
    for module in pkgutil.walk_packages(nsight_core.__path__, "nsight_core."):
        importlib.import_module(module.name)
    errors = {cls for cls in _subclasses(NsightError) if cls.__module__.startswith("nsight_core")}
    assert len(errors) >= 9
    assert {cls.__name__ for cls in errors} <= set(nsight_core.__all__)
    assert all(getattr(nsight_core, cls.__name__) is cls for cls in errors)


def _classes(hint: object) -> set[type]:
    """The classes a return annotation names (unions and containers unwrapped)."""
    if isinstance(hint, type):
        return {hint}
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is not None:
        return set().union(*(_classes(arg) for arg in typing.get_args(hint)))
    return set()


def test_every_returned_type_is_exported() -> None:
    exported = [getattr(nsight_core, name) for name in nsight_core.__all__]
    functions = [*(value for value in exported if inspect.isfunction(value)),
                 nsight_core.Session.run, nsight_core.Session.current, nsight_core.Session.range,
                 nsight_core.report.build_profile, nsight_core.report.export_perfetto]
    returned = set().union(*(_classes(typing.get_type_hints(function)["return"]) for function in functions))
    ours = {cls for cls in returned if cls.__module__.startswith("nsight_core")}
    assert {"Analysis", "TraceDiff", "Trace", "ProfileStats", "Nsys", "RunResult", "Region", "CaptureProfile",
            "PerfettoExport"} <= {cls.__name__ for cls in ours}
    assert all(getattr(nsight_core, cls.__name__, None) is cls for cls in ours), ours
    assert all(cls.__module__ == "builtins" or cls is pl.DataFrame for cls in returned - ours), returned - ours


def test_the_adapter_imports_only_public_names() -> None:
    imported: dict[str, set[str]] = {}
    for source in ADAPTER.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nsight_core"):
                names = {alias.name for alias in node.names}
                imported.setdefault(node.module or "", set()).update(names)
    assert set(imported) <= PUBLIC_MODULES, imported
    assert imported["nsight_core.report"] >= {"build_profile", "GrowingFragment", "export_perfetto"}
    for module, names in imported.items():
        exported = importlib.import_module(module)
        assert all(hasattr(exported, name) for name in names)
        assert module == "nsight_core.errors" or names <= set(exported.__all__), (module, names)
