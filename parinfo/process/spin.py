"""Idle pool threads that spin: evidence from two readings of a process's threads, and the knob that
stops each runtime from spinning.

A pool worker that spins between parallel regions never sleeps: over an interval it is on a CPU or
waiting for one (schedstat's two fields) the whole time. Under a CPU quota its CPU time is capped by
the quota (0.37 of a CPU under a 0.5-CPU quota, measured: bench/spin_quota.py), so "near 100% CPU"
is no test; "runnable the whole interval" is. A pool at work is runnable throughout too, but OpenMP's
calling thread takes part in each region, so a working pool's threads and its calling thread get
about the same CPU time; a spinning one's get more than the calling thread, which also sleeps or runs
Python between regions. So the evidence: threads other than the calling one runnable at least
:data:`RUNNABLE_PERCENT` of the interval with at least :data:`CPU_RATIO` times the calling thread's
CPU time. The CPU each spent beyond the calling thread's is counted as spent idle (a lower bound:
the calling thread's own Python time between regions is counted as work).

A spinning thread is never in a system call, so its owner cannot be read from its stack pointer:
:func:`with_owners` finds it through its C library thread block
(:mod:`parinfo.process.thread_blocks`) and keeps the threads of runtimes whose idle threads spin
(the registry's ``idle_wait``): a Python thread running a loop while the main thread sleeps looks
the same from its times alone. :func:`with_throttling` joins the cgroup's throttling over the same
window; :func:`spin_in` does the three for one process, as ``watch --pid`` and ``show --pid`` ask.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import field
from typing import TYPE_CHECKING

from parinfo.process import libraries as reg
from parinfo.process.tasks import ThreadStat
from parinfo.records.convert import OMIT_NONE
from parinfo.records.record import record
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.machine.pressure import CpuCounters
    from parinfo.machine.procfs import Proc

#: A worker runnable (on a CPU or waiting for one) this share of the interval hardly slept in it (the
#: default libgomp spin, about 8 ms after each region here, kept one runnable 94% with 5 ms pauses).
RUNNABLE_PERCENT = 90.0
#: A worker of a pool at work gets about its calling thread's CPU time; a spinning one, more than this
#: times it (measured under a 0.5-CPU quota: 1.7 to 2.9 times for OpenBLAS, 2.7 to 27 for OpenMP).
CPU_RATIO = 1.5

@record(frozen=True)
class SpinningThread:
    """One thread that never slept over the interval: its CPU use and its time runnable, in percent
    of the interval (100 = one CPU for the whole interval)."""

    tid: int
    cpu_percent: float
    runnable_percent: float
    owner: str = ""  # the library its outermost frames are in ("libgomp (scikit-learn)"), once read


@record(frozen=True)
class SpinEvidence:
    """Threads of one process that kept running while its calling thread did not, over ``seconds``;
    ``idle_cpu_percent``: the CPU they spent beyond the calling thread's, summed (percent of one CPU)."""

    seconds: float
    caller: int
    caller_cpu_percent: float
    caller_runnable_percent: float
    threads: tuple[SpinningThread, ...]
    idle_cpu_percent: float
    #: the runtimes (registry names) that own the spinning threads, and for each the setting that stops it
    runtimes: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()
    #: the cgroup level that throttled most over the same window: periods, throttled periods, time held back
    throttled_cgroup: str | None = field(default=None, metadata=OMIT_NONE)
    quota: float | None = field(default=None, metadata=OMIT_NONE)
    periods: int | None = field(default=None, metadata=OMIT_NONE)
    throttled: int | None = field(default=None, metadata=OMIT_NONE)
    throttled_usec: int | None = field(default=None, metadata=OMIT_NONE)


def _percents(before: ThreadStat, after: ThreadStat, seconds: float) -> tuple[float, float] | None:
    """(CPU, runnable) percent of ``seconds`` between two stats of one thread; None when its wait
    is not kept (no schedstat) or the tid names a new thread (its CPU time went back)."""
    if after.cpu_ns < before.cpu_ns or after.wait_ns is None or before.wait_ns is None:
        return None
    cpu = (after.cpu_ns - before.cpu_ns) / 1e9 / seconds * 100
    wait = max(0, after.wait_ns - before.wait_ns) / 1e9 / seconds * 100
    return cpu, cpu + wait


