"""`parinfo watch --serve`: the live evidence as Prometheus metrics, one sample per scrape.

A scrape takes one reading of the watched process (or container) and turns it into a sample
against the previous scrape's reading, as ``parinfo watch`` does between two intervals: so a scrape
costs one sample, never a sweep. The native pools and the findings come from the process's report,
which is re-read at most every ``report_every`` seconds (pools and counts change rarely; the
report reads the process's memory maps and environment). Counters are the kernel's cumulative ones,
so they only grow across scrapes. prometheus_client is imported here only (the ``metrics`` extra)
and by the collectors this module serves.

The address check (:mod:`parinfo.machine.checks`), the extra's import and the server (:func:`check_serve`,
:func:`serve`; what a scrape returns: :mod:`parinfo.watching.exposition`) serve ``parinfo host
--serve`` too, with its collector (:mod:`parinfo.host.metrics`).

Metric names and labels are part of parinfo's interface: docs/metrics.md lists them.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from parinfo.errors import UsageError
from parinfo.watching.target_report import TargetReport

if TYPE_CHECKING:
    from parinfo.machine.pod import PodIdentity
    from parinfo.watching.sample import Sampler

EXTRA_HINT = "pip install 'parinfo[metrics]'"
#: Findings about the container itself, the ones that hold without a process (watch without --pid).
CONTAINER_FINDINGS = ("throttled", "thread-stack-budget")


def prometheus() -> Any:
    """The prometheus_client module, or a UsageError that says how to install it."""
    try:
        import prometheus_client
    except ImportError:
        raise UsageError(f"--serve needs prometheus_client, which is not installed: {EXTRA_HINT}") from None
    return prometheus_client


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` -> (host, port); the host defaults to 127.0.0.1 (see
    :func:`parinfo.machine.checks.listen_address`)."""
    from parinfo.machine.checks import listen_address

    return listen_address(text, "--serve")


class WatchCollector:
    """A prometheus_client collector over one Sampler (one reading per scrape) and the target's
    report (re-read at most every ``report_every`` seconds)."""

    def __init__(self, sampler: Sampler, report_every: float = 30.0) -> None:
        self.sampler = sampler
        self.report_every = report_every
        self._lock = threading.Lock()  # scrapes may overlap: one reading at a time
        self._report = TargetReport(sampler.pid, report_every)
        self.sampler.sample()  # the first reading, so the first scrape already has an interval

    def exited(self) -> bool:
        """True once the watched process has exited: the server stops then (docs/watch.md)."""
        with self._lock:
            return self.sampler.exited()

    def collect(self) -> Iterator[Any]:
        """The metrics of one scrape; none once the watched process has exited (the scrape that finds
        it gone, and any before the server stops, get an empty page instead of a 500)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from parinfo.process.tasks import NotAProcess, ProcessGone

        with self._lock:
            if self.sampler.gone:
                return
            try:
                sample = self.sampler.sample()
                report = self._report.get()
            except (ProcessGone, NotAProcess):
                self.sampler.gone = True
                return
            reading = self.sampler.last
        pid = "" if self.sampler.pid is None else str(self.sampler.pid)

        yield GaugeMetricFamily("parinfo_usable_cpus", "CPUs the watched process may use at once "
                                "(affinity, cpuset and cgroup quota)", value=self.sampler.usable)
        pools = GaugeMetricFamily("parinfo_pool_threads", "Threads of each native pool library in the "
                                  "watched process, summed over its loaded copies (counts parinfo can read)",
                                  labels=["library", "pid"])
        if self.sampler.pid is not None:
            per_library: dict[str, int] = {}
            for pool in report.pools:
                if isinstance(pool.num_threads, int):
                    per_library[pool.library] = per_library.get(pool.library, 0) + pool.num_threads
            for library, threads in sorted(per_library.items()):
                pools.add_metric([library, pid], threads)
        yield pools
        if sample is not None:
            yield GaugeMetricFamily("parinfo_runnable_threads", "Threads running or waiting for a CPU, on "
                                    "average since the previous scrape", value=sample.runnable)
        seconds = CounterMetricFamily("parinfo_cpu_throttled_seconds", "Time the watched cgroup's threads "
                                      "were held back by its CPU quota (the kernel's cumulative count)",
                                      labels=["cgroup"])
        periods = CounterMetricFamily("parinfo_cpu_throttled_periods", "CPU periods in which the watched "
                                      "cgroup was throttled (the kernel's cumulative count)", labels=["cgroup"])
        if reading is not None:
            for level in reading.counters.levels:
                seconds.add_metric([level.cgroup], level.throttled_usec / 1e6)
                periods.add_metric([level.cgroup], level.throttled)
        yield seconds
        yield periods
        if sample is not None:
            pressure = GaugeMetricFamily("parinfo_cpu_pressure_some_ratio", "Share of the time since the "
                                         "previous scrape some task waited for a CPU", labels=["scope"])
            for scope, value in (("machine", sample.pressure_some), ("cgroup", sample.pressure_cgroup_some)):
                if not isinstance(value, str):
                    pressure.add_metric([scope], round(value / 100, 4))
            yield pressure
        findings = GaugeMetricFamily("parinfo_findings", "Findings parinfo makes about the watched process "
                                     "(1 while the finding holds)", labels=["id", "severity"])
        for f in report.findings:
            if self.sampler.pid is not None or f.id in CONTAINER_FINDINGS:
                findings.add_metric([f.id, f.severity], 1)
        yield findings
        yield from _container_families(self._report.pod)


def _container_families(pod: PodIdentity | None) -> Iterator[Any]:
    """cAdvisor's ``container_cpu_cfs_*`` counters of the watched pod's container and pod cgroups
    (:mod:`parinfo.watching.cadvisor`); empty families outside a pod."""
    from parinfo.watching.cadvisor import families, pod_series

    return families(pod_series("/", [] if pod is None else [pod]))


def check_serve(address: str) -> tuple[str, int]:
    """Refuse a bad ``--serve`` address or a missing extra (a UsageError each) before anything is
    read; return (host, port)."""
    where = parse_address(address)
    prometheus()
    return where


def serve(collector: Any, address: str) -> tuple[Any, str]:
    """Start serving ``collector``'s metrics (a prometheus_client collector: :class:`WatchCollector`,
    :class:`parinfo.host.metrics.HostCollector`) on ``address`` (HOST:PORT) in a background thread.

    Returns (the server, its URL); ``server.shutdown()`` stops it. A port in use or an address that
    cannot be bound is a UsageError.
    """
    from parinfo.machine.checks import shown
    from parinfo.watching.exposition import start

    prometheus()
    host, port = parse_address(address)
    try:
        server = start(collector, host, port)
    except OSError as exc:
        raise UsageError(f"--serve {shown(address)}: cannot listen on {shown(host)}:{port}: "
                         f"{shown(exc.strerror or str(exc), 120)}; pick a free port") from None
    where = f"[{host}]" if ":" in host else host
    return server, f"http://{shown(where)}:{port}/metrics"
