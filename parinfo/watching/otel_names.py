"""The OpenTelemetry names parinfo exports (``watch --otlp``, ``host --otlp``): the one place they are spelt.

Each :class:`OtelMetric` says its name, instrument, unit, and the attribute keys its points carry in
each mode (``None``: not exported in that mode). The names taken from the semantic conventions are
spelt as conventions :data:`SEMCONV_VERSION` spells them, with their instrument and unit; the
others start with ``parinfo.`` (no convention covers them: a native pool's threads, the usable
CPUs, the quota's throttling, CPU pressure, findings) and follow the conventions' naming rules
(dot-separated namespaces, snake_case words, UCUM units with ``{annotations}``, no name that is also
a namespace). The exporter (:mod:`parinfo.watching.otlp`) refuses a point whose attribute keys are
not the ones declared here, and docs/metrics.md's table is checked against this module.
"""
from __future__ import annotations

from typing import NamedTuple

#: The semantic conventions the names below follow (opentelemetry-semantic-conventions 0.66b2).
SEMCONV_VERSION = "1.44.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

# Attribute keys: the conventions' (process.*) and parinfo's own (parinfo.*).
PROCESS_PID = "process.pid"
PROCESS_EXECUTABLE_NAME = "process.executable.name"
CGROUP = "parinfo.cgroup.path"
POOL_LIBRARY = "parinfo.pool.library"
COUNT_SOURCE = "parinfo.count.source"
PRESSURE_SCOPE = "parinfo.pressure.scope"
FINDING_ID = "parinfo.finding.id"
FINDING_SEVERITY = "parinfo.finding.severity"

#: The instruments, as the conventions name them: gauge and updowncounter values are the value now,
#: counter values the kernel's cumulative count.
GAUGE, COUNTER, UPDOWNCOUNTER = "gauge", "counter", "updowncounter"


class OtelMetric(NamedTuple):
    """One exported metric: its name, instrument and unit, the attribute keys of its points under
    ``watch`` and under ``host`` (None: that mode does not export it), and what it measures."""

    name: str
    instrument: str
    unit: str
    watch: tuple[str, ...] | None
    host: tuple[str, ...] | None
    what: str

    @property
    def convention(self) -> bool:
        """Whether the name is the semantic conventions' (else it is parinfo's own)."""
        return not self.name.startswith("parinfo.")


_PROC = (PROCESS_PID, PROCESS_EXECUTABLE_NAME, CGROUP)

THREADS = OtelMetric(
    "process.thread.count", UPDOWNCOUNTER, "{thread}", (PROCESS_PID,), _PROC,
    "threads of each process (watch: each process watched; host: each process scanned)")
CPU_UTILIZATION = OtelMetric(
    "process.cpu.utilization", GAUGE, "1", (PROCESS_PID,), _PROC,
    "CPU time over the interval / (interval x the process's usable CPUs); watch: without --children only")
CONTAINER_USAGE = OtelMetric(
    "container.cpu.usage", GAUGE, "{cpu}", (), None,
    "watch without --pid: the cgroup's CPU use over the interval, in CPUs (parinfo's own left out, as in "
    "its samples)")
CONTAINER_TIME = OtelMetric(
    "container.cpu.time", COUNTER, "s", (), None,
    "watch without --pid: the cgroup's cumulative CPU time (cpu.stat usage_usec / cpuacct.usage)")
LOGICAL_CPUS = OtelMetric(
    "system.cpu.logical.count", UPDOWNCOUNTER, "{cpu}", None, (),
    "logical CPUs of the machine")
USABLE = OtelMetric(
    "parinfo.cpu.usable", GAUGE, "{cpu}", (), (CGROUP,),
    "CPUs the process (watch) or the cgroup's processes (host) may use at once: affinity, cpuset and "
    "floor(quota), at least 1")
POOL_THREADS = OtelMetric(
    "parinfo.pool.thread.count", UPDOWNCOUNTER, "{thread}", (PROCESS_PID, POOL_LIBRARY, COUNT_SOURCE),
    (*_PROC, POOL_LIBRARY, COUNT_SOURCE),
    "threads of each native pool library, summed over its loaded copies; parinfo.count.source: memory "
    "(in force, read from the process's memory), attached (in force, read inside it) or launch-env (what "
    "its launch environment asks for)")
RUNNABLE = OtelMetric(
    "parinfo.thread.runnable", GAUGE, "{thread}", (), (CGROUP,),
    "threads running or waiting for a CPU: on average over the interval (watch), at the scan (host)")
AT_ONCE = OtelMetric(
    "parinfo.thread.at_once", GAUGE, "{thread}", None, (CGROUP,),
    "threads the cgroup's processes can run at once: widest pool in force x outer threads, summed")
AT_ONCE_PREDICTED = OtelMetric(
    "parinfo.thread.at_once_predicted", GAUGE, "{thread}", None, (CGROUP,),
    "the same sum if the counts predicted from launch environments hold")
THROTTLED_TIME = OtelMetric(
    "parinfo.cpu.throttled.time", COUNTER, "s", (CGROUP,), (CGROUP,),
    "time the cgroup's threads were held back by its CPU quota (throttled_usec), each cgroup level that "
    "sets a quota")
THROTTLED_PERIODS = OtelMetric(
    "parinfo.cpu.throttled.periods", COUNTER, "{period}", (CGROUP,), (CGROUP,),
    "CPU periods in which that cgroup was throttled (nr_throttled)")
PERIODS = OtelMetric(
    "parinfo.cpu.periods", COUNTER, "{period}", (CGROUP,), (CGROUP,),
    "CPU periods of that cgroup's quota in which it had threads to run (nr_periods): with the throttled "
    "ones, the share of periods throttled")
PRESSURE = OtelMetric(
    "parinfo.cpu.pressure.some", GAUGE, "1", (PRESSURE_SCOPE,), (PRESSURE_SCOPE, CGROUP),
    "share of the interval some task waited for a CPU (PSI some); scope machine or cgroup (host: the "
    "machine's with parinfo.cgroup.path /)")
FINDINGS = OtelMetric(
    "parinfo.finding.active", GAUGE, "1", (FINDING_ID, FINDING_SEVERITY), (FINDING_ID, FINDING_SEVERITY, CGROUP),
    "1 for each finding that holds (the ids of docs/findings.md)")

#: Every metric exported, in the order of docs/metrics.md's table.
METRICS: tuple[OtelMetric, ...] = (
    THREADS, CPU_UTILIZATION, CONTAINER_USAGE, CONTAINER_TIME, LOGICAL_CPUS, USABLE, POOL_THREADS, RUNNABLE,
    AT_ONCE, AT_ONCE_PREDICTED, THROTTLED_TIME, THROTTLED_PERIODS, PERIODS, PRESSURE, FINDINGS)
