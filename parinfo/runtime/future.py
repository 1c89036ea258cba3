"""The Future returned by ``fork``: light (no lock or condition per task) and claimable.

A task is PENDING until one thread claims it: a pool worker, or a thread calling ``wait()`` /
``result()`` on it, which then runs it inline. That claim is what keeps nested fork/wait with one
inter-op thread free of deadlock. Only a thread that must block on a task another thread runs
allocates a lock, and only for that wait.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable

from parinfo.runtime import native, tracing

PENDING, RUNNING, DONE = 0, 1, 2

_mu = threading.Lock()  # guards every Future's state, waiters and callbacks
pending = 0  # tasks forked to the pool and not yet claimed (guarded by _mu)


class Future:
    """The result of ``fork(fn, ...)``: ``wait(fut)`` or ``fut.result()`` gives fn's value."""

    __slots__ = ("_fn", "_args", "_kwargs", "_ctx", "_state", "_result", "_exc", "_waiters",
                 "_callbacks", "__weakref__")

    def __init__(self, fn: Callable[..., Any], args: tuple, kwargs: dict, ctx: Any) -> None:
        self._fn = fn
        self._args = args
        self._kwargs = kwargs
        self._ctx = ctx
        self._state = PENDING
        self._result: Any = None
        self._exc: BaseException | None = None
        self._waiters: list[Any] | None = None
        self._callbacks: list[Callable[[Future], Any]] | None = None

    def __repr__(self) -> str:
        state = ("pending", "running", "done")[self._state]
        if self._state == DONE and self._exc is not None:
            state = f"raised {type(self._exc).__name__}"
        return f"<parinfo.Future {state}>"

    def done(self) -> bool:
        """True once the task finished (returned or raised)."""
        return self._state == DONE

    def running(self) -> bool:
        return self._state == RUNNING

    def result(self, timeout: float | None = None) -> Any:
        """The task's value, re-raising its exception (with its traceback).

        With no timeout a task no thread has started runs here, inline. With a timeout the call
        only waits, and raises TimeoutError when the task is not done in time.
        """
        if self._state != DONE:
            self._wait(timeout)
        if self._exc is not None:
            raise self._exc
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The exception the task raised, or None; waits like ``result``."""
        if self._state != DONE:
            self._wait(timeout)
        return self._exc

    def add_done_callback(self, fn: Callable[["Future"], Any]) -> None:
        """Call ``fn(future)`` when the task is done (at once if it already is)."""
        with _mu:
            if self._state != DONE:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        _call_back(fn, self)

    def _wait(self, timeout: float | None) -> None:
        if timeout is None and _claim(self):
            run_inline(self)
            return
        with _mu:
            if self._state == DONE:
                return
            lk = threading.Lock()
            lk.acquire()
            if self._waiters is None:
                self._waiters = []
            self._waiters.append(lk)
        t0 = tracing.now() if tracing.active else 0
        ok = lk.acquire() if timeout is None else lk.acquire(timeout=max(0.0, timeout))
        if t0:
            tracing.record("wait", "wait", t0, tracing.now())
        if not ok:
            with _mu:
                if self._state != DONE:
                    if self._waiters and lk in self._waiters:
                        self._waiters.remove(lk)
                    raise TimeoutError(f"task not done after {timeout} s")


def _claim(fut: Future) -> bool:
    global pending
    with _mu:
        if fut._state != PENDING:
            return False
        fut._state = RUNNING
        pending -= 1
        return True


def queued(fut: Future) -> None:
    """Count a task handed to the pool (the budget looks ahead at tasks about to start)."""
    global pending
    with _mu:
        pending += 1


def _call_back(fn: Callable[[Future], Any], fut: Future) -> None:
    try:
        fn(fut)
    except Exception:
        import traceback

        print("parinfo: exception in a Future done-callback (ignored):", file=sys.stderr)
        traceback.print_exc()


def run(fut: Future, restore: bool, queued: int = 0) -> None:
    """Run a claimed task on this thread and publish its outcome (``queued``: see lane_enter)."""
    native.lane_enter(queued)
    t0 = tracing.now() if tracing.active else 0
    try:
        fut._result = fut._ctx.run(fut._fn, *fut._args, **fut._kwargs)
    except BaseException as exc:  # noqa: BLE001 - delivered to wait() with its traceback
        fut._exc = exc
    if t0:
        tracing.record(tracing.task_name(fut._fn), "task", t0, tracing.now())
    native.lane_exit(restore)
    finish(fut)


def finish(fut: Future) -> None:
    """Mark the task done, wake its waiters, run its callbacks."""
    fut._fn = fut._args = fut._kwargs = fut._ctx = None
    with _mu:
        fut._state = DONE
        waiters, fut._waiters = fut._waiters, None
        callbacks, fut._callbacks = fut._callbacks, None
    if waiters:
        for lk in waiters:
            lk.release()
    if callbacks:
        for fn in callbacks:
            _call_back(fn, fut)


def _run_here(fut: Future) -> None:
    run(fut, True)


# How a waiter runs a task it claimed; the inter-op pool replaces it to account for its slots.
run_inline: Callable[[Future], None] = _run_here


def fail_orphan(fut: Future, why: str) -> None:
    """Finish a task that can never run here (it was running in the parent of an os.fork)."""
    fut._exc = RuntimeError(why)
    finish(fut)


def after_fork_in_child() -> None:
    global _mu, pending
    _mu = threading.Lock()
    pending = 0