def idle_spin(before: Sequence[ThreadStat], after: Sequence[ThreadStat], caller: int,
              seconds: float) -> SpinEvidence | None:
    """The spin evidence of one process between two readings of its threads ``seconds`` apart
    (:func:`parinfo.process.tasks.thread_stats`), ``caller`` the tid of the thread that runs its
    parallel regions (its main thread); None when no thread spun or the facts are not there."""
    if seconds <= 0:
        return None
    first = {t.tid: t for t in before}
    now = {t.tid: t for t in after}
    if caller not in first or caller not in now:
        return None
    mine = _percents(first[caller], now[caller], seconds)
    if mine is None:
        return None
    spinning = []
    for tid, t in sorted(now.items()):
        prev = first.get(tid)
        use = None if tid == caller or prev is None else _percents(prev, t, seconds)
        if use is not None and use[1] >= RUNNABLE_PERCENT and use[0] >= CPU_RATIO * mine[0]:
            spinning.append(SpinningThread(tid, round(use[0], 1), round(min(use[1], 100.0), 1)))
    if not spinning:
        return None
    idle = sum(s.cpu_percent - mine[0] for s in spinning)
    return SpinEvidence(round(seconds, 3), caller, round(mine[0], 1), round(mine[1], 1), tuple(spinning),
                        round(idle, 1))


def _family(owner: str) -> str | None:
    """The registry name of a runtime whose idle threads spin, from a thread owner ("libgomp (scikit-learn)")."""
    from parinfo.process.stack_words import owner_library

    rec = reg.find(owner_library(owner))
    return None if rec is None or rec.idle_wait is None else rec.name


def with_owners(evidence: SpinEvidence, proc: Proc, tids: Collection[int]) -> SpinEvidence | None:
    """``evidence`` with each spinning thread's owner read, keeping the threads of runtimes that spin
    when idle (a Python thread in a loop is work, not spin); None when none is left or none could be
    placed. ``tids``: every thread of ``proc`` now. ProcessGone when the process ends."""
    from parinfo.process.thread_blocks import owners_of_running

    owners = owners_of_running(proc, [t.tid for t in evidence.threads], tids)
    kept = []
    for t in evidence.threads:
        owner = owners.get(t.tid)
        if isinstance(owner, str) and _family(owner) is not None:
            kept.append(dataclasses.replace(t, owner=owner))
    if not kept:
        return None
    runtimes = tuple(dict.fromkeys(str(_family(t.owner)) for t in kept))
    fixes = tuple(w.fix for name in runtimes if (w := reg.library(name).idle_wait) is not None)
    idle = sum(t.cpu_percent - evidence.caller_cpu_percent for t in kept)
    return dataclasses.replace(evidence, threads=tuple(kept), runtimes=runtimes, fixes=fixes,
                               idle_cpu_percent=round(idle, 1))


def with_throttling(evidence: SpinEvidence, before: CpuCounters, after: CpuCounters) -> SpinEvidence:
    """``evidence`` with the throttling of its cgroup over the same window (the level that throttled
    most), where a quota applies and both readings have it."""
    t = after.since(before)
    if t is None:
        return evidence
    return dataclasses.replace(evidence, throttled_cgroup=t.cgroup, quota=t.quota, periods=t.periods,
                               throttled=t.throttled, throttled_usec=t.throttled_usec)


def spin_in(proc: Proc, before: Sequence[ThreadStat], after: Sequence[ThreadStat], seconds: float,
            counters: tuple[CpuCounters, CpuCounters]) -> SpinEvidence | None:
    """The spin evidence of process ``proc`` between two readings of its threads ``seconds`` apart, its
    main thread the caller: :func:`idle_spin`, then :func:`with_owners`, then :func:`with_throttling`
    over ``counters`` (the cgroup's at both readings); None when nothing spun, or the process ended or
    may not be read meanwhile."""
    from parinfo.process.tasks import NoAccess, ProcessGone

    pid = proc.pid or 0
    found = idle_spin(before, after, pid, seconds)
    if found is None:
        return None
    try:
        found = with_owners(found, proc, [t.tid for t in after])
    except (ProcessGone, NoAccess):
        return None
    return None if found is None else with_throttling(found, *counters)
def spin_text(spin: SpinEvidence) -> str:
    """What the spin evidence of one interval says, with the throttling of the same interval."""
    threads = spin.threads
    who = " or ".join(spin.runtimes)
    least = min(t.runnable_percent for t in threads)
    text = (f"{plural(len(threads), who + ' thread')} stayed runnable (at least {least:.0f}% of {spin.seconds:g} s) "
            f"while the calling thread ran {spin.caller_cpu_percent:.0f}% CPU: {spin.idle_cpu_percent:.0f}% of a "
            f"CPU spent spinning with no work")
    if spin.throttled and spin.periods:
        held = (spin.throttled_usec or 0) / 1e6
        text += (f"; the {spin.quota:g}-CPU quota throttled {spin.throttled} of {spin.periods} periods "
                 f"({held:.1f} s held back)")
    return text
