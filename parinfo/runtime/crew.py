"""The worker lifecycle both pools share: start and name workers, run their loop, stop them at
exit, and renew them in the child of an ``os.fork``.

A pool owns its job queue and what its jobs are; its ``Crew`` owns the threads that serve the
queue. The loop (``serve``) takes a job at a time: ``None`` stops the worker, a ``SyncToken`` runs
the ``on_every_worker`` functions, anything else goes to the pool's handler. After a job that ran,
the worker checks that it is still in the process it started in, catches up with functions stored
meanwhile, and frees its OpenMP team when it is about to go idle.
"""
from __future__ import annotations

import atexit
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from parinfo.runtime.forkexit import exit_forked_child
from parinfo.runtime.native import NativeLimits
from parinfo.runtime.threadname import set_os_name
from parinfo.runtime.workers import SyncToken, WorkerSetup

STOP = None  # put on a pool's queue once per worker to stop: the worker returns


class Crew:
    """One pool's worker threads, named ``{prefix}-{number}``."""

    def __init__(self, prefix: str, setup: WorkerSetup, limits: NativeLimits) -> None:
        self.prefix = prefix
        self.setup = setup
        self.limits = limits
        self.workers: list[threading.Thread] = []  # one list for the crew's life: pools may alias it
        self.lock = threading.Lock()  # held by the pool while it starts or stops workers
        self.epoch = 0  # bumped in a forked child: workers inherited from the parent see it
        self._atexit_registered = False

    def at_exit(self, shutdown: Callable[[], None]) -> None:
        """Register the pool's ``shutdown`` with atexit, once per process (a forked child keeps it)."""
        if not self._atexit_registered:
            atexit.register(shutdown)
            self._atexit_registered = True

    def start(self, number: int, work: Callable[..., None], *args: Any) -> None:
        """Start a worker running ``work(*args)``, listed before it starts so that shutdown stops it
        either way. After an interrupt inside ``Thread.start`` the worker stays listed only if its
        thread came to life (otherwise its OS thread was never created), and the interrupt goes on."""
        t = threading.Thread(target=work, args=args, daemon=True, name=f"{self.prefix}-{number}")
        self.workers.append(t)
        try:
            t.start()
        except BaseException:
            for _ in range(400):
                if t.is_alive() or t.ident is not None:
                    raise
                time.sleep(0.005)
            self.workers.remove(t)
            raise

    def serve(self, jobs: queue.SimpleQueue[Any], handle: Callable[[Any], bool]) -> None:
        """The worker loop on ``jobs`` until a ``STOP``; ``handle(job)`` runs a job of the pool and
        returns False when it passed the job over (nothing ran, so nothing to tidy after it)."""
        set_os_name(threading.current_thread().name)
        get, jobs_empty = jobs.get, jobs.empty
        epoch = self.epoch
        setup, limits = self.setup, self.limits
        seen = setup.seen
        setup.catch_up()  # functions stored by on_every_worker run before the first job
        while True:
            job = get()
            if job is STOP:
                return
            if type(job) is SyncToken:
                job.run()
                continue
            if not handle(job):
                continue
            if self.epoch != epoch:  # the job called os.fork() and this is the child
                exit_forked_child()
            if seen.version != setup.version:
                setup.catch_up()
            if jobs_empty():  # going idle: free any OpenMP team its jobs made
                limits.release_teams()

    def join(self, resend: Callable[[], None]) -> None:
        """Join every worker but the calling one; ``resend`` posts one more stop for a worker that
        is still alive after a while (its stop was taken by a worker nobody listed)."""
        current = threading.current_thread()
        for t in list(self.workers):
            while t is not current and t.is_alive():
                t.join(0.1)
                if t.is_alive():
                    resend()

    def alive_threads(self) -> int:
        return sum(t.is_alive() for t in self.workers)

    def after_fork_in_child(self) -> None:
        """No workers in the child: the parent's do not exist here; those it inherited mid-job see
        the new epoch and exit the child when their job returns."""
        self.epoch += 1
        self.workers.clear()
        self.lock = threading.Lock()
