"""`parinfo host --serve`: the host scan as Prometheus metrics, one scan per scrape.

The metric names are those of ``parinfo watch --serve`` (:mod:`parinfo.watching.metrics`, which
also owns the address, the server and the import of prometheus_client), so the alert rules of
docs/metrics.md read both; host mode adds a ``cgroup`` label to the per-cgroup series and
``pid``/``name``/``cgroup`` to the per-process ones. One :class:`~parinfo.host.scanner.Scanner`
serves every scrape: each scrape is one warm scan, counted against the previous scrape's, and the
throttling counters are the kernel's cumulative ones (monotonic across scrapes).
"""
from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parinfo.host.model import HostProcess, HostReport
    from parinfo.host.scanner import Scanner
    from parinfo.machine.pressure import CpuCounters

#: The ``source`` label of a pool count: read from the process's memory, read inside it (``--attach``), or
#: asked for by its launch environment.
IN_FORCE, ATTACHED, LAUNCH_ENV = "memory", "attached", "launch-env"


def pool_counts(p: HostProcess) -> dict[tuple[str, str], int]:
    """{(library, source): threads} of one process, summed over the loaded copies of a library whose
    count is known (as ``watch --serve`` sums them); pools of unknown count are left out."""
    out: dict[tuple[str, str], int] = {}
    for pool in p.pools:
        if pool.count is not None:
            key = (pool.library, ATTACHED if pool.attached else IN_FORCE if pool.in_force else LAUNCH_ENV)
            out[key] = out.get(key, 0) + pool.count
    return out


class HostCollector:
    """A prometheus_client collector over one Scanner: a scrape is one scan of the processes in the
    scanner's scope, judged per cgroup."""

    def __init__(self, scanner: Scanner) -> None:
        self.scanner = scanner
        self._lock = threading.Lock()  # scrapes may overlap: one scan at a time
        self.scanner.scan(attach=False)  # the first reading, so the first scrape already has an interval

    def collect(self) -> Iterator[Any]:
        with self._lock:
            report = self.scanner.scan()
            counters = self.scanner.counters
            resizes = self.scanner.resizes.counts()
        yield from _families(report, counters)
        yield from _resize_families(report, resizes)
        yield from _container_families(report)


def _container_families(report: HostReport) -> Iterator[Any]:
    """The cAdvisor-compatible throttling counters of the pods' containers (:mod:`parinfo.watching.cadvisor`)."""
    from parinfo.watching.cadvisor import families, pod_series

    return families(pod_series("/", (p.pod for p in report.processes if p.pod is not None)))


def _families(report: HostReport, counters: Mapping[str, CpuCounters]) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    usable = GaugeMetricFamily("parinfo_usable_cpus", "CPUs the processes of each cgroup may use at once "
                               "(cpuset and CPU quota of the cgroup whose limit binds them)", labels=["cgroup"])
    runnable = GaugeMetricFamily("parinfo_runnable_threads", "Threads of each cgroup's processes running or "
                                 "waiting for a CPU at the scrape", labels=["cgroup"])
    at_once = GaugeMetricFamily("parinfo_threads_at_once", "Threads each cgroup's processes can run at once: "
                                "widest native pool in force x outer threads, summed (what host-oversubscribed "
                                "judges; counts predicted from launch environments are not in it)", labels=["cgroup"])
    predicted = GaugeMetricFamily("parinfo_threads_at_once_predicted", "The same sum if the counts predicted "
                                  "from the processes' launch environments hold (a prediction, not a reading)",
                                  labels=["cgroup"])
    for c in report.cgroups:
        usable.add_metric([c.path], c.usable_cpus)
        runnable.add_metric([c.path], c.runnable_now)
        at_once.add_metric([c.path], c.threads_at_once)
        predicted.add_metric([c.path], c.threads_predicted)
    yield usable

    pools = GaugeMetricFamily("parinfo_pool_threads", "Threads of each native pool library in each process, "
                              "summed over its loaded copies; source: memory (in force), attached (in force, "
                              "read inside the process) or launch-env (what its launch environment asks for)",
                              labels=["library", "pid", "name", "cgroup", "source"])
    for p in report.processes:
        for (library, source), threads in sorted(pool_counts(p).items()):
            pools.add_metric([library, str(p.pid), p.name, p.group, source], threads)
    yield pools
    yield runnable
    yield at_once
    yield predicted

    seconds = CounterMetricFamily("parinfo_cpu_throttled_seconds", "Time each cgroup's threads were held back "
                                  "by its CPU quota (the kernel's cumulative count)", labels=["cgroup"])
    periods = CounterMetricFamily("parinfo_cpu_throttled_periods", "CPU periods in which each cgroup was "
                                  "throttled (the kernel's cumulative count)", labels=["cgroup"])
    seen: set[str] = set()
    for key in sorted(counters):
        for level in counters[key].levels:
            if level.cgroup not in seen:  # an ancestor's quota binds several rows: one series
                seen.add(level.cgroup)
                seconds.add_metric([level.cgroup], level.throttled_usec / 1e6)
                periods.add_metric([level.cgroup], level.throttled)
    yield seconds
    yield periods

    pressure = GaugeMetricFamily("parinfo_cpu_pressure_some_ratio", "Share of the time since the previous "
                                 "scrape some task waited for a CPU, on the machine and in each cgroup",
                                 labels=["scope", "cgroup"])
    if not isinstance(report.pressure_some, str):
        pressure.add_metric(["machine", ""], round(report.pressure_some / 100, 4))
    for c in report.cgroups:
        if c.path != "/" and not isinstance(c.pressure_some, str):  # a cgroup's own (v2) pressure only
            pressure.add_metric(["cgroup", c.path], round(c.pressure_some / 100, 4))
    yield pressure

    findings = GaugeMetricFamily("parinfo_findings", "Findings parinfo makes about each cgroup's processes "
                                 "(1 while the finding holds)", labels=["id", "severity", "cgroup"])
    for where, f in report.findings():
        findings.add_metric([f.id, f.severity, where], 1)
    yield findings


def _resize_families(report: HostReport, counts: Mapping[str, int]) -> Iterator[Any]:
    """The in-place resizes seen per cgroup (:mod:`parinfo.host.resizes`): how many, and the values
    after the last one, in CPUs (a value not set, or not read, has no sample)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    total = CounterMetricFamily("parinfo_cgroup_resizes", "In-place resizes (a changed CPU limit, request or "
                                "cpuset) seen between scans, per cgroup as /proc/PID/cgroup names it",
                                labels=["cgroup"])
    for cgroup in sorted(counts):
        total.add_metric([cgroup], counts[cgroup])
    yield total
    after = GaugeMetricFamily("parinfo_cgroup_resized_cpus", "Each resized cgroup's values after its last "
                              "resize, in CPUs: usable, limit (the quota that binds), request, cpuset",
                              labels=["cgroup", "value"])
    for r in report.resizes:
        values = {"usable": r.usable_cpus[-1] if r.usable_cpus else None, "limit": r.limit,
                  "request": None if r.request_millicores is None else r.request_millicores / 1000,
                  "cpuset": r.cpus}
        for name, value in values.items():
            if value is not None:
                after.add_metric([r.cgroup, name], value)
    yield after
