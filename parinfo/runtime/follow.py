"""Follow the budget: re-read the usable CPUs while the runtime is in use, and let the counts
nobody chose follow them.

A quota can change under a running process (Kubernetes resizes a pod's CPU limit in place; an
operator writes ``cpu.max``), and so can the affinity and the cpuset. The runtime's paths that
already run (entering ``parallel_for`` and ``fork``) compare the clock with
:attr:`BudgetFollower.due_ns` and, at most once a second, re-read affinity, cpuset and quota
(``machine_facts``, about 0.3 ms); ``parinfo.refresh()`` re-reads at once. No thread of its own.
On a region's adaptive path the comparison reuses the timestamp the path takes anyway, so it costs
one attribute read there; elsewhere one clock read.

When the usable CPUs changed, the counts nobody chose follow them (as Go's runtime does for
GOMAXPROCS until the program sets it):

* parinfo's intra-op default (usable physical cores), and its inter-op default while that pool has
  not started (a started pool keeps its size: the set-once rule); the intra-op pool shrinks at the
  next region and grows as regions need it;
* the native libraries' own defaults, sized from the CPUs when they loaded: each loaded pool (and
  torch's intra-op count) whose library read no count variable and whose count is still the one it
  sized for itself, or the one this module last gave it, gets its record's default rule on the new
  facts, at most the usable CPUs (through the runtime's push, so ``process/setter`` sets it);
* the lane budget shares the new usable CPUs.

Each re-read also compares what an in-place resize rewrites (:mod:`parinfo.machine.resize`: quota,
cpuset, affinity, and in a Kubernetes pod the request and the container's and pod's limits); an
entry of ``changes`` says what changed, from what to what (``resized``), beside what followed. A
changed request alone is said and moves nothing: no default count comes from a request.

Counts set by a call, a profile or a variable stay as they are (a pool found at another count than
the one expected was set by someone: it is never followed again). ``PARINFO_FOLLOW_QUOTA=0`` turns
following off.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from parinfo.machine.topology import REREAD_S
from parinfo.process import libraries as reg
from parinfo.process.defaults import NO_FACTS
from parinfo.process.interpreter import watch_gil_warning
from parinfo.process.setter import TORCH
from parinfo.process.variables import read_setting
from parinfo.records.source import PARINFO_DEFAULT, Source, clock, followed_default, variable
from parinfo.runtime.native import NativeLimits
from parinfo.runtime.settings import RuntimeSettings, read_facts
from parinfo.runtime.snapshot import Follow, FollowChange

if TYPE_CHECKING:
    from parinfo.machine.resize import CpuBudget
    from parinfo.machine.topology import MachineFacts

#: Seconds between two re-reads on the runtime's paths (``refresh()`` re-reads at once).
INTERVAL_S = REREAD_S
#: When the calling thread runs inside a lane (its per-thread counts carry the budget's cap), the
#: comparison waits for a thread outside one, this much later.
RETRY_S = 0.05
_INTERVAL_NS = int(INTERVAL_S * 1e9)
_RETRY_NS = int(RETRY_S * 1e9)

_FOLLOW_VAR = reg.role_var("follow")
_NEVER = 1 << 63  # an int, as perf_counter_ns is: the comparison stays int against int

#: (count, source, {record name: count or None}) -> None: how the follower pushes defaults.
Push = Callable[[int, Source, "dict[str, int | None]"], None]


def _enabled() -> tuple[bool, Source]:
    """(on, source) from PARINFO_FOLLOW_QUOTA: on unless it says off (0, false, no, off); an
    invalid value is passed over, and said so."""
    setting = read_setting(_FOLLOW_VAR, os.environ)
    if setting.value is None:
        return True, setting.source(_FOLLOW_VAR)
    return bool(setting.value), variable(_FOLLOW_VAR, setting.raw)


def _followable() -> tuple[reg.Library, ...]:
    """The records whose count the runtime's push sets: native pools and torch."""
    return tuple(r for r in reg.records() if r.set_by_threadpoolctl or r.kind is reg.LibraryKind.FRAMEWORK)


def _budget(facts: MachineFacts) -> tuple[Any, ...]:
    """What the followed counts depend on: usable CPUs and cores, and the affinity."""
    return facts.usable_cpus, facts.usable_physical_cores, facts.affinity


def _default_count(record: reg.Library, facts: MachineFacts | None, cap: int | None) -> int | None:
    """``record``'s own default on ``facts``, at most ``cap`` (None: no rule, or no facts)."""
    if facts is None or record.default is None:
        return None
    try:
        n, _ = record.default(facts, NO_FACTS)
    except Exception:  # a rule that needs what only the loaded module can say
        return None
    if not isinstance(n, int) or n < 1:
        return None
    return n if cap is None else max(1, min(n, cap))


