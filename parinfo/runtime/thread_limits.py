"""Limits that hold in the threads that call: ``parinfo.thread_limits`` and ``worker_initializer``.

A limit in OpenMP (libgomp, libiomp, libomp), in torch's intra-op count and in numba holds for the
thread that set it; MKL has a call for the calling thread alone (``mkl_set_num_threads_local``);
OpenBLAS built with pthreads, BLIS, numexpr and Arrow keep one count for the process (OpenBLAS's
``openblas_set_num_threads_local`` changes the shared pool's count there: measured with 0.3.30).
So a limit set in the main thread does not reach the threads a ``ThreadPoolExecutor`` starts. This
module sets a limit where the calling happens:

* :class:`thread_limits` (a context manager and a decorator) in the thread that enters it, and
  with ``new_threads=True`` also at the start of every thread started inside it
  (:mod:`parinfo.runtime.thread_start`: joblib's threading backend, plain ``threading.Thread``);
* :func:`worker_initializer` in each worker of a pool, before its first task;
* :func:`limit_new_threads` in every thread started from now on, until undone (a profile's
  ``threads: every``).

Every count goes through :mod:`parinfo.process.setter` (``set_counts(..., here=True)``: each pool's
thread-local call where it has one, else the process-wide one). parinfo's runtime gets the thread's
own ceiling on the regions it starts (:data:`parinfo.runtime.region.CAPS`). What each thread got is
kept as a :class:`ThreadLimited` (:func:`limited_threads`), one Outcome per count with its scope.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from parinfo.process import setter
from parinfo.process.libraries import records
from parinfo.process.setter import NativePool, Outcome
from parinfo.records.record import record
from parinfo.runtime.region import CAPS
from parinfo.runtime.settings import check_count
from parinfo.runtime.thread_start import START_HOOK

#: The key (beside the registry's profile keys) and target of parinfo's own per-thread ceiling.
PARINFO, REGIONS = "parinfo", "regions"


@record(frozen=True)
class ThreadLimited:
    """What one thread got: its name and native id, how (``thread_limits``, ``worker``, ``new
    thread``), each count set (``limits``: library, target, asked, now, before, scope "thread" or
    "process", error) and the loaded pools whose count exists only for the whole process
    (``process_only``, by name: OpenBLAS-pthreads is one shared pool that no thread can have alone)."""

    thread: str
    native_id: int
    how: str
    limits: tuple[Outcome, ...]
    process_only: tuple[str, ...] = ()

    def count(self, library: str) -> int | None:
        """The count read back for ``library`` (the first of its targets), None when not set."""
        return next((o.now for o in self.limits if o.library == library), None)


def counts_for(n: int, user_api: str | None = None) -> dict[str, int]:
    """``n`` for every library ``user_api`` names, by profile key (plus ``parinfo``): None for all;
    ``blas`` or ``openmp`` (threadpoolctl's words: every record of that user API); ``torch``,
    ``parinfo`` or another profile key (mkl, numexpr, numba...) for that library alone."""
    keys = [r.profile_key for r in records() if r.profile_key]
    if user_api is None:
        return dict.fromkeys([*keys, PARINFO], n)
    chosen = [r.profile_key for r in records() if r.profile_key and r.user_api == user_api]
    if not chosen and (user_api in keys or user_api == PARINFO):
        chosen = [user_api]
    if not chosen:
        apis = sorted({str(r.user_api) for r in records() if r.user_api and r.profile_key} | set(keys) | {PARINFO})
        raise ValueError(f"user_api must be None or one of {', '.join(apis)}, but got {user_api!r}")
    return dict.fromkeys(chosen, n)


class _Pools:
    """The loaded native pools, read again only when modules were imported since (a fresh read
    costs 0.5-10 ms; a thread's start must not pay it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: list[NativePool] | None = None
        self._modules = -1

    def get(self) -> list[NativePool]:
        pools = self._pools
        if pools is not None and len(sys.modules) == self._modules:
            return pools
        with self._lock:
            if self._pools is None or len(sys.modules) != self._modules:
                self._modules = len(sys.modules)
                self._pools = setter.native_pools()
            return self._pools


class _Holds:
    """Process-wide counts that limits still in force have set: the first one's count before is
    given back when the last of them ends, so limits that overlap in several threads (a decorated
    function run by many at once) do not give back each other's counts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], tuple[Outcome, int]] = {}

    def take(self, limit: Callable[[], ThreadLimited]) -> ThreadLimited:
        """Run ``limit`` (which sets counts and reads what they were) and hold its process-wide
        counts, under one lock: a thread entering at the same time reads only after, so the count
        kept to give back is the one before any of them."""
        with self._lock:
            done = limit()
            for o in done.limits:
                if not o.per_thread:
                    first, n = self._held.get((o.library, o.target), (o, 0))
                    self._held[(o.library, o.target)] = (first, n + 1)
            return done

    def release(self, outcomes: Iterable[Outcome], pools: list[NativePool]) -> None:
        back = []
        with self._lock:
            for o in outcomes:
                key = (o.library, o.target)
                if o.per_thread or key not in self._held:
                    continue
                first, n = self._held.pop(key)
                if n > 1:
                    self._held[key] = (first, n - 1)
                else:
                    back.append(first)
            setter.restore(back, pools)


class _Log:
    """The last :class:`ThreadLimited` of each thread, by native id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[int, ThreadLimited] = {}

    def note(self, done: ThreadLimited) -> None:
        with self._lock:
            self._by_id[done.native_id] = done

    def live(self) -> list[ThreadLimited]:
        alive = {t.native_id for t in threading.enumerate()}
        with self._lock:
            for gone in [i for i in self._by_id if i not in alive]:
                del self._by_id[gone]
            return list(self._by_id.values())


POOLS, HOLDS, LOG = _Pools(), _Holds(), _Log()


def limit_here(counts: Mapping[str, int], how: str, *, process_wide: bool = True) -> ThreadLimited:
    """Set ``counts`` (by profile key, and ``parinfo``) in the calling thread: each pool's
    thread-local call where it has one, and (with ``process_wide``) the process-wide count of the
    pools that have no other. Returns, and keeps, what was done."""
    pools = POOLS.get()
    outcomes = setter.set_counts(counts, per_thread_only=not process_wide, pools=pools, here=True)
    cap = counts.get(PARINFO)
    if cap is not None:
        before = CAPS.limit
        CAPS.limit = cap
        outcomes.append(Outcome(PARINFO, REGIONS, cap, CAPS.limit, before or None, setter.THREAD_SCOPE))
    current = threading.current_thread()
    done = ThreadLimited(current.name, threading.get_native_id(), how, tuple(outcomes),
                         tuple(p.name for p in pools if not p.holds_per_thread))
    LOG.note(done)
    return done


def undo_here(done: ThreadLimited) -> None:
    """Give back, in the calling thread, the per-thread counts ``done`` set there."""
    for o in done.limits:
        if o.library == PARINFO and o.target == REGIONS:
            CAPS.limit = o.before or 0
    setter.restore([o for o in done.limits if o.per_thread and o.library != PARINFO], POOLS.get())


def limited_threads() -> list[ThreadLimited]:
    """What each live thread got from this module, the last time it was given a limit."""
    return LOG.live()


class thread_limits(contextlib.ContextDecorator):  # named like threadpoolctl's threadpool_limits
    """Limit every loaded pool to ``n`` threads in the thread that enters (``with``) or calls the
    decorated function, and give the counts back on exit.

    Per-thread pools (OpenMP runtimes, torch's intra-op count, numba, MKL's local call, parinfo's
    regions) are limited for that thread alone; pools that have only a process-wide count (OpenBLAS
    with pthreads, BLIS, numexpr) are set for the process while any ``thread_limits`` holds them,
    and the count before the first is given back when the last ends. ``user_api`` limits one kind
    (:func:`counts_for`). With ``new_threads`` every thread started inside the block (a joblib
    threading backend's workers, a plain ``threading.Thread``) sets the same per-thread limits at
    its start. Unlike threadpool_limits, making the object changes nothing: entering does.
    ``__enter__`` returns the :class:`ThreadLimited` record.
    """

    def __init__(self, n: int, *, user_api: str | None = None, new_threads: bool = False) -> None:
        self.counts = counts_for(check_count(n, "thread_limits"), user_api)
        self.new_threads = new_threads
        self._entered = threading.local()  # each thread's stack: a decorated function may run in many

    def __enter__(self) -> ThreadLimited:
        done = HOLDS.take(lambda: limit_here(self.counts, "thread_limits"))
        token = START_HOOK.add(_StartLimits(self.counts)) if self.new_threads else None
        self._entered.__dict__.setdefault("stack", []).append((done, token))
        return done

    def __exit__(self, *exc: object) -> None:
        done, token = self._entered.stack.pop()
        if token is not None:
            START_HOOK.remove(token)
        undo_here(done)
        HOLDS.release(done.limits, POOLS.get())


class _StartLimits:
    """The start function :class:`thread_limits` and :func:`limit_new_threads` give new threads:
    the per-thread limits only (the process-wide counts are the installer's to set and give back)."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = dict(counts)

    def __call__(self) -> None:
        limit_here(self.counts, "new thread", process_wide=False)


class WorkerLimits:
    """A pool initializer (``ThreadPoolExecutor(initializer=...)``, ``ThreadPool(initializer=...)``)
    that limits each worker, in its own thread, before its first task, then calls ``then`` (the
    pool's own initializer, with the pool's ``initargs``). The limits stay for the worker's life;
    process-wide counts (OpenBLAS-pthreads) are set for the whole process and stay too."""

    def __init__(self, n: int, *, user_api: str | None = None, then: Callable[..., Any] | None = None) -> None:
        self.counts = counts_for(check_count(n, "worker_initializer"), user_api)
        self.then = then

    def __call__(self, *initargs: Any) -> None:
        limit_here(self.counts, "worker")
        if self.then is not None:
            self.then(*initargs)


def worker_initializer(n: int, *, user_api: str | None = None,
                       then: Callable[..., Any] | None = None) -> WorkerLimits:
    """An initializer that limits every worker of a thread pool to ``n`` threads per library, in
    the worker's own thread: ``ThreadPoolExecutor(4, initializer=parinfo.worker_initializer(1))``."""
    return WorkerLimits(n, user_api=user_api, then=then)


class NewThreadLimits:
    """Per-thread limits put into every thread started from now on (:func:`limit_new_threads`);
    ``undo()`` (or leaving ``with``) stops that and gives back the process-wide counts it set, and
    the calling thread's own when undone there. Threads already started keep what they got."""

    def __init__(self, counts: Mapping[str, int], *, caller: bool = True) -> None:
        self.counts = dict(counts)
        self.here = HOLDS.take(lambda: limit_here(self.counts, "limit_new_threads")) if caller else None
        self._token: int | None = START_HOOK.add(_StartLimits(self.counts))

    @property
    def active(self) -> bool:
        """Whether new threads still get the limits (not undone, and the hook not replaced)."""
        return self._token is not None and START_HOOK.in_place()

    def undo(self) -> None:
        if self._token is None:
            return
        START_HOOK.remove(self._token)
        self._token = None
        if self.here is None:
            return
        if threading.get_native_id() == self.here.native_id:
            undo_here(self.here)
        HOLDS.release(self.here.limits, POOLS.get())

    def __enter__(self) -> NewThreadLimits:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()


def limit_new_threads(n: int | Mapping[str, int], *, user_api: str | None = None) -> NewThreadLimits:
    """Limit the calling thread and every thread the ``threading`` module starts from now on to
    ``n`` (or per profile key, a mapping) until ``undo()``: the process-wide option (a profile's
    ``threads: every``). One call at each thread's start, nothing after (parinfo.runtime.thread_start)."""
    counts = counts_for(check_count(n, "limit_new_threads"), user_api) if not isinstance(n, Mapping) else n
    return NewThreadLimits(counts)


_BY_PROFILE: list[NewThreadLimits] = []  # the one a profile's ``threads: every`` keeps in force


def profile_new_threads(counts: Mapping[str, int] | None) -> NewThreadLimits | None:
    """Put ``counts`` (by profile key) into every thread started from now on for a profile's
    ``threads: every``, in place of what the last profile put there (None: nothing any more). The
    caller (``parinfo.apply``) has set its own thread and the process-wide counts already."""
    while _BY_PROFILE:
        _BY_PROFILE.pop().undo()
    if not counts:
        return None
    hook = NewThreadLimits(counts, caller=False)
    _BY_PROFILE.append(hook)
    return hook
