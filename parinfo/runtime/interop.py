"""The inter-op pool: one per process (``Runtime.inter``), started by the first ``fork``, sized once.

Its size is the inter-op count, capped at the pool ceiling; workers start as tasks in flight need
them, so a huge count costs only the threads the work needs at once.

Workers take tasks from one C-level queue (``queue.SimpleQueue``) and claim them; a task that a
waiter claimed first is skipped. Forks made after interpreter shutdown began, or with the
sequential backend, run inline. At exit queued tasks are finished and the workers joined before
finalisation.
"""
from __future__ import annotations

import collections
import enum
import itertools
import queue
import sys
import threading
import time
from collections.abc import Callable
from contextvars import copy_context
from time import perf_counter_ns
from typing import Any

from parinfo.process.setter import TORCH
from parinfo.runtime.adaptive import INLINE, SAMPLE_MASK, Adaptive
from parinfo.runtime.crew import STOP, Crew
from parinfo.runtime.follow import BudgetFollower
from parinfo.runtime.future import Future, TaskLedger
from parinfo.runtime.native import NativeLimits
from parinfo.runtime.settings import RuntimeSettings
from parinfo.runtime.torchfork import TorchForks
from parinfo.runtime.tracing import Recorders
from parinfo.runtime.workers import SyncToken, WorkerSetup

_WATCH = object()  # token: a worker starts watching the inline-mode tasks


class _Sink:
    """``put`` for ``Future.enqueue`` that appends to a deque (inline-mode tasks wake no worker)."""

    __slots__ = ("put",)

    def __init__(self, target: collections.deque[Any]) -> None:
        self.put = target.append


class PoolState(enum.Enum):
    IDLE = "not started"
    RUNNING = "running"
    SEQUENTIAL = "sequential backend: tasks run inline"
    CLOSING = "closing: tasks run inline"


_RUNNING = PoolState.RUNNING  # read on every fork and wait: a module name is cheaper than an enum member
_MODULES = sys.modules  # read on every fork: is torch imported?


class _SlotHolder(threading.local):
    """Whether this thread holds a run slot: ``held`` is not empty on workers (a mark for the
    slot each takes per task) and on a waiter running a task inline with the slot it took."""

    def __init__(self) -> None:
        self.held: list[int] = []  # the slot a waiter took, until it gives it back


