"""Run a function at the start of every thread the ``threading`` module starts from now on.

The mechanism is the documented one: ``threading.setprofile(fn)`` hands ``fn`` to
``sys.setprofile`` in each new thread before its ``run()`` is called. parinfo's profile function
runs once, at the thread's first event (the call of ``run``), before any of the thread's own code:
it puts the thread's profile function back to the one installed before parinfo's (none, usually),
runs the start function, and passes that first event on to the previous function. So a thread pays
one call at its start and nothing afterwards, and a profiler that had set a thread profile function
(yappi, a sampling tool) keeps getting its events. It reaches every ``threading.Thread`` (subclasses
included, so ``concurrent.futures`` and ``multiprocessing.pool.ThreadPool`` workers, joblib's
threading backend), not threads started with ``_thread.start_new_thread`` or by native code.

This file imports the standard library's os, sys and threading alone: the start-up hook of a launched
program loads it by path (``threads: every``), where parinfo may not be importable.

``StartHook.add`` returns a token; ``remove(token)`` takes that start function away again, and the
last removal gives ``threading`` back the profile function it had. A program that calls
``threading.setprofile`` itself afterwards replaces parinfo's: its own function wins, and
:meth:`StartHook.in_place` then says False.
"""
from __future__ import annotations

import os
import sys
import threading

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing into a launched program
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType
    from typing import Any

    StartFn = Callable[[], Any]
    ProfileFn = Callable[[FrameType, str, Any], Any]


class StartHook:
    """The process's start functions, run in that order at each new thread's start, and the
    ``threading`` profile function that runs them while there is at least one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fns: dict[int, StartFn] = {}
        self._next = 0
        self._previous: ProfileFn | None = None
        self._installed = False
        os.register_at_fork(after_in_child=self._fresh_lock)

    def _fresh_lock(self) -> None:
        self._lock = threading.Lock()  # a fork while another thread held it must not deadlock the child

    def add(self, fn: StartFn) -> int:
        """Run ``fn`` in every thread started from now on, until ``remove`` with the token returned."""
        with self._lock:
            self._next += 1
            self._fns[self._next] = fn
            if not self._installed:
                self._previous = _threading_profile()
                threading.setprofile(self._at_start)
                self._installed = True
            return self._next

    def remove(self, token: int) -> None:
        """Stop running the start function ``token`` names; with none left, give ``threading`` back
        its previous profile function (unless the program has put its own there since)."""
        with self._lock:
            self._fns.pop(token, None)
            if self._fns or not self._installed:
                return
            if self.in_place():
                threading.setprofile(self._previous)  # type: ignore[arg-type,unused-ignore]  # typesheds before 2024 refuse None
            self._installed = False
            self._previous = None

    def in_place(self) -> bool:
        """Whether new threads will run the start functions (the program has not replaced the hook)."""
        return self._installed and _threading_profile() == self._at_start

    def count(self) -> int:
        """How many start functions are in force."""
        with self._lock:
            return len(self._fns)

    def _at_start(self, frame: FrameType, event: str, arg: Any) -> Any:
        previous = self._previous
        sys.setprofile(previous)  # once per thread: from here on the thread runs as it would without parinfo
        for fn in list(self._fns.values()):
            try:
                fn()
            except Exception:  # a limit that cannot be set must not kill the program's thread
                pass
        return previous(frame, event, arg) if previous is not None else None


def _threading_profile() -> ProfileFn | None:
    getter = getattr(threading, "getprofile", None)  # Python 3.10+
    return getter() if getter is not None else getattr(threading, "_profile_hook", None)


#: The process's one start hook.
START_HOOK = StartHook()
