"""Rules over the live evidence of a report (its ``live`` section): cgroup throttling since the
cgroup was created, the thread-stack budget against memory limits, and, for a process inspected
from outside, runnable threads against usable CPUs and idle pool threads that spin.

Like the other rules they read a typed :class:`~parinfo.diagnostics.model.Report` (its ``live``
section: machine classes and :class:`~parinfo.diagnostics.model.LiveSection`) and return Findings;
:data:`parinfo.diagnostics.process_rules.RULES` lists them with every other rule.
"""
from __future__ import annotations

import math

from parinfo.diagnostics.findings import Finding, Severity
from parinfo.diagnostics.model import Report
from parinfo.safe_text import plural

#: A cumulative ratio below this, or fewer throttled periods than MIN_THROTTLED, is not evidence.
THROTTLED_RATIO = 0.2
MIN_THROTTLED = 50
#: Thread stacks reserving this share of a limit start to matter (info); all of it fails (warning).
STACK_SHARE_INFO = 0.5


def _mib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def throttled(r: Report) -> list[Finding]:
    """The cgroup has been throttled in a large share of its CPU periods since its creation."""
    worst = None if r.live is None else r.live.throttling.worst
    if worst is None or worst.throttled < MIN_THROTTLED or worst.ratio < THROTTLED_RATIO:
        return []
    quota = float(worst.quota)
    fit = max(1, math.floor(quota))
    return [Finding(
        "throttled", Severity.WARNING,
        f"the cgroup {worst.cgroup} was throttled in {100 * worst.ratio:.0f}% of its CPU periods "
        f"since it was created ({worst.throttled} of {worst.periods}, "
        f"{worst.throttled_usec / 1e6:.1f} s held back) under a {quota:g}-CPU quota",
        "when the threads of a cgroup use up its quota early in a period, every one of them stops until "
        "the next period: latency spikes, and parallel code runs slower than with fewer threads",
        f"keep the busy threads of this cgroup to {fit} (parinfo apply container sets every pool from "
        f"the quota); parinfo watch --pid PID shows which pool runs when it happens",
    )]


def thread_stack_budget(r: Report) -> list[Finding]:
    """Threads x stack size against RLIMIT_DATA, RLIMIT_AS and the cgroup memory limit."""
    if r.live is None:
        return []
    b = r.live.stack_budget
    stack = b.thread_stack
    if stack is None or stack <= 0:
        return []
    out = []
    for limit in b.limits:
        threads, size = limit.threads, limit.bytes
        if threads is None or size is None or size <= 0:
            continue
        need = threads * stack
        share = need / size
        if share < STACK_SHARE_INFO:
            continue
        severity = Severity.WARNING if share >= 1 else Severity.INFO
        fit = max(1, size // stack)
        out.append(Finding(
            "thread-stack-budget", severity,
            f"{plural(threads, 'thread')} x {_mib(stack)} stacks = {_mib(need)}, {100 * share:.0f}% of "
            f"{limit.name} ({_mib(size)}, {limit.source})",
            "every thread reserves a whole stack: past a process limit thread creation fails "
            "(pthread_create: EAGAIN), and stacks that get used count against the cgroup's memory, "
            "where a pool sized for the host's cores gets the container killed",
            f"size the pools from the usable CPUs (parinfo apply container) or lower the stack "
            f"size (ulimit -s); at most {plural(fit, 'thread')} fit",
        ))
    return out


def runnable_above_usable(r: Report) -> list[Finding]:
    """Measured from outside: more threads wanting a CPU than there are usable CPUs."""
    tree = None if r.live is None else r.live.tree
    if tree is None or tree.runnable is None:
        return []
    runnable, usable = tree.runnable, r.machine.usable_cpus
    if runnable <= 1.25 * usable or runnable - usable < 1:
        return []
    procs = tree.processes
    return [Finding(
        "runnable-above-usable", Severity.WARNING,
        f"{plural(runnable, 'thread', '.1f')} wanted a CPU on average over {tree.seconds:g} s "
        f"({plural(procs, 'process')}) against {plural(usable, 'usable CPU')}",
        "threads beyond the usable CPUs queue for them and wait for each other at every barrier",
        f"size the pools of the whole tree to {plural(usable, 'thread')} in all (parinfo apply throughput, or "
        f"parinfo apply PROFILE --instances N to split the CPUs between processes)",
    )]



def idle_spin_throttled(r: Report) -> list[Finding]:
    """Measured from outside: pool threads of a runtime that spins when idle stayed runnable while
    the calling thread hardly ran (:mod:`parinfo.process.spin`); a warning when the cgroup's quota
    throttled it over the same window (the spin spends the quota the work needed), else info."""
    from parinfo.process.spin import spin_text

    spin = None if r.live is None or r.live.tree is None else r.live.tree.spin
    if spin is None:
        return []
    throttled = bool(spin.throttled)
    return [Finding(
        "idle-spin-throttled", Severity.WARNING if throttled else Severity.INFO,
        spin_text(spin),
        "idle pool threads that spin between regions stay on a CPU with nothing to do: under a CPU quota "
        "they spend the quota the calling thread needs, and the whole cgroup is throttled" if throttled else
        "idle pool threads that spin between regions stay on a CPU with nothing to do: CPU that other "
        "threads and processes could use, and under a CPU quota, quota spent on nothing",
        f"set {' and '.join(spin.fixes)} in the program's environment before it starts (or a profile's "
        f"wait_policy: passive, as parinfo apply container does)",
    )]
