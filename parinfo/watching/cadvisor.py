"""cAdvisor-compatible CPU throttling series, beside parinfo's own: what Kubernetes dashboards and the
kubernetes-mixin alert ``CPUThrottlingHigh`` read.

Three counters, the kernel's cumulative ones from the cgroup's ``cpu.stat`` (v1 and v2), under
cAdvisor's names and labels:

- ``container_cpu_cfs_periods_total``: enforcement periods in which the cgroup had runnable threads;
- ``container_cpu_cfs_throttled_periods_total``: of those, periods in which it ran out of quota;
- ``container_cpu_cfs_throttled_seconds_total``: the time its threads were held back.

Series are made for the cgroups of processes in a Kubernetes pod only, as cAdvisor makes them: one
per container cgroup and one per pod cgroup, each only while it sets a quota of its own (cAdvisor
leaves the CFS series out for a cgroup without one). A cgroup outside any pod gets none: parinfo's
own ``parinfo_cpu_throttled_*`` series cover it. Labels:

- ``id``: the cgroup, as /proc/PID/cgroup names it (``/kubepods/burstable/pod<uid>/<id>``);
- ``container``: the container's id (cAdvisor gives the name from the pod's spec, which only the API
  server knows; the id stands for it, so series of one container still group together); ``""`` on
  the pod's own cgroup, as cAdvisor writes it, which the alert leaves out with ``container!=""``;
- ``pod``: the pod's name from the container's hostname (:mod:`parinfo.machine.pod_names`), else its uid;
- ``namespace``: from the service-account volume, else ``""``.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from parinfo.machine.pressure import throttling_at
from parinfo.machine.sysfs import Unreadable
from parinfo.records.record import record
from parinfo.safe_text import label_value

if TYPE_CHECKING:
    from parinfo.machine.pod import PodIdentity

LABELS = ["id", "container", "pod", "namespace"]


@record(frozen=True)
class Series:
    """The counters of one container or pod cgroup, with cAdvisor's labels."""

    id: str
    container: str
    pod: str
    namespace: str
    periods: int
    throttled: int
    throttled_seconds: float

    @property
    def labels(self) -> list[str]:
        return [label_value(x) for x in (self.id, self.container, self.pod, self.namespace)]


def pod_series(root: str, pods: Iterable[PodIdentity]) -> list[Series]:
    """The series of every container and pod cgroup of ``pods`` (each once) that sets a quota, read
    now under ``root``; a cgroup whose counters cannot be read is left out."""
    out: list[Series] = []
    seen: set[str] = set()
    for p in pods:
        container = p.container_id or (p.container_cgroup or "").rsplit("/", 1)[-1]
        for d, cgroup, label in ((p.container_dir, p.container_cgroup, container), (p.pod_dir, p.pod_cgroup, "")):
            if d is None or cgroup is None or cgroup in seen:
                continue
            seen.add(cgroup)
            try:
                level = throttling_at(root, d, p.cgroup_version)
            except Unreadable:
                continue
            if level is not None:
                out.append(Series(cgroup, label, p.name or p.pod_uid, p.namespace or "", level.periods,
                                  level.throttled, level.throttled_usec / 1e6))
    return out


def families(series: Iterable[Series]) -> Iterator[Any]:
    """The three counter families (prometheus_client's), one sample per series each."""
    from prometheus_client.core import CounterMetricFamily

    periods = CounterMetricFamily("container_cpu_cfs_periods_total", "CFS periods in which the cgroup had "
                                  "threads to run (the kernel's cpu.stat nr_periods; cAdvisor's name)", labels=LABELS)
    throttled = CounterMetricFamily("container_cpu_cfs_throttled_periods_total", "Of those periods, the ones in "
                                    "which the cgroup used up its quota (cpu.stat nr_throttled; cAdvisor's name)",
                                    labels=LABELS)
    seconds = CounterMetricFamily("container_cpu_cfs_throttled_seconds_total", "Time the quota held the cgroup's "
                                  "threads back, in seconds (cpu.stat throttled time; cAdvisor's name)", labels=LABELS)
    for s in series:
        labels = s.labels
        periods.add_metric(labels, s.periods)
        throttled.add_metric(labels, s.throttled)
        seconds.add_metric(labels, s.throttled_seconds)
    yield periods
    yield throttled
    yield seconds
