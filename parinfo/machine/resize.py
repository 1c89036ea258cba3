"""What an in-place resize changes, and the words that say so.

Kubernetes (1.35: GA) resizes a running pod's CPU request and limit in place, and the CPU manager
its cpuset: the kubelet rewrites ``cpu.shares`` / ``cpu.weight``, the quota (``cpu.cfs_quota_us`` /
``cpu.max``) of the container's and the pod's cgroups and ``cpuset.cpus``, without restarting
anything. An operator can do the same to any cgroup, and ``taskset`` to a process's affinity.
:class:`CpuBudget` is one reading of those values; :func:`resized` compares two readings and says
what changed, from what to what. The runtime's quota follower and ``host`` read one now and then.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from parinfo.machine.cpulist import format_cpu_list
from parinfo.machine.pod_path import pod_path
from parinfo.records.record import record
from parinfo.records.unknown import Unknown

if TYPE_CHECKING:
    from parinfo.machine.procfs import Proc

#: Why a changed request moves no count: what the defaults count (affinity, cpuset, quota) holds no request.
REQUEST_NO_CAP = "a share under contention, not a cap: no count follows it"


@record(frozen=True)
class CpuBudget:
    """One reading of what a resize rewrites: the quota that binds (the tightest, ancestors
    included, in CPUs; None: none), the cpuset's CPUs, the affinity (a process's; () for a cgroup)
    and, in a Kubernetes pod, the container's request (millicores), its limit and the pod's limit.
    ``pod`` False: no pod, the last three are None."""

    quota: float | None
    cpuset: tuple[int, ...] | None
    affinity: tuple[int, ...] = ()
    pod: bool = False
    request: int | Unknown | None = None
    limit: float | Unknown | None = None
    pod_limit: float | Unknown | None = None


def budget_of(quota: float | None, cpuset: tuple[int, ...] | None, cgroup: str | None,
              affinity: tuple[int, ...] = (), root: str = "/", proc: Proc | None = None) -> CpuBudget:
    """The budget of process ``proc`` (default: this one) whose binding quota, cpuset and cgroup
    path (/proc/PID/cgroup's) are given: in a pod, its request and limits are read too."""
    found = pod_path(cgroup)
    if found is None:
        return CpuBudget(quota, cpuset, affinity)
    from parinfo.machine.pod import pod_limits  # the whole pod model only for a process in a pod

    request, limit, pod_limit = pod_limits(root, proc, found)
    return CpuBudget(quota, cpuset, affinity, True, request, limit, pod_limit)


def _cpus(value: float | Unknown | None) -> str:
    if value is None:
        return "none"
    return str(value) if isinstance(value, Unknown) else f"{value:g} CPUs"


def _millicores(value: int | Unknown | None) -> str:
    if value is None:
        return "none"
    return str(value) if isinstance(value, Unknown) else f"{value}m"


def _cpu_list(value: tuple[int, ...] | None) -> str:
    return "all" if value is None else format_cpu_list(list(value))


def resized(old: CpuBudget, new: CpuBudget) -> list[str]:
    """What changed from ``old`` to ``new``, each as "WHAT FROM -> TO" ("limit 2 CPUs -> 1 CPUs",
    "request 500m -> 1000m (...)", "cpuset 0-1 -> 1"); [] when nothing did. A changed binding quota
    is said as the pod's or the container's limit where one of those changed, else as "quota"."""
    out = []
    if new.pod and old.pod:
        if _millicores(old.request) != _millicores(new.request):
            out.append(f"request {_millicores(old.request)} -> {_millicores(new.request)} ({REQUEST_NO_CAP})")
        for label, a, b in (("limit", old.limit, new.limit), ("pod limit", old.pod_limit, new.pod_limit)):
            if _cpus(a) != _cpus(b):
                out.append(f"{label} {_cpus(a)} -> {_cpus(b)}")
    if old.quota != new.quota and not any(line.startswith(("limit", "pod limit")) for line in out):
        out.append(f"quota {_cpus(old.quota)} -> {_cpus(new.quota)}")
    if old.cpuset != new.cpuset:
        out.append(f"cpuset {_cpu_list(old.cpuset)} -> {_cpu_list(new.cpuset)}")
    if old.affinity != new.affinity and old.affinity and new.affinity:
        out.append(f"affinity {_cpu_list(old.affinity)} -> {_cpu_list(new.affinity)}")
    return out
