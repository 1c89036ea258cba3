"""Rules over the live evidence of a report (its ``live`` section): cgroup throttling since the
cgroup was created, the thread-stack budget against memory limits, and, for a process inspected
from outside, runnable threads against usable CPUs.

Like the other rules they read plain dictionaries (the ``--json`` payload) and return Findings;
:data:`parinfo.diagnostics.process_rules.RULES` lists them with every other rule.
"""
from __future__ import annotations

import math
from typing import Any

from parinfo.diagnostics.findings import Finding

#: A cumulative ratio below this, or fewer throttled periods than MIN_THROTTLED, is not evidence.
THROTTLED_RATIO = 0.2
MIN_THROTTLED = 50
#: Thread stacks reserving this share of a limit start to matter (info); all of it fails (warning).
STACK_SHARE_INFO = 0.5


def _live(s: dict[str, Any]) -> dict[str, Any]:
    return s.get("live") or {}


def _mib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def throttled(s: dict[str, Any]) -> list[Finding]:
    """The cgroup has been throttled in a large share of its CPU periods since its creation."""
    worst = (_live(s).get("throttling") or {}).get("worst")
    if not worst or worst.get("throttled", 0) < MIN_THROTTLED or worst.get("ratio", 0) < THROTTLED_RATIO:
        return []
    quota = float(worst["quota"])
    fit = max(1, math.floor(quota))
    return [Finding(
        "throttled", "warning",
        f"the cgroup {worst['cgroup']} was throttled in {100 * worst['ratio']:.0f}% of its CPU periods "
        f"since it was created ({worst['throttled']} of {worst['periods']}, "
        f"{worst['throttled_usec'] / 1e6:.1f} s held back) under a {quota:g}-CPU quota",
        "when the threads of a cgroup use up its quota early in a period, every one of them stops until "
        "the next period: latency spikes, and parallel code runs slower than with fewer threads",
        f"keep the busy threads of this cgroup to {fit} (parinfo apply container sets every pool from "
        f"the quota); parinfo watch --pid PID shows which pool runs when it happens",
    )]


def thread_stack_budget(s: dict[str, Any]) -> list[Finding]:
    """Threads x stack size against RLIMIT_DATA, RLIMIT_AS and the cgroup memory limit."""
    b = _live(s).get("stack_budget") or {}
    stack = b.get("thread_stack")
    if not isinstance(stack, int) or stack <= 0:
        return []
    out = []
    for limit in b.get("limits") or ():
        threads, size = limit.get("threads"), limit.get("bytes")
        if not isinstance(threads, int) or not isinstance(size, int) or size <= 0:
            continue
        need = threads * stack
        share = need / size
        if share < STACK_SHARE_INFO:
            continue
        severity = "warning" if share >= 1 else "info"
        fit = max(1, size // stack)
        out.append(Finding(
            "thread-stack-budget", severity,
            f"{threads} threads x {_mib(stack)} stacks = {_mib(need)}, {100 * share:.0f}% of "
            f"{limit['name']} ({_mib(size)}, {limit['source']})",
            "every thread reserves a whole stack: past a process limit thread creation fails "
            "(pthread_create: EAGAIN), and stacks that get used count against the cgroup's memory, "
            "where a pool sized for the host's cores gets the container killed",
            f"size the pools from the usable CPUs (parinfo apply container) or lower the stack "
            f"size (ulimit -s); at most {fit} threads fit",
        ))
    return out


def runnable_above_usable(s: dict[str, Any]) -> list[Finding]:
    """Measured from outside: more threads wanting a CPU than there are usable CPUs."""
    tree = _live(s).get("tree") or {}
    runnable, usable = tree.get("runnable"), (s.get("machine") or {}).get("usable_cpus")
    if not isinstance(runnable, (int, float)) or not isinstance(usable, int):
        return []
    if runnable <= 1.25 * usable or runnable - usable < 1:
        return []
    procs = tree.get("processes", 1)
    return [Finding(
        "runnable-above-usable", "warning",
        f"{runnable:.1f} threads wanted a CPU on average over {tree.get('seconds', 0):g} s "
        f"({procs} process{'es' if procs != 1 else ''}) against {usable} usable CPUs",
        "threads beyond the usable CPUs queue for them and wait for each other at every barrier",
        f"size the pools of the whole tree to {usable} threads in all (parinfo apply throughput, or "
        f"parinfo apply PROFILE --instances N to split the CPUs between processes)",
    )]

