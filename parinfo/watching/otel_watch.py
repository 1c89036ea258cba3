"""The OpenTelemetry points of one ``parinfo watch`` sample (``watch --otlp``).

A sample is what the printed sample says, over the same interval; the cumulative counters come
from the reading that ended it, the native pools and findings from the process's report
(:class:`~parinfo.watching.target_report.TargetReport`). What the sample does not know (pressure
the kernel gives no figures for, a container's CPU time that could not be read, a pool count that
could not be read) has no point: never a 0 in its place.
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from parinfo.host.metrics import IN_FORCE, LAUNCH_ENV
from parinfo.records.unknown import Unknown
from parinfo.watching import otel_names as n
from parinfo.watching.otlp import Point, point

if TYPE_CHECKING:
    from parinfo.diagnostics.model import Report
    from parinfo.watching.model import Sample
    from parinfo.watching.sample import Reading

def _p(metric: n.OtelMetric, value: int | float, **attributes: str | int) -> Point:
    return point(metric, "watch", value, {_KEYS[k]: v for k, v in attributes.items()})


_KEYS = {"pid": n.PROCESS_PID, "cgroup": n.CGROUP, "library": n.POOL_LIBRARY, "source": n.COUNT_SOURCE,
         "scope": n.PRESSURE_SCOPE, "id": n.FINDING_ID, "severity": n.FINDING_SEVERITY}


def watch_points(sample: Sample, reading: Reading, report: Report | None, children: bool) -> list[Point]:
    """The points of ``sample``, ended by ``reading``; ``report``: the watched process's (None: no
    pools or findings to send this time); ``children``: the sample sums a process tree."""
    out = [_p(n.USABLE, sample.usable_cpus), _p(n.RUNNABLE, sample.runnable)]
    per_pid = Counter(pid for pid, _ in reading.threads)
    out += [_p(n.THREADS, threads, pid=pid) for pid, threads in sorted(per_pid.items())]
    if sample.pid is not None and not children:
        out.append(_p(n.CPU_UTILIZATION, round(sample.cpu_percent / 100 / max(1, sample.usable_cpus), 4),
                      pid=sample.pid))
    if sample.pid is None:
        out.append(_p(n.CONTAINER_USAGE, round(sample.cpu_percent / 100, 4)))
        if isinstance(reading.usage_ns, int):
            out.append(_p(n.CONTAINER_TIME, reading.usage_ns / 1e9))
    for level in reading.counters.levels:
        out += [_p(n.THROTTLED_TIME, level.throttled_usec / 1e6, cgroup=level.cgroup),
                _p(n.THROTTLED_PERIODS, level.throttled, cgroup=level.cgroup),
                _p(n.PERIODS, level.periods, cgroup=level.cgroup)]
    for scope, value in (("machine", sample.pressure_some), ("cgroup", sample.pressure_cgroup_some)):
        if not isinstance(value, (str, Unknown)):
            out.append(_p(n.PRESSURE, round(value / 100, 4), scope=scope))
    if report is not None:
        out += _report_points(sample.pid, report)
    return out


def _report_points(pid: int | None, report: Report) -> list[Point]:
    """The pools (a watched process's only) and findings (the container's own only, without a pid)."""
    from parinfo.watching.metrics import CONTAINER_FINDINGS

    out = []
    if pid is not None:
        counts: dict[tuple[str, str], int] = {}
        for pool in report.pools:
            if isinstance(pool.num_threads, int):
                key, count = (pool.library, IN_FORCE), pool.num_threads
            elif isinstance(pool.launch_count, int):
                key, count = (pool.library, LAUNCH_ENV), pool.launch_count
            else:
                continue  # a count parinfo could not read has no point
            counts[key] = counts.get(key, 0) + count
        out += [_p(n.POOL_THREADS, threads, pid=pid, library=library, source=source)
                for (library, source), threads in sorted(counts.items())]
    found = sorted({(f.id, str(f.severity)) for f in report.findings if pid is not None or f.id in CONTAINER_FINDINGS})
    out += [_p(n.FINDINGS, 1, id=i, severity=s) for i, s in found]  # a finding once, however many rows it has
    return out
