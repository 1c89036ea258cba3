"""One line per sample that names the cause of lost CPU time and the fix, from the sample alone.

In order: idle pool threads spinning while the quota throttles (the runtime and the setting that
makes its threads sleep), throttling by a cgroup quota (the threads ran out of quota and were stopped; an interval
with no period of its own yet is judged from the counters since the cgroup began), more runnable
threads than usable CPUs (they queue for CPUs: by a margin, or at all under CPU pressure), CPU
pressure from outside the process, else a plain summary. Thresholds are deliberately low-key: a
few throttled periods in a second of mostly idle time are not worth a verdict.
"""
from __future__ import annotations

import math

from parinfo.process.spin import spin_text
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


def _throttled(sample: Sample, percent: float, throttled: int, periods: int, quota: float, cgroup: str,
               when: str = "") -> str:
    fit = max(1, math.floor(quota))
    return (f"throttled in {percent:.0f}% of periods ({throttled} of {periods}{when}): "
            f"{_runnable(sample)} against a {quota:g}-CPU quota ({cgroup}){_pool_text(sample)}: "
            f"keep busy threads to {fit} (parinfo apply container)")


def _pressure(sample: Sample) -> float:
    """The highest CPU pressure of the sample (0 when none was read)."""
    return max((v for v in (sample.pressure_some, sample.pressure_cgroup_some) if isinstance(v, float)), default=0.0)


def verdict(sample: Sample) -> str:
    """The verdict line for ``sample``. An interval without throttling figures of its own (its first
    periods not yet read) is judged from the cgroup's counters since it began, never taken for "ok"."""
    t, since, spin = sample.throttling, sample.throttling_since_start, sample.spin
    if spin is not None and spin.throttled:
        return f"idle spin: {spin_text(spin)}: set {' and '.join(spin.fixes)} before the program starts"
    if t is not None and t.throttled > 0 and t.percent_periods >= THROTTLED_PERCENT:
        return _throttled(sample, t.percent_periods, t.throttled, t.periods, t.quota, t.cgroup)
    if since is not None and since.throttled > 0 and 100 * since.ratio >= THROTTLED_PERCENT:
        return _throttled(sample, 100 * since.ratio, since.throttled, since.periods, since.quota, since.cgroup,
                          " since the cgroup began; none of this interval read yet")
    usable = sample.usable_cpus
    queued = sample.runnable > QUEUED_RATIO * usable and sample.runnable - usable >= 1
    if queued or (sample.runnable > usable and _pressure(sample) >= PRESSURE_PERCENT):
        who = "in the cgroup" if sample.pid is None else ""
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
    unread = "" if since is None else (f"; no period of this interval read yet: {since.throttled} of "
                                       f"{since.periods} periods throttled since the cgroup began")
    return (f"ok: {busy:.1f} CPU{'s' if round(busy, 1) != 1 else ''} busy, {_runnable(sample)} "
            f"on {plural(usable, 'usable CPU')}"
            + (", no throttling" if t is not None and since is None else "") + unread)
