"""Native pools (OpenBLAS, MKL, BLIS, OpenMP runtimes) and torch: the push and the budget.

Push: after ``set_num_threads``/``configure`` the intra-op count goes into every loaded native pool
through one cached threadpoolctl controller, and into torch when torch is imported. Libraries
loaded later get it at the next parallel region or task (the controller is rebuilt when
``sys.modules`` grew).

Budget: every thread running an inter-op task or taking part in a parallel region is a *lane*.
While two or more lanes run, each lane's native threads are capped at ``usable_cpus // lanes``
(at least 1) so lanes x native threads stays within the usable CPUs. Two kinds of pools need two
mechanisms:

* per-thread pools (OpenMP runtimes and torch: the limit is an ICV of the calling thread): each
  lane sets its own thread's limit when it starts, only if it differs from what that thread has;
* process-wide pools (OpenBLAS with pthreads, MKL, BLIS): the cap is set once when the lane count
  rises and restored when the last lane ends (not on every dip, so busy pools do not flap).

All of it is the state of one ``NativeLimits`` object, held by the process's ``Runtime``.
"""
from __future__ import annotations

import copy
import sys
import threading
from typing import TYPE_CHECKING, Any

from parinfo.process import setter
from parinfo.process.setter import NativePool
from parinfo.records.source import Source
from parinfo.runtime.settings import RuntimeSettings
from parinfo.runtime.snapshot import Budget, Push, PushedPool, Reached

if TYPE_CHECKING:
    from parinfo.runtime.workers import Reach


def _torch() -> Any:
    return sys.modules.get(setter.TORCH)


def _describe(pool: NativePool, done: setter.Outcome, scope: str | None = None) -> PushedPool:
    lib = pool.controller
    return PushedPool(pool.record.name, lib.filepath, done.asked, lib.user_api, lib.internal_api, lib.prefix,
                      done.error or None, scope)


class _ThreadView(threading.local):
    """What one thread knows: its lanes (a stack of weights), what its per-thread pools were last
    set to, its own saved counts."""

    applied: tuple[Any, ...] | None = None  # (pushed, cap, controller, pushes) its per-thread pools were set for
    capped = False  # its per-thread pools carry a budget cap now
    saved: dict[str, int] | None = None  # its per-thread counts before the first cap

    def __init__(self) -> None:
        self.weights: list[int] = []  # lanes this thread entered, innermost last

    @property
    def depth(self) -> int:
        return len(self.weights)


