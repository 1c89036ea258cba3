"""Each thread's place in parallel regions: whether it runs a chunk of one, and the chunk's number
(``in_parallel_region`` and ``get_thread_num`` read them).

Every region is entered through the thread's ``RegionGuard`` (ATen's ``ParallelRegionGuard``):
``guard.run(body, a, b)`` marks the thread inside a region at chunk 0, calls ``body(a, b)`` and puts
back what was there before, whether the body returns or raises, and however deeply regions nest.
Whoever runs several chunks in one ``run`` numbers them by setting ``guard.chunk``.

``CAPS.limit`` is the calling thread's own ceiling on the threads of the regions it starts (0: none),
set by :mod:`parinfo.runtime.thread_limits`; it lives outside any runtime so that a limit set before
the runtime is built, or after a fork rebuilt it, still holds in that thread.

The guard enters and leaves in one frame (try/finally) rather than as a ``with`` context manager:
CPython checks for a pending Ctrl-C on entry to every Python function, ``__exit__`` included, so
an interrupt landing there would leave the thread marked inside a region for good (every later
region of that thread run inline). A ``finally`` that only stores attributes cannot be cut short.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class RegionGuard:
    """One thread's region state, and the only code that enters and leaves a region."""

    __slots__ = ("active", "chunk")

    def __init__(self) -> None:
        self.active = False  # running a chunk of a region
        self.chunk = 0  # the running chunk's number (0 outside regions)

    def run(self, body: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
        """``body(a, b)`` inside a region at chunk 0; the state before is restored afterwards."""
        active, chunk = self.active, self.chunk
        self.active = True
        self.chunk = 0
        try:
            return body(a, b)
        finally:
            self.active = active
            self.chunk = chunk


class ThreadRegions(threading.local):
    """Each thread's ``RegionGuard`` (``.guard``), made the first time the thread asks."""

    guard: RegionGuard

    def __init__(self) -> None:
        self.guard = RegionGuard()


class ThreadCaps(threading.local):
    """Each thread's ceiling on the threads of the regions it starts (``limit``; 0: no ceiling)."""

    limit: int

    def __init__(self) -> None:
        self.limit = 0


CAPS = ThreadCaps()