class InteropPool:
    """Task queue, run slots and workers (its ``Crew``) of the inter-op pool; one per process."""

    def __init__(self, settings: RuntimeSettings, limits: NativeLimits, adaptive: Adaptive,
                 ledger: TaskLedger, recorders: Recorders, setup: WorkerSetup, torch_forks: TorchForks,
                 follow: BudgetFollower) -> None:
        self.settings = settings
        self.follow = follow
        self.torch_forks = torch_forks
        self.limits = limits
        self.adaptive = adaptive
        self.ledger = ledger
        self.recorders = recorders
        self.state = PoolState.IDLE
        self.tasks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # size slots: a task runs only while holding one, so at most size tasks run at once even
        # when waiters run tasks inline (a waiter that finds no free slot still runs its task).
        self.slots: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.size = 0
        self.crew = Crew("parinfo-interop", setup, limits)
        self.workers = self.crew.workers
        self.running: list[Future | None] = []  # the task each worker runs (for os.fork children)
        self._thread = _SlotHolder()
        self.deferred: collections.deque[Future] = collections.deque()  # inline-mode tasks
        self.deferred_sink = _Sink(self.deferred)
        self.watching = False  # a worker watches ``deferred`` (or a _WATCH token is queued)

    def started(self) -> bool:
        return self.state is not PoolState.IDLE

    def _start(self) -> None:
        with self.crew.lock:
            if self.state is not PoolState.IDLE:
                return
            n = self.settings.consume_inter()
            if self.settings.sequential():
                self.state = PoolState.SEQUENTIAL
                return
            n = min(n, self.settings.ceiling)
            for _ in range(n):
                self.slots.put(1)
            self.size = n
            self.running = [None] * n
            self.crew.at_exit(self.shutdown)
            self.state = PoolState.RUNNING

    def _grow(self) -> None:
        """Start workers up to the tasks in flight now, queued or running (never past ``size``):
        a huge count costs threads only for work that is there at once."""
        crew = self.crew
        with crew.lock:
            want = min(self.size, self.ledger.unclaimed + self.ledger.running)
            while len(crew.workers) < want and self.state is PoolState.RUNNING:
                i = len(crew.workers)
                crew.start(i, self._work, i)

    def fork(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` as an inter-op task; ``wait()`` the returned Future for its value.

        The task sees a copy of the caller's contextvars. With PARINFO_BACKEND=sequential, or once
        the interpreter is exiting, the task runs inline before fork returns. A TorchScript callable
        runs on torch's own inter-op pool instead, and the result is torch's future.
        """
        if not callable(fn):
            raise TypeError(f"fork() expects a callable, but got {type(fn).__name__}")
        follow = self.follow
        if perf_counter_ns() >= follow.due_ns:  # at most once a second: re-read the usable CPUs
            follow.check()
        if TORCH in _MODULES and self.torch_forks.accepts(fn) and not self.settings.sequential():
            torch_fut = self.torch_forks.fork(fn, args, kwargs)
            if torch_fut is not None:
                return torch_fut
        # what follows is the task's way onto the pool, here rather than in a method of its own:
        # it runs on every fork, and a call costs as much as the adaptive choice
        if self.state is not _RUNNING:
            if self.state is PoolState.IDLE:
                self._start()
            if self.state is not _RUNNING:
                fut = Future(fn, args, kwargs, copy_context(), self)
                fut.run_if_unclaimed()
                return fut
        adaptive = self.adaptive
        on = adaptive.on
        if on is None:
            on = adaptive.enabled
        site = None
        if on:
            site = adaptive.forks.get(getattr(fn, "__code__", None)) or adaptive.fork_site(fn)
        if site is not None:
            if site.left > 0:  # exploiting its choice: no batch accounting, a sample timed
                if not self.ledger.unclaimed:  # nothing waits to be claimed: a batch starts
                    site.left -= 1
                site.forks += 1
                timer = None if site.forks & SAMPLE_MASK else site
                batch = False
                # inline: due after twice the task time for each inline task ahead of it, + 1 ms
                due = (perf_counter_ns() + site.grace_ns * (len(self.deferred) + 1) + 1_000_000
                       if site.pick == INLINE else 0)
            else:  # choosing: every task of the batch is timed
                timer = site
                batch = True
                due = site.begin(perf_counter_ns())
            fut = Future(fn, args, kwargs, copy_context(), self, site.long, timer, batch, due)
            if due:  # inline mode: left to its waiter; a worker takes it only when late
                fut.enqueue(self.deferred_sink)
                if not self.watching:
                    self.watching = True
                    self.tasks.put(_WATCH)
                if not self.workers:
                    self._grow()
                return fut
        else:
            fut = Future(fn, args, kwargs, copy_context(), self)
        fut.enqueue(self.tasks)
        ledger = self.ledger
        if len(self.workers) < self.size and ledger.unclaimed + ledger.running > len(self.workers):
            self._grow()
        return fut

    def _work(self, index: int) -> None:
        slot_get, slot_put = self.slots.get, self.slots.put
        running = self.running
        others = self.size - 1
        ledger = self.ledger
        self._thread.held.append(0)  # nested waits inside tasks run inline without a slot

        def take(fut: Any) -> bool:
            """Run a task unless a waiter claimed it first (False: nothing ran)."""
            if fut is _WATCH:
                fut = self._watch()
                if fut is None:
                    return False
            elif not fut.pending():  # a waiter ran it already
                return False
            slot_get()
            if fut.claim():
                running[index] = fut
                fut.run(False, 0 if fut.due else min(ledger.unclaimed, others))
                running[index] = None
            slot_put(1)
            return True

        self.crew.serve(self.tasks, take)

    def _watch(self) -> Future | None:
        """Watch the tasks left to their waiters (inline mode) on this worker: the first that is
        still unclaimed at its due time is returned to be run here; None once none is left.
        One worker watches at a time, so forking such tasks wakes no thread."""
        deferred = self.deferred
        while True:
            while deferred:
                fut = deferred[0]
                if not fut.pending():
                    deferred.popleft()
                    continue
                left = fut.due - perf_counter_ns()
                if left <= 0:
                    deferred.popleft()
                    self.tasks.put(_WATCH)  # the watch goes on (here or on another worker) meanwhile
                    return fut
                # until the oldest task is due (at most 20 ms: a later task may be due sooner),
                # not in 2 ms steps: each wake takes a CPU from the waiter's native threads
                time.sleep(min(left, 20_000_000) / 1e9)
            self.watching = False
            if not deferred:  # a task deferred after the check saw watching still set: go on
                return None
            self.watching = True

    def post(self, token: SyncToken) -> None:
        """Queue an ``on_every_worker`` token for one worker."""
        if self.state is PoolState.RUNNING:
            self.tasks.put(token)

    def run_claimed(self, fut: Future) -> None:
        """Run a task a waiter claimed, holding a slot when one is free."""
        held = self._thread.held
        # a worker, a waiter inside a task, or an inline-mode task: a call of its waiter, as if
        # it had not been forked (no slot: its site chose not to use the pool)
        if held or fut.due or self.state is not _RUNNING:
            fut.run(True)
            return
        try:
            # take a slot and record it in one C call (no KeyboardInterrupt can land between)
            held.extend(itertools.islice(iter(self.slots.get_nowait, None), 1))
        except queue.Empty:
            fut.run(True)
            return
        try:
            fut.run(True, min(self.ledger.unclaimed, self.size - 1))
        finally:
            if held:
                self.slots.put(held.pop())

    def alive_threads(self) -> int:
        return self.crew.alive_threads()

    def shutdown(self) -> None:
        """Finish queued tasks and join the workers (registered with atexit when the pool starts)."""
        if self.state is not PoolState.RUNNING:
            return
        self.state = PoolState.CLOSING
        for _ in self.workers:
            self._stop_one()
        self.crew.join(self._stop_one)

    def _stop_one(self) -> None:
        self.tasks.put(STOP)
        self.slots.put(1)  # a slot lost to an interrupt must not keep a worker from its stop

    def after_fork_in_child(self) -> None:
        """Fresh, unstarted pool in the child; tasks the parent's workers were running fail."""
        # the forking thread's own task (when it is a worker) goes on here; the others cannot
        orphans = [f for f in self.running if f is not None and not f.claimed_here()]
        self.crew.after_fork_in_child()
        self.state = PoolState.IDLE
        self.tasks = queue.SimpleQueue()
        self.slots = queue.SimpleQueue()
        self.size = 0
        self.running = []
        self._thread.held = []
        # tasks left to their waiters can still be waited on here (they then run), like queued ones
        self.deferred = collections.deque()
        self.deferred_sink = _Sink(self.deferred)
        self.watching = False
        for fut in orphans:
            fut.fail(RuntimeError("the task was running in the parent process when os.fork() "
                                  "was called; it cannot finish in the child"))