class NativeLimits:
    """The count pushed into native pools and torch, and the lane budget that caps them."""

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        self.lock = threading.RLock()  # serialises changes of native limits
        self.budget_lock = threading.Lock()  # guards lanes, cap and version
        self.thread = _ThreadView()
        self._controller: Any = None
        self._controller_modules = -1  # len(sys.modules) when the controller was built
        # (controller, per-thread pools, process-wide pools): one tuple, swapped whole, so a thread
        # never pairs one controller with another's pools (workers free their teams concurrently)
        self._split: tuple[Any, list[NativePool], list[NativePool]] = (None, [], [])
        # the push
        self.pushed: int | None = None  # the intra-op count pushed by set_num_threads/configure
        self.follow_push = False  # the last push gave defaults that follow the usable CPUs (nobody chose it)
        # a profile's per-library counts over it (record name -> count; None: leave that library alone)
        self.by_library: dict[str, int | None] = {}
        self._pushes = 0  # pushes made: a thread whose pools took an earlier one syncs again
        self._push_record: Push | None = None
        self._pushed_to: set[str] = set()  # library paths (and "torch") that have the pushed count
        self._push_controller: Any = None  # the controller the last push went through
        # the budget
        self.lanes = 0  # lanes now running
        self.cap: int | None = None  # current cap per lane, None when not capped
        self.version = 0  # bumped whenever the pushed count or the cap changes
        self._usable = 0
        self._process_base: dict[str, int] = {}  # library path -> count before the cap began
        self._process_applied: dict[str, int] = {}  # library path -> count parinfo set under the cap
        self._torch_base: int | None = None  # torch's count when the current cap began
        self._process_capped = False  # process-wide pools carry the cap now
        self._torch_capped = False  # torch's process-wide default carries the cap now
        self.changes = 0  # native limit changes made by the budget and the pushes (for benchmarks)
        # (the per-thread pools of ``_split``, those whose record can free a team), swapped whole
        self._pauses: tuple[Any, list[NativePool]] = (None, [])
        self.teams_released = 0  # omp_pause_resource_all calls made by going-idle workers (with a team or not)

    # threadpoolctl view --------------------------------------------------------------------
    def _libs(self) -> tuple[list[NativePool], list[NativePool]]:
        """(per-thread pools, process-wide pools) of the cached controller, rebuilt when new
        modules were imported."""
        try:
            n = len(sys.modules)
            ctrl = self._controller
            if ctrl is None or n != self._controller_modules:
                ctrl = setter.import_threadpoolctl().ThreadpoolController()
                self._controller, self._controller_modules = ctrl, n
        except Exception:  # no threadpoolctl view of this process: nothing to steer
            return [], []
        split = self._split
        if split[0] is not ctrl:
            pools = setter.native_pools(ctrl)
            split = (ctrl, [p for p in pools if p.per_thread], [p for p in pools if not p.per_thread])
            self._split = split
        return split[1], split[2]

    # idle workers -------------------------------------------------------------------------
    def release_teams(self) -> None:
        """On a pool worker about to wait for work: free the OpenMP team its tasks made.

        libgomp counts the idle team threads of every thread that ever ran a parallel region and,
        once they outnumber the CPUs, makes every team sleep instead of spinning between regions:
        a team left on an idle worker made torch's LSTM on the main thread 1.7x slower for the
        rest of the process. ``omp_pause_resource_all(omp_pause_soft)`` frees the calling thread's
        team (0.3 us when it has none); the next region on the worker makes a new one.
        """
        if self._controller is None and setter.TORCH not in sys.modules:
            return  # nothing asked for a native view yet (pure-Python tasks pay nothing)
        per_thread = self._libs()[0]  # cached; rebuilt only after imports
        seen, pauses = self._pauses
        if seen is not per_thread:
            pauses = [p for p in per_thread if p.record.team_release]
            self._pauses = (per_thread, pauses)
        for pool in pauses:
            if pool.release_team():
                self.teams_released += 1

    # the push ------------------------------------------------------------------------------
    def push(self, count: int, source: Source, by_library: dict[str, int | None] | None = None,
             follow: bool = False) -> None:
        """Put ``count`` into every loaded native pool and into torch (when imported); a library
        named in ``by_library`` (record name -> count, a profile's ``libraries``) gets its own count
        instead, or is left alone where that is None. ``follow``: the counts are defaults that
        follow the usable CPUs (``parinfo.runtime.follow``), not anyone's choice."""
        with self.lock:
            self.follow_push = follow
            self.pushed = count
            self.by_library = dict(by_library or {})
            self._pushes += 1
            self.version += 1
            self._pushed_to = set()
            self._push_record = Push(count, source)
            self._push_new()

    def _base(self, pool: NativePool) -> int | None:
        """The count pushed for ``pool`` (None when nothing was pushed, or it is left alone)."""
        if self.pushed is None:
            return None
        return self.by_library.get(pool.record.name, self.pushed)

    def _torch_pushed(self) -> int | None:
        if self.pushed is None:
            return None
        return self.by_library.get(setter.TORCH, self.pushed)

    def _push_new(self) -> None:
        """Give the pushed count to the pools and torch that have not had it yet (call with lock)."""
        record = self._push_record
        if self.pushed is None or record is None:
            return
        per_thread, process = self._libs()
        self._push_controller = self._controller
        for pool in process:
            if pool.path in self._pushed_to:
                continue
            self._pushed_to.add(pool.path)
            base = self._base(pool)
            if base is None:
                continue
            want = base
            if self.cap is not None:  # capped now: the count is what the pool gets back afterwards
                self._process_base[pool.path] = base
                want = max(1, min(base, self.cap))
                self._process_applied[pool.path] = want
            record.pools.append(_describe(pool, pool.set_checked(want)))
        for pool in per_thread:
            if pool.path in self._pushed_to:
                continue
            self._pushed_to.add(pool.path)
            base = self._base(pool)
            if base is not None:
                record.pools.append(_describe(pool, pool.set_checked(base),
                                              "calling thread; pools sync their threads"))
        if _torch() is not None and setter.TORCH not in self._pushed_to:
            self._pushed_to.add(setter.TORCH)
            n = self._torch_pushed()
            if n is not None:
                setter.torch_intra(n)
                record.torch = setter.torch_call(n)
            self.version += 1  # other threads sync torch at their next task or region
        self.thread.applied = (self.pushed, None, self._controller, self._pushes)

    def sync_worker(self) -> None:
        """On an idle pool worker (run there by ``on_every_worker``): bring its per-thread pools
        (OpenMP runtimes, torch) to the pushed count, which a push from another thread cannot do."""
        if self.pushed is None or self.thread.depth:
            return
        with self.lock:
            if self._libs()[0] or _torch() is not None:
                self._sync_thread(False)

    def note_workers(self, reach: Reach) -> None:
        """Record which pool workers took the last push (``on_every_worker``'s answer)."""
        with self.lock:
            if self._push_record is not None:
                self._push_record.workers = Reached(list(reach["ran"]), list(reach["pending"]))

    def push_record(self) -> Push | None:
        """What the last push did (a copy), or None when nothing was pushed."""
        with self.lock:
            if self._push_record is None:
                return None
            return copy.deepcopy(self._push_record)

    def refresh_if_new_modules(self) -> None:
        """Give the pushed count to native libraries and torch imported since the last push only."""
        if self.pushed is not None and (len(sys.modules) != self._controller_modules
                                        or self._controller is not self._push_controller):
            with self.lock:
                self._push_new()

    def pools(self) -> tuple[list[NativePool], list[NativePool]]:
        """(per-thread pools, process-wide pools) loaded now (the cached controller's view)."""
        with self.lock:
            return self._libs()

    def count_before_cap(self, pool: NativePool) -> int | None:
        """``pool``'s count as the process set it, not the budget: while lanes cap it, the count it
        had when the cap began (for a per-thread pool, the calling thread's)."""
        with self.lock:
            if not pool.per_thread and self._process_capped and pool.path in self._process_base:
                return self._process_base[pool.path]
            saved = self.thread.saved
            if pool.per_thread and self.thread.capped and saved is not None and pool.path in saved:
                return saved[pool.path]
            return pool.get()

    def torch_before_cap(self) -> int | None:
        """torch's intra-op count for the calling thread, as it was before a budget cap."""
        with self.lock:
            if self._torch_capped and self.thread.capped and self._torch_base is not None:
                return self._torch_base
            return setter.torch_intra_now()

    def set_usable(self, n: int) -> None:
        """The usable CPUs changed: lanes that start from now on share ``n``."""
        n = max(1, n)
        with self.budget_lock:  # no call while it is held (see lane_enter)
            self._usable = n

    # the budget ----------------------------------------------------------------------------
    def _apply_process(self) -> None:
        """Give process-wide pools ``min(base, cap)``; base is the count the pool had when the cap
        began (the pushed count, or what a profile or the user set since), given back when it
        ends. Call with ``lock``."""
        if self.cap is not None and not self._process_capped:
            self._capture_torch_base()
        for pool in self._libs()[1]:
            k = pool.path
            if k not in self._process_base:
                self._process_base[k] = pool.get() or 1
            base = self._process_base[k]
            want = base if self.cap is None else max(1, min(base, self.cap))
            if self._process_applied.get(k) != want:
                pool.set(want)
                self._process_applied[k] = want
                self.changes += 1
        self._process_capped = self.cap is not None
        if self.cap is None:  # the user may change the pools until the next cap: forget them
            self._process_base.clear()
            self._process_applied.clear()
            # torch keeps a process-wide default that new threads copy on their first op
            torch_base = self._torch_pushed() if self.pushed is not None else self._torch_base
            if torch_base is not None and _torch() is not None and self._torch_capped:
                setter.torch_intra(torch_base)
                self.changes += 1
            self._torch_capped = False

    def _capture_torch_base(self) -> None:
        """torch's count before a cap, read on a thread parinfo has not capped."""
        if _torch() is not None and not self.thread.capped:
            now = setter.torch_intra_now()
            if now is not None:
                self._torch_base = now

    def _wanted_state(self) -> tuple[Any, ...]:
        return (self.pushed, self.cap, self._controller, self._pushes)

    def _sync_thread(self, in_lane: bool) -> None:
        """Bring this thread's per-thread pools (OpenMP runtimes, torch) to the count and cap."""
        per_thread = self._libs()[0]
        view = self.thread
        cap = self.cap if in_lane else None
        if view.saved is None:
            view.saved = {}
        if cap is not None:  # the thread's own counts before the cap, read before changing any
            if not self._torch_capped and not self._process_capped:
                self._capture_torch_base()
            for pool in per_thread:
                if pool.path not in view.saved:
                    view.saved[pool.path] = pool.get() or 1
        for pool in per_thread:
            base = self._base(pool) if self.pushed is not None else view.saved.get(pool.path)
            if base is not None:
                pool.set(base if cap is None else max(1, min(base, cap)))
                self.changes += 1
        base = self._torch_pushed() if self.pushed is not None else self._torch_base
        if base is not None and _torch() is not None:
            setter.torch_intra(base if cap is None else max(1, min(base, cap)))
            self.changes += 1
            if cap is not None:
                self._torch_capped = True
        view.applied = self._wanted_state() if in_lane else None
        view.capped = cap is not None
        if cap is None:
            view.saved = None

    def lane_enter(self, queued: int = 0, weight: int = 1, native: bool = True) -> None:
        """This thread starts ``weight`` lanes: an inter-op task (1), or a parallel region whose
        caller accounts for all of its chunks (the workers helping it enter no lane, so the lanes
        end exactly when the caller's region returns).

        ``queued`` is how many more lanes are about to start (tasks waiting for idle workers), so
        the cap is in place before the first of a batch of tasks runs its native calls. With
        ``native`` False (work measured too short for native pools to matter) only the count of
        lanes changes: no native limit is touched.
        """
        weights = self.thread.weights
        if not self._usable:
            self._usable = self.settings.usable_cpus()
        changed = False
        with self.budget_lock:
            # the weight and the lanes change together, with no call between them where a
            # KeyboardInterrupt could land (a C method call is such a place: no append here):
            # ``leave_to`` can always undo exactly this
            self.lanes += weight
            weights += (weight,)
            lanes = self.lanes + queued
            if lanes >= 2:
                cap = self._usable // lanes or 1  # no call while the lock is held (see Future.enqueue)
                if self.cap is None or cap < self.cap:
                    self.cap = cap
                    self.version += 1
                    changed = True
        if not native:
            return
        if changed or (self.cap is not None and not self._process_capped):
            with self.lock:
                self._apply_process()
        self.sync_lane()

    def sync_lane(self) -> None:
        """Bring the calling thread's per-thread pools to the pushed count and the cap, when they
        are not there already (a worker helping a region calls it before its chunks)."""
        if self.pushed is not None:
            self.refresh_if_new_modules()
        view = self.thread
        if (self.pushed is not None or self.cap is not None or view.capped) and view.applied != self._wanted_state():
            with self.lock:
                self._sync_thread(True)

    def lane_exit(self, restore: bool) -> None:
        """The innermost lanes of this thread end; ``restore`` for threads that are not parinfo's
        (give back their own limits)."""
        view = self.thread
        weights = view.weights
        uncap = False
        try:
            with self.budget_lock:
                self.lanes -= weights[-1]  # no call between the two (see lane_enter)
                del weights[-1]
                if self.lanes == 0 and self.cap is not None:
                    self.cap = None
                    self.version += 1
                    uncap = self._process_capped or self._torch_capped
        finally:  # the limits come back even when an interrupt lands right after the change
            if uncap:
                with self.lock:
                    self._apply_process()
        if restore and not weights and view.capped:
            with self.lock:
                self._sync_thread(False)

    def leave_to(self, depth: int, restore: bool) -> None:
        """End this thread's lanes down to ``depth``, the depth it had before ``lane_enter``.

        Called from ``finally`` blocks, so a KeyboardInterrupt anywhere between entering and
        leaving (even inside ``lane_enter``) still gives the budget back.
        """
        weights = self.thread.weights
        while len(weights) > depth:
            self.lane_exit(restore)

    def state(self) -> Budget:
        """The budget now: lanes running and the cap per lane (None when not capped)."""
        return Budget(self.lanes, self.cap, self._usable or None, self.changes)

    def after_fork_in_child(self) -> None:
        """Fresh locks and budget; the forking thread may be inside a task (then one lane runs)."""
        self.lock = threading.RLock()
        self.budget_lock = threading.Lock()
        self.lanes = sum(self.thread.weights)
        self.cap = None
        self._process_capped = self._torch_capped = False
        self.version += 1

