"""Which process this is: the one that imported nsight-core, or a forked copy of it. A forked child inherits its
parent's session, regions and signal handlers, but nsys does not record it and the collection is its parent's. A pid
unlike the importer's is a forked copy (a spawned worker imports nsight-core anew)."""

from __future__ import annotations

import os

IMPORTED_BY = os.getpid()


def forked_from() -> int | None:
    """The pid of the process this one is a forked copy of (the importer), or None when it is that process."""
    return IMPORTED_BY if os.getpid() != IMPORTED_BY else None
