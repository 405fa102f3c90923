"""The events of a capture as Polars frames: one export per capture, read column by column."""

from nsight_core.trace.load import load_trace
from nsight_core.trace.model import Trace, Window

__all__ = ["Trace", "Window", "load_trace"]
