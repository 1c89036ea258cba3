"""The intra-op pool and ``parallel_for`` / ``parallel_reduce``.

One pool per process, shared by every caller (application threads and inter-op tasks). A region
splits ``[begin, end)`` into at most ``get_num_threads()`` chunks of at least ``grain_size``;
the calling thread takes part, and chunks no worker has claimed yet are run by the caller, so a
region finishes even when every worker is busy with other callers' regions. The pool holds at most
``get_num_threads() - 1`` threads (and never more than the pool ceiling), created as regions need
them, whatever the number of calling threads. Inside a region, a nested ``parallel_for`` runs inline.
"""
from __future__ import annotations

import contextvars
import itertools
import operator
import queue
import threading
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from parinfo.runtime import tracing
from parinfo.runtime.adaptive import Adaptive
from parinfo.runtime.crew import STOP, Crew
from parinfo.runtime.follow import BudgetFollower
from parinfo.runtime.native import NativeLimits
from parinfo.runtime.region import CAPS, ThreadRegions
from parinfo.runtime.settings import RuntimeSettings
from parinfo.runtime.tracing import Recorders
from parinfo.runtime.workers import SyncToken, WorkerSetup


class _Job:
    """One parallel region: chunks claimed by the caller and by pool workers.

    The caller holds the region's lanes of the budget for all its chunks, so the lanes (and any
    native cap) end exactly when the region returns; workers only bring their per-thread pools to
    the cap (``native``: the call site runs long enough for native limits to matter).
    """

    __slots__ = (
        "also_raised",
        "begin",
        "by_thread",
        "claim",
        "ctx",
        "done",
        "end",
        "error",
        "finished",
        "first",
        "fn",
        "joined",
        "lock",
        "n",
        "native",
        "pool",
        "posted",
        "results",
        "step",
    )

    def __init__(self, pool: IntraopPool, fn: Callable[..., Any], begin: int, end: int, n: int, ctx: Any,
                 reduce: bool, native: bool, lead: int = 0) -> None:
        self.pool = pool
        self.fn = fn
        self.begin = begin
        self.end = end
        if lead > 0 and (end - begin - lead) // n > 0:
            # the first chunk (the caller's) is ``lead`` longer: workers start that much later
            self.step = (end - begin - lead) // n
            self.first = end - (n - 1) * self.step
        else:
            self.step = -(-(end - begin) // n)
            n = -(-(end - begin) // self.step)  # no empty trailing chunk
            self.first = begin + self.step
        self.n = n
        self.posted = 0  # perf_counter_ns when the job was posted to the workers
        self.claim = itertools.count().__next__
        self.finished = itertools.count(1).__next__  # atomic under the GIL: no lock per chunk
        self.lock = threading.Lock()
        self.done = threading.Lock()
        self.done.acquire()
        self.error: BaseException | None = None
        self.also_raised: list[tuple[int, int, BaseException]] = []  # chunks failing after the first
        self.results: list[Any] | None = [None] * n if reduce else None
        self.ctx = ctx
        self.native = native
        self.by_thread = False  # more chunks than threads: get_thread_num() numbers the threads
        self.joined = itertools.count(1).__next__  # thread numbers of the workers that help

    def help(self) -> bool:
        """A pool worker's share: claim and run chunks until none is left (True: it ran, see
        ``Crew.serve``)."""
        if self.posted:
            self.pool.note_wake(perf_counter_ns() - self.posted)
        if self.native:
            self.pool.limits.sync_lane()
        self.work(self.joined())
        return True

    def work(self, number: int = 0) -> None:
        """Claim and run chunks until none is left (``number``: this thread's number in the region)."""
        i = self.claim()
        if i < self.n:
            self.pool.regions.guard.run(self._chunks, i, number)

    def _chunks(self, i: int, number: int) -> None:
        """Run chunk ``i`` and every chunk claimed after it, inside this thread's region guard."""
        guard = self.pool.regions.guard
        recorders = self.pool.recorders
        while i < self.n:
            if self.error is None:
                if i:
                    a = self.first + (i - 1) * self.step
                    b = min(self.end, a + self.step)
                else:
                    a, b = self.begin, self.first
                guard.chunk = number if self.by_thread else i
                t0 = tracing.now() if recorders.active else 0
                try:
                    r = self.ctx.copy().run(self.fn, a, b)  # each chunk sees the caller's context
                    if self.results is not None:
                        self.results[i] = r
                except BaseException as exc:  # re-raised in the caller
                    with self.lock:
                        if self.error is None:
                            self.error = exc
                        else:
                            self.also_raised.append((a, b, exc))
                if t0:
                    recorders.record(tracing.task_name(self.fn), "chunk", t0, tracing.now(),
                                     {"begin": a, "end": b})
            if self.finished() == self.n:
                self.done.release()
            i = self.claim()

    def cancel(self, exc: BaseException) -> None:
        """Skip the chunks not started yet: the caller was interrupted by ``exc``."""
        with self.lock:
            if self.error is None:
                self.error = exc


class IntraopPool:
    """The intra-op workers, their job queue and the regions run on them; one per process
    (``Runtime.intra``).

    Created empty; ``resize`` starts workers (through the pool's ``Crew``) on the first region
    that needs them, ``shutdown`` stops them at exit, after which regions run inline. Every
    region is entered through the calling thread's ``RegionGuard`` (``regions.guard``).
    """

    def __init__(self, settings: RuntimeSettings, limits: NativeLimits, adaptive: Adaptive,
                 recorders: Recorders, setup: WorkerSetup, follow: BudgetFollower) -> None:
        self.settings = settings
        self.limits = limits
        self.follow = follow
        self.adaptive = adaptive
        self.recorders = recorders
        self.regions = ThreadRegions()  # each thread's place in a region
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.crew = Crew("parinfo-intra", setup, limits)
        self.workers = self.crew.workers
        self.size = 0  # workers asked to run (the ones told to stop are not counted)
        self.closing = False
        self._serial = itertools.count(1)  # worker numbers
        self.wake_ns = 0  # how long a posted region waits for a worker to start (moving average)

    def note_wake(self, ns: int) -> None:
        """A worker started on a region ``ns`` after it was posted."""
        self.wake_ns += (ns - self.wake_ns) >> 3 if self.wake_ns else ns

    def resize(self, n: int) -> None:
        """Hold ``n`` workers: start the missing ones, tell surplus ones to stop."""
        if n == self.size:
            return
        crew = self.crew
        with crew.lock:
            crew.at_exit(self.shutdown)
            workers = crew.workers
            workers[:] = [t for t in workers if t.is_alive()]
            while self.size < n:
                # counted before it starts, so an interrupted start leaves no uncounted worker
                listed = len(workers)
                self.size += 1
                try:
                    crew.start(next(self._serial), self._work)
                except BaseException:
                    if len(workers) == listed:  # its thread never came to life
                        self.size -= 1
                    raise
            while self.size > n:
                self.jobs.put(STOP)
                self.size -= 1

    def _work(self) -> None:
        self.crew.serve(self.jobs, _Job.help)

    def post(self, token: SyncToken) -> None:
        """Queue an ``on_every_worker`` token for one worker."""
        self.jobs.put(token)

    def started(self) -> bool:
        return self.size > 0

    def alive_threads(self) -> int:
        return self.crew.alive_threads()

    def shutdown(self) -> None:
        """Stop and join the workers (registered with atexit when the pool starts); later regions
        run inline."""
        self.closing = True
        self.resize(0)
        self.crew.join(lambda: self.jobs.put(STOP))

    def after_fork_in_child(self) -> None:
        """A fresh pool in the child: the parent's workers do not exist here."""
        self.crew.after_fork_in_child()
        self.jobs = queue.SimpleQueue()
        self.size = 0
        self.closing = False

    # regions -------------------------------------------------------------------------------
    def region(self, begin: int, end: int, grain_size: int, fn: Callable[..., Any], reduce: bool,
               site_fn: Callable[..., Any] | None = None) -> list[Any] | None:
        """Run ``fn`` over ``[begin, end)``; with ``reduce`` return the chunk results in order.
        ``site_fn`` is what identifies the call site for the adaptive decisions (default ``fn``)."""
        if not (type(begin) is int and type(end) is int and type(grain_size) is int and grain_size > 0):
            begin, end, grain_size = _check_range(begin, end, grain_size)
        size = end - begin
        if size <= 0:
            return [] if reduce else None
        settings, limits = self.settings, self.limits
        count = settings.intra_now or settings.intra_count()
        if limits.pushed is not None:
            limits.refresh_if_new_modules()
        nested = self.regions.guard.active
        if self.size >= count and not nested:  # the count went down: retire the surplus
            self.resize(count - 1)
        most = min(count, settings.ceiling)
        cap = CAPS.limit  # this thread's own ceiling (parinfo.thread_limits)
        if cap and cap < most:
            most = cap
        n = min(most, size // grain_size)
        # at most once a second each path re-reads the usable CPUs (follow.check); the adaptive
        # path compares the timestamp it takes anyway, the others read the clock
        follow = self.follow
        if n <= 1 or nested or self.closing or settings.sequential():
            if perf_counter_ns() >= follow.due_ns:
                follow.check()
            return self._inline(begin, end, fn, reduce)
        adaptive = self.adaptive
        site = (adaptive.region_site(site_fn or fn, size, n, min(4 * n, size // grain_size))
                if adaptive.enabled else None)
        if site is None:
            if perf_counter_ns() >= follow.due_ns:
                follow.check()
            return self._split(begin, end, n, n, fn, reduce, True)
        chunks = site.choose()
        t0 = perf_counter_ns()
        if t0 >= follow.due_ns:
            follow.check()
            t0 = perf_counter_ns()
        try:
            if chunks == 1:
                return self._inline(begin, end, fn, reduce)
            threads = min(chunks, n)
            lead = 0
            if chunks == threads and self.wake_ns and site.per_item:  # one chunk per thread
                lead = min(size // 4, int(self.wake_ns / site.per_item))  # what the caller does meanwhile
            return self._split(begin, end, chunks, threads, fn, reduce, site.long, lead)
        finally:
            site.record_region(chunks, perf_counter_ns() - t0, size)

    def _split(self, begin: int, end: int, chunks: int, threads: int, fn: Callable[..., Any], reduce: bool,
               native: bool, lead: int = 0) -> list[Any] | None:
        """Run a region as ``chunks`` chunks on the caller and ``threads - 1`` of the workers;
        the first chunk, which the caller takes, is ``lead`` elements longer than the others."""
        job = _Job(self, fn, begin, end, chunks, contextvars.copy_context(), reduce, native, lead)
        threads = min(threads, job.n)
        job.by_thread = job.n > threads
        if self.size < threads - 1:  # grow only to the work this region has
            self.resize(threads - 1)
        put = self.jobs.put
        job.posted = perf_counter_ns()
        for _ in range(threads - 1):
            put(job)
        limits = self.limits
        weights = limits.thread.weights
        depth = len(weights)
        try:
            # the caller holds a lane for every thread of the region (one fewer when it already is one)
            limits.lane_enter(0, threads - (depth > 0), native)
            job.work()
            job.done.acquire()
        except BaseException as exc:  # interrupted: chunks not started yet are skipped
            job.cancel(exc)
            raise
        finally:
            try:
                limits.leave_to(depth, True)
            finally:
                if len(weights) > depth:  # the first was cut short by an interrupt
                    limits.leave_to(depth, True)
        if job.error is not None:
            _attach_others(job.error, job.also_raised)
            raise job.error
        return job.results

    def _inline(self, begin: int, end: int, fn: Callable[..., Any], reduce: bool) -> list[Any] | None:
        recorders = self.recorders
        t0 = tracing.now() if recorders.active else 0
        try:
            r = self.regions.guard.run(fn, begin, end)
        finally:
            if t0:
                recorders.record(tracing.task_name(fn), "chunk", t0, tracing.now(), {"begin": begin, "end": end})
        return [r] if reduce else None


def _check_range(begin: Any, end: Any, grain_size: Any) -> tuple[int, int, int]:
    out = []
    for name, v in (("begin", begin), ("end", end), ("grain_size", grain_size)):
        try:
            if isinstance(v, bool):
                raise TypeError
            out.append(operator.index(v))  # int and numpy integers, never float
        except TypeError:
            raise TypeError(f"parallel_for {name} expects an int, but got {type(v).__name__} ({v!r})") from None
    if out[2] < 1:
        raise ValueError(f"parallel_for grain_size expects a positive integer, but got {out[2]}")
    return out[0], out[1], out[2]


_NOTES_LISTED = 10  # other chunk exceptions named one by one in the notes; the rest are counted


def _attach_others(error: BaseException, others: list[tuple[int, int, BaseException]]) -> None:
    """Attach the exceptions of chunks that raised after the first to it: one note each (PEP 678
    notes, shown under the traceback), and the exceptions themselves as
    ``error.parinfo_other_errors``."""
    if not others:
        return
    notes = [f"parinfo: {len(others)} more chunk(s) of this parallel region raised too:"]
    for a, b, exc in others[:_NOTES_LISTED]:
        notes.append(f"  chunk [{a}, {b}): {type(exc).__name__}: {exc}")
    if len(others) > _NOTES_LISTED:
        notes.append(f"  ... and {len(others) - _NOTES_LISTED} more")
    for note in notes:
        if hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(note)
        else:
            setattr(error, "__notes__", [*getattr(error, "__notes__", []), note])  # noqa: B010 - 3.10 has no add_note
    try:
        error.parinfo_other_errors = [exc for _, _, exc in others]  # type: ignore[attr-defined]
    except AttributeError:  # an exception type with __slots__
        pass
