"""Run a function once on every worker of parinfo's pools: ``on_every_worker(key, fn)``.

What it is for: settings that hold per thread (an OpenMP runtime's thread limit, torch's count in
its OpenMP build) set from one thread reach only that thread. ``on_every_worker`` puts such a
setting into every live worker of both pools, and into every worker started later (pool growth,
the fresh pools of a forked child), which runs the stored functions before its first job.

How: every stored function has a key and a version. Each worker remembers the versions it ran. A
call stores the function, then queues one *sync token* per live worker on that worker's pool
queue. A worker that takes a token runs what it has not run yet, then waits at a barrier until
every live worker of its pool ran it (or the caller's timeout passed), so no worker takes two
tokens while another sleeps. A worker busy with a long task runs the function when it takes its
token, or after its task (each worker compares one version number after every job).
"""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypedDict


class _Seen(threading.local):
    """The versions this worker ran, by key, and the registry version it last caught up with."""

    def __init__(self) -> None:
        self.ran: dict[str, int] = {}
        self.version = -1


class WorkerSetup:
    """The stored functions (key -> (version, fn)) and the workers' progress through them."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.funcs: dict[str, tuple[int, Callable[[], Any]]] = {}
        self.version = 0  # bumped by every store; workers compare it after each job
        self._serial = itertools.count(1)
        self.seen = _Seen()
        self.errors: dict[tuple[str, int], dict[str, str]] = {}  # (key, version) -> worker -> error
        self.done: dict[tuple[str, int], set[str]] = {}  # (key, version) -> workers that ran it

    def store(self, key: str, fn: Callable[[], Any]) -> int:
        """Store ``fn`` under ``key`` (replacing an earlier one, which then runs last); its version."""
        with self.cond:
            v = next(self._serial)
            old = self.funcs.pop(key, None)
            if old is not None:
                self.done.pop((key, old[0]), None)
                self.errors.pop((key, old[0]), None)
            self.funcs[key] = (v, fn)
            self.done[(key, v)] = set()
            self.version += 1
            return v

    def catch_up(self) -> None:
        """Run, on the calling worker, every stored function it has not run in its version."""
        seen = self.seen
        if seen.version == self.version:
            return
        with self.cond:
            version = self.version
            todo = [(k, v, fn) for k, (v, fn) in self.funcs.items() if seen.ran.get(k) != v]
        name = threading.current_thread().name
        for k, v, fn in todo:
            seen.ran[k] = v
            try:
                fn()
            except Exception as exc:  # reported to the caller; the worker goes on
                with self.cond:
                    self.errors.setdefault((k, v), {})[name] = f"{type(exc).__name__}: {exc}"
            with self.cond:
                done = self.done.get((k, v))
                if done is not None:
                    done.add(name)
                self.cond.notify_all()
        seen.version = version

    def after_fork_in_child(self) -> None:
        """The child's workers are new: they run every stored function when they start."""
        self.cond = threading.Condition(threading.Lock())
        for k in self.done:
            self.done[k] = set()
        self.errors.clear()


class SyncToken:
    """One worker's share of an ``on_every_worker`` call, taken from a pool's job queue."""

    __slots__ = ("deadline", "key", "names", "setup", "version")

    def __init__(self, setup: WorkerSetup, key: str, version: int, names: frozenset[str],
                 deadline: float) -> None:
        self.setup, self.key, self.version, self.names, self.deadline = setup, key, version, names, deadline

    def run(self) -> None:
        """Catch up, then wait until every worker of this pool listed for the call ran it."""
        setup = self.setup
        setup.catch_up()
        with setup.cond:
            while True:
                done = setup.done.get((self.key, self.version))
                left = self.deadline - time.monotonic()
                if done is None or self.names <= done or left <= 0:
                    return
                setup.cond.wait(left)


class WorkerPool(Protocol):
    """What ``on_every_worker`` needs of a pool: its worker threads and a way to post a token."""

    workers: list[threading.Thread]

    def post(self, token: SyncToken) -> None: ...


class _Reach(TypedDict):
    ran: list[str]
    pending: list[str]


class Reach(_Reach, total=False):
    """Which workers ran a function ``on_every_worker`` gave them (``ran``), which were busy and run it
    before their next job (``pending``), and what it raised where it failed (``errors``: worker -> text)."""

    errors: dict[str, str]


def on_every_worker(setup: WorkerSetup, pools: Sequence[WorkerPool], key: str, fn: Callable[[], Any],
                    timeout: float = 5.0) -> Reach:
    """Run ``fn()`` once on every live worker of ``pools``, and first on every worker started later.

    ``key`` names the setting: a second call with the same key replaces the function (workers run
    the new one once). Waits up to ``timeout`` seconds for the live workers and returns
    ``{"ran": [names], "pending": [names]}``: pending workers were busy and run ``fn`` before their
    next job. Exceptions ``fn`` raises in a worker are listed under ``"errors"`` (worker -> text).
    Called from a pool worker, that worker runs ``fn`` at once.
    """
    if not isinstance(key, str) or not key:
        raise TypeError("on_every_worker() expects key to be a non-empty str")
    if not callable(fn):
        raise TypeError(f"on_every_worker() expects a callable, but got {type(fn).__name__}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"on_every_worker() expects timeout to be a number >= 0, but got {timeout!r}")
    version = setup.store(key, fn)
    deadline = time.monotonic() + timeout
    current = threading.current_thread()
    everyone: list[str] = []
    for pool in pools:
        live = [t for t in pool.workers if t.is_alive()]
        names = frozenset(t.name for t in live)
        everyone += sorted(names)
        if current in live:
            setup.catch_up()
        for _ in live:
            pool.post(SyncToken(setup, key, version, names, deadline))
    with setup.cond:
        while True:
            done = setup.done.get((key, version), set())
            left = deadline - time.monotonic()
            if set(everyone) <= done or left <= 0:
                break
            setup.cond.wait(left)
        errors = dict(setup.errors.get((key, version), {}))
    out: Reach = {"ran": [n for n in everyone if n in done], "pending": [n for n in everyone if n not in done]}
    if errors:
        out["errors"] = errors
    return out
