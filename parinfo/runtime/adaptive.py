"""Adaptive decisions per call site, learned from the process's own timings.

``parallel_for``: whether a region is split at all, and into how many chunks. A call site is the
chunk function's code object, the size of the range (by powers of two) and the threads the count
allows. Each site tries its candidates (inline, 2, 4, ... chunks up to one per thread, and 2x and 4x
that where the grain allows: the caller and the workers claim chunks as they go, so finer chunks
make up for a worker that wakes late),
``EXPLORE`` times each in a row, then uses the one with the lowest median time per element.
Every ``period`` calls it re-checks (each candidate sampled afresh); the period doubles while the choice
holds, up to ``RECHECK_MAX``, and falls back to ``RECHECK_FIRST`` when it changes. This replaces a
guessed grain (ATen's 32768 elements) with a measured break-even.

``fork``: whether a call site's tasks run on the inter-op pool in parallel lanes (with fewer
native threads each: the budget) or inline on the waiting thread with all native threads (a task
is then left to the thread that waits for it; a worker still runs it when nobody waited for it
within twice the site's task time, so no program can deadlock on it). The measure is throughput:
the time from the first task of a batch (tasks in flight at once) to the last, per task.

Work that takes less than ``NATIVE_MIN_NS`` (1 ms) at its call site touches no native limit: the
budget only counts its lanes. Capping and restoring a native pool costs tens of microseconds (the
library calls and the per-thread sync), several percent of such work, more than it can lose to a
moment of oversubscription; above 1 ms the cap costs at most a few percent and pays for itself
whenever the work calls a threaded library.

Switch it off with PARINFO_ADAPTIVE=0 in the environment (read at first use) or
``parinfo.runtime.set_adaptive(False)``: regions then always split into
``min(get_num_threads(), range // grain_size)`` chunks and every fork goes to the pool.
"""
from __future__ import annotations

import os
import threading
from typing import Any

from parinfo.process.libraries import role_var
from parinfo.process.variables import read_setting
from parinfo.runtime.snapshot import AdaptiveState

EXPLORE = 3  # samples per candidate in each round (the median decides)
WARMUP = 2  # a site's first calls run the first candidate unrecorded (threads start, caches fill)
RECHECK_FIRST = 32  # calls between re-checks after the choice changed
RECHECK_MAX = 2048  # the longest period between re-checks
NATIVE_MIN_NS = 1_000_000  # work shorter than this at its call site touches no native limit
MAX_SITES = 4096  # sites remembered; further ones use the defaults
SAMPLE_MASK = 15  # a fork site exploiting its choice times one task in 16 (its task time and length)
_INF = float("inf")


class Adaptive:
    """The switch and the table of call sites."""

    def __init__(self) -> None:
        self.on: bool | None = None  # None until first read (hot code reads it, then ``enabled``)
        self.regions: dict[Any, RegionSite] = {}
        self.forks: dict[Any, ForkSite] = {}

    @property
    def enabled(self) -> bool:
        on = self.on
        if on is None:
            on = self.on = read_setting(role_var("adaptive"), os.environ).value is not False
        return on

    def set_enabled(self, on: bool) -> None:
        if not isinstance(on, bool):
            raise TypeError(f"set_adaptive() expects a bool, but got {type(on).__name__}")
        self.on = on

    def region_site(self, fn: Any, size: int, most: int, finest: int | None = None) -> RegionSite | None:
        """The site of a region over ``size`` elements that may use ``most`` threads and be cut
        into at most ``finest`` chunks (of at least the grain)."""
        key = (site_code(fn), size.bit_length(), most)
        site = self.regions.get(key)
        if site is None:
            if len(self.regions) >= MAX_SITES:
                return None
            site = self.regions.setdefault(key, RegionSite(most, finest))
        return site

    def fork_site(self, fn: Any) -> ForkSite | None:
        key = site_code(fn)
        site = self.forks.get(key)
        if site is None:
            if len(self.forks) >= MAX_SITES:
                return None
            site = self.forks.setdefault(key, ForkSite())
        return site

    def state(self) -> AdaptiveState:
        """What the sites chose."""
        return AdaptiveState(self.enabled, len(self.regions), len(self.forks),
                             sum(s.pick == 1 for s in list(self.regions.values())),
                             sum(s.pick == INLINE for s in list(self.forks.values())))

    def after_fork_in_child(self) -> None:
        for site in list(self.forks.values()):
            site.reset_batch()


def site_code(fn: Any) -> Any:
    """What identifies a call site: the function's code object (lambdas written at one place
    share theirs), else its type."""
    code = getattr(fn, "__code__", None)
    if code is None:
        code = getattr(getattr(fn, "__func__", None), "__code__", None)
        if code is None:
            inner = getattr(fn, "func", None)  # functools.partial
            code = getattr(inner, "__code__", None) or type(fn)
    return code


def _grouped(cands: list[Any]) -> list[Any]:
    """Each candidate EXPLORE times in a row: only a group's first sample follows another
    candidate (whose after-effects, such as spinning BLAS threads, it may pay), and the median
    leaves it out."""
    return [c for c in cands for _ in range(EXPLORE)]


