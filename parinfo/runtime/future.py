"""The Future returned by ``fork``: light (no lock or condition per task) and claimable.

A task is PENDING until one thread claims it (``Future.claim``): a pool worker, or a thread
calling ``wait()`` / ``result()`` on it, which then runs it inline. That claim is what keeps
nested fork/wait with one inter-op thread free of deadlock. Only a thread that must block on a
task another thread runs allocates a lock, and only for that wait. Every state change is a method
of ``Future``: ``enqueue`` (counted as waiting for a worker), ``claim`` (PENDING -> RUNNING),
``run``, ``fail`` and ``_finish`` (-> DONE); how the pool schedules the task (timed by an adaptive
site, left to its waiter until ``due``) is fixed when the pool creates it, and read, never
written, from outside.
"""
from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Callable, Mapping
from threading import get_ident
from time import perf_counter_ns
from typing import Any, Protocol

from parinfo.runtime import tracing
from parinfo.runtime.native import NativeLimits
from parinfo.runtime.tracing import Recorders

PENDING, RUNNING, DONE = 0, 1, 2

_release = type(threading.Lock()).release


class TaskLedger:
    """The lock that guards every Future's state, and the count of tasks not yet claimed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.unclaimed = 0  # tasks forked to the pool and not yet claimed (guarded by lock)
        self.running = 0  # tasks claimed and not yet done (guarded by lock)

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()
        self.unclaimed = 0
        self.running = 0


class Runner(Protocol):
    """The pool a task belongs to (the inter-op pool): its ledger, the budget and recorders the
    task reports to, and how it runs a task a waiting thread claimed (accounting its slots)."""

    ledger: TaskLedger
    limits: NativeLimits
    recorders: Recorders

    def run_claimed(self, fut: Future) -> None: ...


def _call_back(fn: Callable[[Future], Any], fut: Future) -> None:
    try:
        fn(fut)
    except Exception:
        import traceback

        print("parinfo: exception in a Future done-callback (ignored):", file=sys.stderr)
        traceback.print_exc()


class Future:
    """The result of ``fork(fn, ...)``: ``wait(fut)`` or ``fut.result()`` gives fn's value."""

    __slots__ = (
        "__weakref__",
        "_args",
        "_batch",
        "_callbacks",
        "_claimer",
        "_ctx",
        "_exc",
        "_fn",
        "_kwargs",
        "_native",
        "_queued",
        "_ran_ns",
        "_result",
        "_runner",
        "_site",
        "_state",
        "_waiters",
        "due",
    )

    # set later, not here (one store less per fork each): _claimer (the thread id of the thread
    # that claimed it, set with RUNNING), _result (set when it returns), _ran_ns (set when timed)
    _claimer: int
    _result: Any
    _ran_ns: int
    _batch: bool  # set with _site: the site counts the task in its batch (it is choosing)

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, object], ctx: Any,
                 runner: Runner, native: bool = True, site: Any = None, batch: bool = False, due: int = 0) -> None:
        """A PENDING task. How the pool schedules it is fixed here, by the pool that forks it:
        ``native`` False when its adaptive site measured it short (it leaves native limits alone);
        ``site`` the adaptive site that times it (None: not timed), counting it in its batch
        with ``batch``; ``due`` for a task left to its waiter (inline mode), when a worker may
        take it instead (perf_counter_ns; 0: workers take it at once)."""
        self._fn: Any = fn  # fn, args, kwargs and ctx are dropped (None) once the task is done
        self._args: Any = args
        self._kwargs: Any = kwargs
        self._ctx: Any = ctx
        self._runner = runner
        self._state = PENDING
        self._queued = False  # counted in the ledger's ``unclaimed`` until claimed
        self._exc: BaseException | None = None
        self._waiters: dict[Any, None] | None = None  # locks of blocked waiters (a dict: no call to drop one)
        self._callbacks: list[Callable[[Future], Any]] | None = None
        self._native = native
        self._site: Any = site
        if site is not None:
            self._batch = batch
        self.due = due  # read by the pool; never changed after this

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

    def pending(self) -> bool:
        """True while no thread has claimed the task."""
        return self._state == PENDING

    def result(self, timeout: float | None = None) -> Any:
        """The task's value, re-raising its exception (with its traceback).

        With no timeout a task no thread has started runs here, inline. With a timeout the call
        only waits, and raises TimeoutError when the task is not done in time.
        """
        if self._state != DONE and (timeout is not None or self._state != PENDING
                                    or not self.run_if_unclaimed()):
            self._wait(timeout)
        if self._exc is not None:
            raise self._exc
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The exception the task raised, or None; waits like ``result``."""
        if self._state != DONE and (timeout is not None or self._state != PENDING
                                    or not self.run_if_unclaimed()):
            self._wait(timeout)
        return self._exc

    def add_done_callback(self, fn: Callable[[Future], Any]) -> None:
        """Call ``fn(future)`` when the task is done (at once if it already is)."""
        ledger = self._runner.ledger
        with ledger.lock:  # no call inside (see ``enqueue``)
            if self._state != DONE:
                if self._callbacks is None:
                    self._callbacks = [fn]
                else:
                    self._callbacks += (fn,)
                return
        _call_back(fn, self)

    # transitions ---------------------------------------------------------------------------
    def claim(self) -> bool:
        """PENDING -> RUNNING for the calling thread; False when another thread claimed it."""
        thread_id = get_ident()
        ledger = self._runner.ledger
        with ledger.lock:
            if self._state != PENDING:
                return False
            self._claimer = thread_id  # before the state: claimed_here reads it once RUNNING shows
            self._state = RUNNING
            ledger.running += 1
            if self._queued:
                ledger.unclaimed -= 1
            return True

    def run(self, restore: bool, queued: int = 0) -> None:
        """Run the claimed task on this thread and publish its outcome (``queued``: see
        ``NativeLimits.lane_enter``; ``restore`` for threads that are not parinfo's).

        Whatever happens, even a KeyboardInterrupt outside the task's own code, the task ends
        DONE and the budget gets its lane back; an interrupt before the task ran fails it.
        """
        runner = self._runner
        limits = runner.limits
        weights = limits.thread.weights
        depth = len(weights)
        ran = False
        try:
            limits.lane_enter(queued, 1, self._native)
            recorders = runner.recorders
            t0 = tracing.now() if recorders.active else 0
            start = perf_counter_ns() if self._site is not None else 0
            try:
                self._result = self._ctx.run(self._fn, *self._args, **self._kwargs)
            except BaseException as exc:  # delivered to wait() with its traceback
                self._exc = exc
            if start:
                self._ran_ns = perf_counter_ns() - start
            ran = True
            if t0:
                recorders.record(tracing.task_name(self._fn), "task", t0, tracing.now())
        except BaseException as exc:
            if not ran:
                self._exc = exc
            raise
        finally:
            # An interrupt is checked for on entry to every Python call, so each step is done
            # twice: the second completes the first when the interrupt cut it short.
            try:
                while len(weights) > depth:
                    limits.lane_exit(restore)
            finally:
                try:
                    while len(weights) > depth:
                        limits.lane_exit(restore)
                finally:
                    try:
                        self._finish()
                    finally:
                        if self._state != DONE:
                            self._finish()

    def enqueue(self, tasks: Any) -> None:
        """Put the task on ``tasks`` (the pool's queue) and count it as waiting for a worker,
        unless one claimed it already.

        No call runs while the ledger's lock is held, here or anywhere: a thread can lose the GIL
        only at a call, and one that loses it holding the lock stalls every forking and waiting
        thread, which then stay in step (a lock convoy: 20-45 us per task with 8 threads forking,
        7 us without)."""
        tasks.put(self)
        ledger = self._runner.ledger
        with ledger.lock:
            if self._state == PENDING:
                self._queued = True
                ledger.unclaimed += 1

    def run_if_unclaimed(self) -> bool:
        """Claim the task and run it here, through its runner (which accounts the pool's slots);
        False when another thread claimed it first. An interrupt anywhere from the claim on that
        keeps the task from finishing fails it."""
        thread_id = get_ident()
        runner = self._runner
        ledger = runner.ledger
        try:
            with ledger.lock:  # the claim (as ``claim``), here to spare a call on the waiter's path
                if self._state != PENDING:
                    return False
                self._claimer = thread_id  # before the state (see ``claim``)
                self._state = RUNNING
                ledger.running += 1
                if self._queued:
                    ledger.unclaimed -= 1
            runner.run_claimed(self)
            return True
        except BaseException as exc:
            self.abandon(exc)
            raise

    def claimed_here(self) -> bool:
        """True while the task runs on (was claimed by) the calling thread."""
        return self._state == RUNNING and self._claimer == get_ident()

    def abandon(self, exc: BaseException) -> None:
        """Fail a task this thread claimed but was interrupted before running (no-op otherwise)."""
        if self.claimed_here():
            self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        """Finish the task with ``exc`` without running it (e.g. it cannot run in this process)."""
        ledger = self._runner.ledger
        with ledger.lock:
            if self._state == DONE:
                return
            if self._state == PENDING:
                if self._queued:
                    ledger.unclaimed -= 1
                ledger.running += 1
                self._claimer = 0  # claimed by no thread
            self._state = RUNNING
        self._exc = exc
        self._finish()

    def _finish(self) -> None:
        """RUNNING -> DONE: drop the task, wake its waiters, run its callbacks."""
        self._fn = self._args = self._kwargs = self._ctx = None
        site, self._site = self._site, None
        if site is not None:
            ran_ns = getattr(self, "_ran_ns", 0)  # unset: the task never ran
            if self._batch:
                site.end(perf_counter_ns(), ran_ns)
            else:
                site.note(ran_ns)
        ledger = self._runner.ledger
        waiters = callbacks = None
        try:
            with ledger.lock:
                if self._state == RUNNING:
                    ledger.running -= 1
                self._state = DONE
                waiters, self._waiters = self._waiters, None
                callbacks, self._callbacks = self._callbacks, None
        finally:
            if waiters:
                # released in one C-level loop: a KeyboardInterrupt cannot land between two
                # releases and leave a waiter blocked forever
                collections.deque(map(_release, waiters), maxlen=0)
        if callbacks:
            for fn in callbacks:
                _call_back(fn, self)

    def _wait(self, timeout: float | None) -> None:
        """Block until another thread finishes the task (or ``timeout`` passes)."""
        lk = threading.Lock()
        lk.acquire()
        ledger = self._runner.ledger
        with ledger.lock:
            if self._state == DONE:
                return
            if self._waiters is None:
                self._waiters = {lk: None}
            else:
                self._waiters[lk] = None
        recorders = self._runner.recorders
        t0 = tracing.now() if recorders.active else 0
        ok = lk.acquire() if timeout is None else lk.acquire(timeout=max(0.0, timeout))
        if t0:
            recorders.record("wait", "wait", t0, tracing.now())
        if not ok:
            with ledger.lock:
                late = self._state != DONE
                if late and self._waiters and lk in self._waiters:
                    del self._waiters[lk]
            if late:
                raise TimeoutError(f"task not done after {timeout} s")
