"""One line per sample that names the cause of lost CPU time and the fix, from the sample alone.

In order: throttling by a cgroup quota (the threads ran out of quota and were stopped), more
runnable threads than usable CPUs (they queue for CPUs), CPU pressure from outside the process,
else a plain summary. Thresholds are deliberately low-key: a few throttled periods in a second of
mostly idle time are not worth a verdict.
"""
from __future__ import annotations

import math

from parinfo.safe_text import plural
from parinfo.watching.model import GroupUse, Sample

THROTTLED_PERCENT = 5.0  # of periods, in the interval
QUEUED_RATIO = 1.25  # runnable threads per usable CPU
PRESSURE_PERCENT = 20.0


def _largest(sample: Sample) -> GroupUse | None:
    """The busiest thread group with more than one thread (the likely pool), else the busiest."""
    pools = [g for g in sample.groups if g.threads > 1 and g.cpu_percent > 0]
    busy = pools or [g for g in sample.groups if g.cpu_percent > 0]
    return max(busy, key=lambda g: (g.cpu_percent, g.threads), default=None)


def _pool_text(sample: Sample) -> str:
    g = _largest(sample)
    if g is None:
        return ""
    return f"; the largest pool is {g.name} ({plural(g.threads, 'thread')}, " \
           f"{g.cpu_percent:.0f}% CPU)"


def _runnable(sample: Sample) -> str:
    n = sample.runnable
    return f"{n:.1f} runnable thread{'s' if round(n, 1) != 1 else ''}"


def verdict(sample: Sample) -> str:
    """The verdict line for ``sample``."""
    t = sample.throttling
    if t is not None and t.throttled > 0 and t.percent_periods >= THROTTLED_PERCENT:
        fit = max(1, math.floor(t.quota))
        return (f"throttled in {t.percent_periods:.0f}% of periods ({t.throttled} of {t.periods}): "
                f"{_runnable(sample)} against a {t.quota:g}-CPU quota ({t.cgroup}){_pool_text(sample)}: "
                f"keep busy threads to {fit} (parinfo apply container)")
    usable = sample.usable_cpus
    if sample.runnable > QUEUED_RATIO * usable and sample.runnable - usable >= 1:
        who = "on the machine" if sample.pid is None else ""
        return (f"{_runnable(sample)}{' ' + who if who else ''} against "
                f"{plural(usable, 'usable CPU')}: threads queue for CPUs{_pool_text(sample)}: "
                f"lower the pool to {usable} (parinfo apply throughput)")
    for label, value in (("the machine", sample.pressure_some), ("the cgroup", sample.pressure_cgroup_some)):
        if isinstance(value, float) and value >= PRESSURE_PERCENT and sample.pid is not None \
                and sample.runnable <= usable:
            return (f"CPU pressure on {label}: some task waited for a CPU {value:.0f}% of the time while "
                    f"this process had {_runnable(sample)}: others compete for the CPUs "
                    f"(pin the process with taskset or a cpuset)")
    busy = sample.cpu_percent / 100
    return (f"ok: {busy:.1f} CPU{'s' if round(busy, 1) != 1 else ''} busy, {_runnable(sample)} "
            f"on {plural(usable, 'usable CPU')}"
            + (", no throttling" if t is not None else ""))
