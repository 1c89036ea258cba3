"""The count each thread really gets from each loaded pool, read in that thread: the ground truth that
the registry's scope facts (:class:`~parinfo.process.library_parts.ScopeFacts`,
:func:`~parinfo.process.library_parts.predicted_count`) and the per-thread report are checked against.

A measurement, not a report: it starts threads and calls each pool's getter in them (a report starts
nothing). It reads through parinfo's own readers: threadpoolctl's controller of each loaded native
pool (:func:`parinfo.process.setter.native_pools`: libgomp, OpenBLAS, MKL, BLIS...) and each
imported module's getter (:class:`~parinfo.process.library_parts.Calls`: torch, numexpr, numba), so
what it reads in a thread is what those readers would read there. It lives in parinfo, not only in
the tests, because the per-thread report's tests, and reading a thread's counts through the
runtime's own workers, call :func:`read_here` in the thread they ask about.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor

from parinfo.process.library_parts import SetIn, ThreadKind
from parinfo.records.record import record

#: Counts read in one thread: pool key -> count (None: unreadable).
Counts = dict[str, "int | None"]


@record(frozen=True)
class Reader:
    """One loaded pool and how to read its count in the calling thread: ``key`` names it in the
    probe's answers (``openblas:libscipy_openblas64_-ff651d7f.so``, ``torch``), ``family`` is its
    registry record's name, ``layer`` its threading layer where threadpoolctl says one."""

    key: str
    family: str
    layer: str
    read: Callable[[], int | None]


def readers() -> list[Reader]:
    """A reader for every loaded native pool parinfo sets and every imported module with a getter."""
    from parinfo.process import libraries as reg, setter

    found = [Reader(f"{pool.record.name}:{os.path.basename(pool.path)}", pool.record.name,
                    str(getattr(pool.controller, "threading_layer", "") or ""), pool.get)
             for pool in setter.native_pools()]
    for lib in reg.records():
        module = lib.loaded_module() if lib.set_in_module and lib.calls is not None else None
        if module is not None and lib.calls is not None:
            found.append(Reader(lib.name, lib.name, "", _getter(lib.calls.get, module)))
    return found


def _getter(get: Callable[[object], int | None], module: object) -> Callable[[], int | None]:
    return lambda: get(module)


def read_here(pools: list[Reader]) -> Counts:
    """Each pool's count for the calling thread."""
    return {r.key: r.read() for r in pools}


#: How long :func:`read_in_workers` waits for every worker to take its read.
WORKERS_TIMEOUT_S = 30.0


def read_in_workers(executor: Executor, workers: int, pools: list[Reader] | None = None) -> dict[str, Counts]:
    """Each pool's count in each of ``workers`` threads of ``executor`` (the program's own
    ``ThreadPoolExecutor``), by thread name: one read per thread, held at a barrier until all
    ``workers`` have taken one, so no thread reads twice. Raises ``threading.BrokenBarrierError``
    when the executor has fewer threads (they could not all meet)."""
    pools = readers() if pools is None else pools
    meet = threading.Barrier(workers, timeout=WORKERS_TIMEOUT_S)

    def read() -> tuple[str, Counts]:
        counts = read_here(pools)
        meet.wait()
        return threading.current_thread().name, counts

    done = [executor.submit(read) for _ in range(workers)]
    return dict(f.result() for f in done)


@record(frozen=True)
class ScopeRun:
    """What each kind of thread (:class:`ThreadKind`'s words) read, ``before`` and ``after`` a limit
    was set where ``set_in`` says. ``before`` also holds what a thread started before the limit
    (``new``) gets: the default the ``after`` reading of a new thread is compared with."""

    set_in: str
    before: dict[str, Counts]
    after: dict[str, Counts]
    observed: object = None

    def to_data(self) -> dict[str, object]:
        """Plain data (a subprocess prints it as JSON)."""
        return {"set_in": self.set_in, "before": self.before, "after": self.after, "observed": self.observed}


#: What :func:`measure` gives ``observe``: each kind of thread's native id (ThreadKind's words).
Observe = Callable[[dict[str, int]], object]


def measure(limit: Callable[[], object], set_in: SetIn, pools: list[Reader] | None = None,
            observe: Observe | None = None) -> ScopeRun:
    """Set a limit by calling ``limit`` in the main thread or in a worker (``set_in``), and read every
    pool's count in: the main thread, a worker running since before (it read its counts then, so it
    has used each pool), the worker that set it, and a worker started after it. Each worker is a
    one-thread ``ThreadPoolExecutor``, so every call lands on the same thread. What ``limit`` returns
    is kept until all is read (a ``threadpool_limits`` object holds its limits while alive).
    ``observe`` is called in the main thread after the reads, while every one of those threads is
    alive, with their native ids (what a report made then says of them: ``ScopeRun.observed``)."""
    pools = readers() if pools is None else pools
    main, setter_kind = ThreadKind.MAIN.value, ThreadKind.SETTER.value
    running = ThreadPoolExecutor(1, thread_name_prefix="scope-running")
    setting = ThreadPoolExecutor(1, thread_name_prefix="scope-setter")
    fresh: ThreadPoolExecutor | None = None
    observed: object = None
    try:
        before = {main: read_here(pools), ThreadKind.RUNNING.value: running.submit(read_here, pools).result(),
                  ThreadKind.NEW.value: _in_new_thread(pools)}
        if set_in is SetIn.WORKER:
            before[setter_kind] = setting.submit(read_here, pools).result()
            kept = setting.submit(limit).result()
        else:
            kept = limit()
        fresh = ThreadPoolExecutor(1, thread_name_prefix="scope-new")
        after = {main: read_here(pools), ThreadKind.RUNNING.value: running.submit(read_here, pools).result(),
                 ThreadKind.NEW.value: fresh.submit(read_here, pools).result()}
        if set_in is SetIn.WORKER:
            after[setter_kind] = setting.submit(read_here, pools).result()
        if observe is not None:
            ids = {main: threading.get_native_id(),
                   **{kind.value: ex.submit(threading.get_native_id).result()
                      for kind, ex in ((ThreadKind.RUNNING, running), (ThreadKind.NEW, fresh))}}
            if set_in is SetIn.WORKER:
                ids[setter_kind] = setting.submit(threading.get_native_id).result()
            observed = observe(ids)
        del kept
    finally:
        for ex in (running, setting, fresh):
            if ex is not None:
                ex.shutdown()
    return ScopeRun(set_in.value, before, after, observed)


def _in_new_thread(pools: list[Reader]) -> Counts:
    with ThreadPoolExecutor(1, thread_name_prefix="scope-new") as fresh:
        return fresh.submit(read_here, pools).result()
