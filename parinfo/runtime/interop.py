"""The inter-op pool: one per process, started by the first ``fork``, sized once.

Workers take tasks from one C-level queue (``queue.SimpleQueue``) and claim them; a task that a
waiter claimed first is skipped. Forks made after interpreter shutdown began, or with the
sequential backend, run inline. At exit queued tasks are finished and the workers joined before
finalisation.
"""
from __future__ import annotations

import atexit
import contextvars
import queue
import threading
from typing import Any, Callable

from parinfo.runtime import future as _fut
from parinfo.runtime import settings

Future = _fut.Future

_STOP = None


class _Pool:
    def __init__(self, n: int) -> None:
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        # n slots: a task runs only while holding one, so at most n tasks run at once even when
        # waiters run tasks inline (a waiter that finds no free slot still runs its task).
        self.slots: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(n):
            self.slots.put(1)
        self.size = n
        self.current: list[Any] = [None] * n  # the task each worker runs (for os.fork children)
        self.threads = [threading.Thread(target=_worker, args=(self, i), daemon=True,
                                         name=f"parinfo-interop-{i}") for i in range(n)]
        for t in self.threads:
            t.start()


_pool: _Pool | None = None
_tl = threading.local()  # slot: True while this thread holds a slot
_sequential = False
_closing = False
_start_lock = threading.Lock()
_atexit_registered = False


def _worker(pool: _Pool, index: int) -> None:
    get = pool.q.get
    slot_get, slot_put = pool.slots.get, pool.slots.put
    claim = _fut._claim
    run = _fut.run
    current = pool.current
    others = pool.size - 1
    _tl.slot = True  # nested waits inside tasks run inline without taking another slot
    while True:
        fut = get()
        if fut is _STOP:
            return
        if fut._state != _fut.PENDING:  # a waiter ran it already
            continue
        slot_get()
        if claim(fut):
            current[index] = fut
            run(fut, False, min(_fut.pending, others))
            current[index] = None
        slot_put(1)


def _run_inline(fut: Future) -> None:
    """Run a task a waiter claimed, holding a slot when one is free."""
    pool = _pool
    if pool is None or getattr(_tl, "slot", False):
        _fut.run(fut, True)
        return
    try:
        pool.slots.get_nowait()
    except queue.Empty:
        _fut.run(fut, True)
        return
    _tl.slot = True
    try:
        _fut.run(fut, True, min(_fut.pending, pool.size - 1))
    finally:
        _tl.slot = False
        pool.slots.put(1)


_fut.run_inline = _run_inline


def _start() -> _Pool | None:
    global _pool, _sequential, _atexit_registered
    with _start_lock:
        if _pool is None and not _sequential:
            n = settings.mark_inter_started()
            if settings.backend()[0] == "sequential":
                _sequential = True
            else:
                _pool = _Pool(n)
                if not _atexit_registered:
                    atexit.register(shutdown)
                    _atexit_registered = True
        return _pool


def fork(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
    """Run ``fn(*args, **kwargs)`` as an inter-op task; ``wait()`` the returned Future for its value.

    The task sees a copy of the caller's contextvars. With PARINFO_BACKEND=sequential, or once
    the interpreter is exiting, the task runs inline before fork returns.
    """
    if not callable(fn):
        raise TypeError(f"fork() expects a callable, but got {type(fn).__name__}")
    fut = Future(fn, args, kwargs, contextvars.copy_context())
    _fut.queued(fut)
    pool = _pool
    if pool is None:
        pool = _start()
    if pool is None or _closing:
        if _fut._claim(fut):
            _fut.run(fut, True)
        return fut
    pool.q.put(fut)
    return fut


def wait(fut: Future) -> Any:
    """The task's value; re-raises its exception. An unstarted task runs on this thread."""
    if not isinstance(fut, Future):
        raise TypeError(f"wait() expects a parinfo Future, but got {type(fut).__name__}")
    return fut.result()


def started() -> bool:
    return _pool is not None or _sequential


def alive_threads() -> int:
    pool = _pool
    return 0 if pool is None else sum(t.is_alive() for t in pool.threads)


def shutdown() -> None:
    """Finish queued tasks and join the workers (registered with atexit when the pool starts)."""
    global _closing
    _closing = True
    pool = _pool
    if pool is None:
        return
    for _ in pool.threads:
        pool.q.put(_STOP)
    me = threading.current_thread()
    for t in pool.threads:
        if t is not me:
            t.join()


def after_fork_in_child() -> None:
    """Fresh, unstarted pool in the child; tasks the parent's workers were running fail cleanly."""
    global _pool, _start_lock, _closing
    old = _pool
    _pool = None
    _closing = False
    _start_lock = threading.Lock()
    if old is not None:
        for fut in old.current:
            if fut is not None and fut._state == _fut.RUNNING:
                _fut.fail_orphan(fut, "the task was running in the parent process when os.fork() "
                                      "was called; it cannot finish in the child")
