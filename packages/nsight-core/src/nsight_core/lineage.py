"""Which process this is: the one that imported nsight-core, or a forked copy of it.

A forked child (``os.fork``, ``multiprocessing``'s 'fork' method) inherits its parent's session, open
regions and signal handlers as copies, but nsys neither started it nor records it, and the collection
it would stop or signal is its parent's. Each process that imports nsight-core (a spawned worker
imports it anew) counts as its own; a process whose pid differs from the importer's is a forked copy.
Imported with the package (``nsight_core/__init__``), so a child forked after ``import nsight_core``
knows it is one.
"""

from __future__ import annotations

import os

IMPORTED_BY = os.getpid()


def forked_from() -> int | None:
    """The pid of the process this one is a forked copy of (the importer), or None when it is that process."""
    return IMPORTED_BY if os.getpid() != IMPORTED_BY else None