class BudgetFollower:
    """The re-read clock and what following the usable CPUs did; one per process (``Runtime.follow``)."""

    def __init__(self, settings: RuntimeSettings, limits: NativeLimits, push: Push) -> None:
        self.settings = settings
        self.limits = limits
        self._push = push
        self._lock = threading.Lock()
        #: perf_counter_ns of the next re-read on the runtime's paths (0: at the first use; _NEVER: off)
        self.due_ns = 0
        self.enabled: bool | None = None  # read from PARINFO_FOLLOW_QUOTA at first use
        self.enabled_source = PARINFO_DEFAULT
        self.rereads = 0
        self.changes: list[FollowChange] = []  # the re-reads that changed the usable CPUs (last 8)
        self.expected: dict[str, int] = {}  # pool path (or torch) -> the count following last gave it
        self.chosen: dict[str, str] = {}  # pool path (or torch) -> why it is not followed
        self.usable: int | None = None
        self.budget: CpuBudget | None = None  # the request, limits and cpuset last read

    def _switch(self) -> bool:
        if self.enabled is None:  # the runtime's first use
            watch_gil_warning()  # a module imported from now on that turns the GIL back on is named
            self.enabled, self.enabled_source = _enabled()
            if not self.enabled:
                self.due_ns = _NEVER
        return self.enabled

    def check(self) -> None:
        """On the runtime's paths, once ``due_ns``: re-read unless another thread is doing it."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._switch():
                self._reread(time.perf_counter_ns())
        finally:
            self._lock.release()

    def refresh(self) -> Follow:
        """Re-read affinity, cpuset and quota now and follow them (``parinfo.refresh()``)."""
        with self._lock:
            if self._switch():
                self._reread(time.perf_counter_ns(), force=True)
        return self.state()

    def _reread(self, now_ns: int, force: bool = False) -> None:
        if self.limits.thread.depth and not force:
            # this thread's per-thread counts carry the budget's cap: compare from another thread
            self.due_ns = now_ns + _RETRY_NS
            return
        self.due_ns = now_ns + _INTERVAL_NS
        settings = self.settings
        before = settings.machine()  # read at the runtime's first use: the baseline
        old = settings.facts
        facts = read_facts()
        self.rereads += 1
        if facts is None:
            return
        self.usable = int(facts.usable_cpus)
        what = self._resized(old, facts)
        if old is not None and _budget(old) == _budget(facts):
            if what:  # a request, or a quota the rounding hides: said, and no count moves
                self._record(time.time(), before[1], [], what)
            return
        at = time.time()
        counts = settings.follow_machine(facts, at)
        self.limits.set_usable(self.usable)
        libraries = self._follow_libraries(old, facts, at)
        self._record(at, before[1], counts + libraries, what)

    def _record(self, at: float, before: int, counts: list[str], what: list[str]) -> None:
        self.changes = [*self.changes[-7:], FollowChange(clock(at), [before, self.usable or before], counts,
                                                         what or None)]

    def _resized(self, old: MachineFacts | None, facts: MachineFacts) -> list[str]:
        """What a resize changed since the last re-read (quota, cpuset, affinity; in a pod its
        request and limits), from what to what; the first re-read takes the baseline."""
        from parinfo.machine.resize import budget_of, resized  # at the first re-read, not at import

        try:
            budget = budget_of(facts.quota, facts.cpuset, facts.cgroup_path, facts.affinity)
        except Exception:  # an odd cgroup tree must not stop the runtime
            return []
        last = self.budget
        if last is None and old is not None:
            last = replace(budget, quota=old.quota, cpuset=old.cpuset, affinity=old.affinity)
        self.budget = budget
        return [] if last is None else resized(last, budget)

    def _follow_libraries(self, old: MachineFacts | None, new: MachineFacts, at: float) -> list[str]:
        """Push the libraries' defaults on ``new`` into the pools nobody chose; what changed."""
        limits = self.limits
        if limits.pushed is not None and not limits.follow_push:
            return []  # a call or a profile set the native counts: they stay
        usable = self.usable
        by_library: dict[str, int | None] = {}
        for record in _followable():
            if any(var in os.environ for var in record.count_vars):
                by_library[record.name] = None  # a variable chose it
            else:
                by_library[record.name] = _default_count(record, new, usable)
        per_thread, process = limits.pools()
        pools = (*process, *per_thread)
        for pool in pools:
            self._judge(pool.path, pool.name, pool.record, limits.count_before_cap(pool), old, by_library)
        torch = reg.family(reg.Torch)
        torch_loaded = torch.is_loaded()
        if torch_loaded:
            self._judge(TORCH, "torch intra-op", torch, limits.torch_before_cap(), old, by_library)
        if all(n is None for n in by_library.values()):
            return []
        self._push(self.settings.intra()[0], followed_default("usable CPUs", at), by_library)
        changed = []
        for key, label, name in [*((p.path, p.name, p.record.name) for p in pools),
                                 *([(TORCH, "torch intra-op", TORCH)] if torch_loaded else [])]:
            n = by_library.get(name)
            if n is not None and key not in self.chosen:
                if self.expected.get(key) != n:
                    changed.append(f"{label} -> {n}")
                self.expected[key] = n
        return changed

    def _judge(self, key: str, label: str, record: reg.Library, now: int | None, old: MachineFacts | None,
               by_library: dict[str, int | None]) -> None:
        """Leave ``record``'s pools alone (its entry None) when someone set ``key``'s count: it is
        neither the count following last gave it nor the library's own default."""
        if by_library.get(record.name) is None:
            return
        if key not in self.chosen:
            nobody = {self.expected.get(key), _default_count(record, old, None)}
            if self.limits.follow_push:  # loaded after the last follow: the push gave it this
                nobody.add(self.limits.by_library.get(record.name, self.limits.pushed))
            if now is not None and now in nobody:
                return
            self.chosen[key] = (f"{label} runs {now}, which nobody's default gives: set by a call"
                                if now is not None else f"{label}: its count cannot be read")
        by_library[record.name] = None

    def state(self) -> Follow:
        """What following did: on or off and why, the usable CPUs last read, the re-reads that
        changed them, and the counts it leaves alone."""
        return Follow(self.enabled is not False, self.enabled_source, INTERVAL_S, self.rereads, self.usable,
                      list(self.changes), dict(self.chosen))

    def after_fork_in_child(self) -> None:
        """A fresh lock in a forked child; what was learned carries over."""
        self._lock = threading.Lock()
