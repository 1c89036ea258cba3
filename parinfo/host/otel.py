"""The OpenTelemetry points of one ``parinfo host`` scan (``host --otlp``).

Per process (each point carries ``process.pid``, ``process.executable.name`` and the cgroup it is
judged in): its threads, its CPU use over the interval and its native pools' counts; per cgroup:
the usable CPUs, runnable threads, threads at once, throttling and pressure, and the findings. A
value the scan could not read (a process's pools unknown, a CPU use not measured, pressure the
kernel gives no figures for) has no point: never a 0 in its place.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from parinfo.host.metrics import pool_counts
from parinfo.watching import otel_names as n
from parinfo.watching.otlp import Point, point

if TYPE_CHECKING:
    from parinfo.host.model import HostProcess, HostReport
    from parinfo.machine.pressure import CpuCounters


def _p(metric: n.OtelMetric, value: int | float, attributes: Mapping[str, str | int]) -> Point:
    return point(metric, "host", value, attributes)


def host_points(report: HostReport, counters: Mapping[str, CpuCounters]) -> list[Point]:
    """The points of ``report``, with the cumulative throttling counters the scan read (by cgroup row)."""
    out = [] if report.logical_cpus is None else [_p(n.LOGICAL_CPUS, report.logical_cpus, {})]
    for p in report.processes:
        out += _process_points(p)
    for c in report.cgroups:
        where = {n.CGROUP: c.path}
        out += [_p(n.USABLE, c.usable_cpus, where), _p(n.RUNNABLE, c.runnable_now, where),
                _p(n.AT_ONCE, c.threads_at_once, where), _p(n.AT_ONCE_PREDICTED, c.threads_predicted, where)]
        if c.path != "/" and not isinstance(c.pressure_some, str):  # a cgroup's own (v2) pressure only
            out.append(_p(n.PRESSURE, round(c.pressure_some / 100, 4), {n.PRESSURE_SCOPE: "cgroup", **where}))
    if not isinstance(report.pressure_some, str):
        out.append(_p(n.PRESSURE, round(report.pressure_some / 100, 4), {n.PRESSURE_SCOPE: "machine", n.CGROUP: "/"}))
    seen: set[str] = set()
    for key in sorted(counters):
        for level in counters[key].levels:
            if level.cgroup not in seen:  # an ancestor's quota binds several rows: one series
                seen.add(level.cgroup)
                where = {n.CGROUP: level.cgroup}
                out += [_p(n.THROTTLED_TIME, level.throttled_usec / 1e6, where),
                        _p(n.THROTTLED_PERIODS, level.throttled, where), _p(n.PERIODS, level.periods, where)]
    found = sorted({(f.id, str(f.severity), cgroup) for cgroup, f in report.findings()})  # a finding once per cgroup
    out += [_p(n.FINDINGS, 1, {n.FINDING_ID: i, n.FINDING_SEVERITY: s, n.CGROUP: c}) for i, s, c in found]
    return out


def _process_points(p: HostProcess) -> list[Point]:
    who: dict[str, str | int] = {n.PROCESS_PID: p.pid, n.PROCESS_EXECUTABLE_NAME: p.name, n.CGROUP: p.group}
    out = [_p(n.THREADS, p.threads, who)]
    if p.cpu_percent is not None:
        out.append(_p(n.CPU_UTILIZATION, round(p.cpu_percent / 100 / max(1, p.usable_cpus), 4), who))
    out += [_p(n.POOL_THREADS, threads, {**who, n.POOL_LIBRARY: library, n.COUNT_SOURCE: source})
            for (library, source), threads in sorted(pool_counts(p).items())]
    return out
