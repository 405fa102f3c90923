"""The events of a capture as Polars frames: one export per capture, read column by column.

The names load Polars on first use, not at import: ``nsight_core.trace.export`` (stdlib only) must start
an export before the CLI imports Polars (see ``export_ahead``)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nsight_core.trace.load import load_trace
    from nsight_core.trace.model import Trace, Window

_LAZY = {"load_trace": "nsight_core.trace.load", "Trace": "nsight_core.trace.model",
         "Window": "nsight_core.trace.model"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nsight_core.trace' has no attribute {name!r}")


__all__ = ["Trace", "Window", "load_trace"]
