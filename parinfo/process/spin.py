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

A spinning thread is never in a system call, so its owner cannot be read from its stack
(:mod:`parinfo.process.thread_owners` places it only while it waits): the runtime is named from
the runtimes the process has loaded, with :func:`spin_knobs`.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from parinfo.process.tasks import ThreadStat
from parinfo.records.record import record

#: A worker runnable (on a CPU or waiting for one) this share of the interval hardly slept in it (the
#: default libgomp spin, about 8 ms after each region here, kept one runnable 94% with 5 ms pauses).
RUNNABLE_PERCENT = 90.0
#: A worker of a pool at work gets about its calling thread's CPU time; a spinning one, more than this
#: times it (measured under a 0.5-CPU quota: 1.7 to 2.9 times for OpenBLAS, 2.7 to 27 for OpenMP).
CPU_RATIO = 1.5

#: Runtime (registry name) -> the setting that makes its idle threads sleep at once.
KNOBS: dict[str, str] = {
    "libgomp": "OMP_WAIT_POLICY=passive (or GOMP_SPINCOUNT=0)",
    "libiomp": "KMP_BLOCKTIME=0 (or OMP_WAIT_POLICY=passive)",
    "libomp": "KMP_BLOCKTIME=0 (or OMP_WAIT_POLICY=passive)",
    "openblas": "OPENBLAS_THREAD_TIMEOUT=4 (its threads spin 2^4 cycles, not 2^28, before they sleep)",
}


@record(frozen=True)
class SpinningThread:
    """One thread that never slept over the interval: its CPU use and its time runnable, in percent
    of the interval (100 = one CPU for the whole interval)."""

    tid: int
    cpu_percent: float
    runnable_percent: float


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


def spin_knobs(runtimes: Iterable[str]) -> list[tuple[str, str]]:
    """(runtime, knob) for each runtime of ``runtimes`` (registry names, e.g. a process's pools) whose
    idle threads can spin, in the order given, each once."""
    return [(name, KNOBS[name]) for name in dict.fromkeys(runtimes) if name in KNOBS]