class _Chooser:
    """Explore each candidate, exploit the best, re-check now and then (see the module doc).

    A candidate's cost is the median of its samples in the current round, so one slow sample
    (a worker starting, a preemption) or one lucky one does not decide."""

    __slots__ = ("cands", "left", "period", "pick", "plan", "samples", "step", "warmup")

    def __init__(self, cands: list[Any], first: Any) -> None:
        self.cands = cands
        self.pick = first
        self.period = RECHECK_FIRST
        self.left = 0  # exploiting calls left before the next re-check
        self.samples: dict[Any, list[float]] = {}
        self.plan: list[Any] = _grouped(cands)
        self.step = 0
        self.warmup = WARMUP  # first calls, not recorded: they start threads and build caches

    def choose(self) -> Any:
        plan, step = self.plan, self.step
        if step < len(plan):
            return plan[step]
        if self.left > 0:
            self.left -= 1
            return self.pick
        self.samples = {}  # re-check: fresh samples of every candidate
        self.plan = _grouped(self.cands)
        self.step = 0
        return self.plan[0]

    def pin(self, cand: Any) -> None:
        """Use ``cand`` from now on, with no re-check (benchmarks and tests measure one path)."""
        self.plan, self.step, self.pick, self.left = [], 0, cand, 1 << 62

    def cost(self, cand: Any) -> float:
        """The median of ``cand``'s samples in this round (infinite when it has none)."""
        xs = sorted(self.samples.get(cand, ()))
        return xs[len(xs) // 2] if xs else _INF

    def record(self, cand: Any, cost: float) -> None:
        if self.warmup > 0:
            self.warmup -= 1
            return
        plan = self.plan
        step = self.step
        if step < len(plan) and plan[step] == cand:
            self.samples.setdefault(cand, []).append(cost)
            self.step = step = step + 1
            if step == len(plan):
                pick = min(self.cands, key=self.cost)
                self.period = min(self.period * 2, RECHECK_MAX) if pick == self.pick else RECHECK_FIRST
                self.pick = pick
                self.left = self.period


class RegionSite(_Chooser):
    """One ``parallel_for`` call site: chunk counts tried and chosen, and whether it is long."""

    __slots__ = ("long", "per_item")

    def __init__(self, most: int, finest: int | None = None) -> None:
        finest = max(most, finest or most)
        cands = {1, most}
        c = 2
        while c < most:
            cands.add(c)
            c *= 2
        for k in (2, 4):  # finer than one chunk per thread: a slow-waking worker delays less
            if most * k <= finest:
                cands.add(most * k)
        order = [most, *sorted(cands - {most}, reverse=True)]  # a site used once splits as asked
        super().__init__(order, most)
        self.long = True  # touches native limits until measured short
        self.per_item = 0.0  # ns per element when run inline (the last inline region), 0: not yet

    def record_region(self, n: int, ns: int, size: int) -> None:
        if n > 1:  # only split regions run lanes at once: only they can cap native pools
            self.long = ns >= NATIVE_MIN_NS
        else:
            self.per_item = ns / size
        self.record(n, ns / size)


POOL, INLINE = "pool", "inline"


class ForkSite(_Chooser):
    """One ``fork`` call site: batches of tasks in flight, timed per task while it chooses.

    While it exploits its choice (``left`` > 0) the pool counts a batch where nothing waits to be
    claimed, and times one task in 16 to keep ``task_ns`` and ``long`` current: the common case
    pays two attribute updates, not a lock and two clock reads. Those updates take no lock: two
    threads forking at once can lose one, which only moves the next re-check by a batch."""

    __slots__ = ("batch_mode", "done", "forks", "grace_ns", "inflight", "lock", "long", "start", "task_ns")

    def __init__(self) -> None:
        super().__init__([POOL, INLINE], POOL)
        self.lock = threading.Lock()
        self.task_ns = 0  # the last timed task's run time
        self.grace_ns = 100_000  # how long an inline task waits per task ahead: 2 x max(task_ns, 50 us)
        self.long = True  # its tasks may touch native limits (a field, not a property: read on every fork)
        self.forks = 0  # forks while exploiting (every 16th is timed)
        self.reset_batch()

    def reset_batch(self) -> None:
        self.lock = threading.Lock()
        self.inflight = 0
        self.done = 0
        self.start = 0
        self.batch_mode = POOL

    def note(self, ran_ns: int) -> None:
        """A sampled task of this site ran for ``ran_ns`` (while it exploits its choice)."""
        self.task_ns = ran_ns
        self.grace_ns = 2 * max(ran_ns, 50_000)
        self.long = ran_ns == 0 or ran_ns >= NATIVE_MIN_NS

    def begin(self, now: int) -> int:
        """A task is forked at this site while it chooses, and runs in its batch's mode: 0 for the pool, else (inline
        mode) the perf_counter_ns after which a worker may run it when its waiter has not: twice the
        site's task time for each task in flight, plus 1 ms.

        No Python function runs while ``lock`` is held (here or in ``end``): a thread that
        loses the GIL at a call inside it stalls every other thread forking at the site, and
        they stay in step (a lock convoy: 20-45 us per task with 8 threads forking, not 7)."""
        mode = self.choose() if self.inflight == 0 else None
        with self.lock:
            if self.inflight == 0:
                self.batch_mode = self.pick if mode is None else mode
                self.start = now
                self.done = 0
            self.inflight += 1
            if self.batch_mode == POOL:
                return 0
            ahead = self.inflight
        return now + self.grace_ns * ahead + 1_000_000

    def end(self, now: int, ran_ns: int) -> None:
        """A task of this site finished; a batch ends when none is in flight (or after 64)."""
        self.note(ran_ns)
        with self.lock:
            self.inflight -= 1
            self.done += 1
            if self.inflight > 0 and self.done < 64:
                return
            mode, cost = self.batch_mode, (now - self.start) / self.done
            self.start = now
            self.done = 0
            switch = self.inflight > 0
        if switch:
            self.inflight_switch()
        self.record(mode, cost)

    def inflight_switch(self) -> None:
        """A long batch (tasks always in flight) takes the next mode for the tasks forked next."""
        self.batch_mode = self.choose()
