"""The Kubernetes pod a process runs in, read from the cgroups the kubelet made for it.

From the process's cgroup path (:mod:`parinfo.machine.pod_path`: cgroupfs or systemd driver) come
its QoS class, pod uid and container id; from the cgroup files, on v1 (the cpu and cpuset
hierarchies) as on v2 (the unified one):

- the CPU request, from the container's ``cpu.shares`` (v1) or ``cpu.weight`` (v2), in millicores
  (:mod:`parinfo.machine.pod_shares`: read back from a rounded weight, so it rounds too);
- the container's limit (its own cgroup's quota) and the pod's (the pod cgroup's quota: set by
  pod-level resources, or as the sum of its containers' limits when every container has one);
- the CPU manager's exclusive CPUs: a Guaranteed container with a whole number of CPUs whose
  cpuset is narrower than the kubepods cgroup's and as wide as its limit (the static policy's
  grant; a narrower cpuset otherwise is the shared pool, which other pods' exclusive CPUs shrink);
- the CPUs usable, by parinfo's rule and as each runtime of
  :func:`parinfo.machine.rounding.usable_by_rule` counts them (Go reads its own cgroup's quota only,
  so a pod-level limit escapes it);
- the pod's name and namespace, as far as the process's own files tell (:mod:`parinfo.machine.pod_names`).

Every file is read bounded under ``root``; what cannot be read is an
:class:`~parinfo.records.unknown.Unknown` with the reason beside a source that says so, never an
exception. A process whose cgroup is no pod's gives None.
"""
from __future__ import annotations

import os
from dataclasses import field
from typing import TYPE_CHECKING, Annotated

from parinfo.machine import cgroup as _cgroup
from parinfo.machine.cpulist import format_cpu_list
from parinfo.machine.pod_cpus import pod_cpus
from parinfo.machine.pod_names import names_of
from parinfo.machine.pod_path import GUARANTEED, QOS_CLASSES, PodPath, pod_path
from parinfo.machine.pod_request import dir_at, known, request_at
from parinfo.machine.sysfs import Unreadable, read_cpu_list, shown
from parinfo.records.convert import LOCAL, among, at_most, between, doc
from parinfo.records.record import record
from parinfo.records.source import NO_LIMIT, Source, file, unknown
from parinfo.records.unknown import Unknown

if TYPE_CHECKING:
    from parinfo.machine.procfs import Proc
    from parinfo.machine.topology import MachineFacts

_CPUSET_FILES = {"v1": ("cpuset.effective_cpus", "cpuset.cpus"), "v2": ("cpuset.cpus.effective",)}
Cpus = tuple[Annotated[int, between(0)], ...]
Text = Annotated[str, at_most(256)]
#: A cgroup path (a kubelet's --cgroup-root may put the tree deep) or a note that names one.
LongText = Annotated[str, at_most(4096)]


@record
class PodFacts:
    """The pod section: where the process sits in the kubelet's tree, what its cgroups ask for and
    allow, and the CPUs that leaves it. CPU figures are CPUs (a quota of 1.5 is 1.5), requests
    millicores; ``None`` is "not set", an ``Unknown`` "could not be read" (its source says why)."""

    qos: Annotated[str, among(*QOS_CLASSES)] = field(metadata=doc("the pod's QoS class, from its cgroup's path"))
    qos_source: Source
    pod_uid: Text
    container_id: Text | None = field(metadata=doc(
        "null: the process sits in the pod's cgroup itself, or (container_cgroup set) its id is unknown"))
    container_source: Source
    name: Text | None = field(metadata=doc("the pod's name, as the container's hostname gives it"))
    name_source: Source
    namespace: Text | None
    namespace_source: Source
    driver: Annotated[str, among("cgroupfs", "systemd")]
    cgroup_version: Annotated[str, among("v1", "v2")]
    cgroup: LongText = field(metadata=doc("the process's cgroup (the CPU controller's), as /proc/PID/cgroup names it"))
    pod_cgroup: LongText
    container_cgroup: LongText | None
    runtime: Text | None = field(metadata=doc("the container runtime its cgroup's name gives, or null"))
    request_millicores: Annotated[int, between(0)] | Unknown | None = field(metadata=doc(
        "the container's CPU request (the pod's, for a process in the pod's cgroup), read back from "
        "cpu.shares (v1) or cpu.weight (v2): rounded (the source gives the range the weight allows)"))
    request_source: Source
    pod_request_millicores: Annotated[int, between(0)] | Unknown | None
    pod_request_source: Source
    limit: Annotated[float, between(0)] | Unknown | None = field(metadata=doc(
        "the container's CPU limit in CPUs (its cgroup's quota); null: none"))
    limit_source: Source
    pod_limit: Annotated[float, between(0)] | Unknown | None = field(metadata=doc(
        "the pod cgroup's quota in CPUs: pod-level resources, or the sum of its containers' limits; null: none"))
    pod_limit_source: Source
    cpuset: Cpus | Unknown | None = field(metadata=doc("the CPUs of the container's cpuset; null: none read"))
    node_cpuset: Cpus | Unknown | None = field(metadata=doc("the CPUs of the kubepods cgroup's cpuset"))
    exclusive: bool | None = field(metadata=doc(
        "true: the CPU manager gave the container its CPUs alone; false: it shares them; null: cannot tell"))
    cpuset_source: Source
    usable_cpus: Annotated[int, between(1)]
    usable_rule: Text
    usable_by_rule: dict[str, Annotated[int, between(1)]] = field(default_factory=dict, metadata=doc(
        "the CPUs each runtime counts here (parinfo.machine.rounding); go reads its own cgroup's quota only"))
    notes: tuple[LongText, ...] = ()
    pod_cpus: Annotated[int, between(1)] | None = field(default=None, metadata=doc(
        "the CPUs the pod pays for, a profile's pod_cpus (the container profile's count): usable_cpus under "
        "a limit, else the request rounded (a share under contention, not a cap), else usable_cpus"))
    pod_cpus_source: Source = field(default=NO_LIMIT, metadata=doc("which of the three it is, in words"))


@record(frozen=True)
class PodIdentity:
    """Who a process is in the kubelet's tree, without its limits (what ``host`` groups by and the
    cAdvisor-compatible series label): read from its cgroup path and its own files only. The
    directories (relative to the root, in the CPU controller's hierarchy) stay in the process."""

    pod_uid: Text
    qos: Annotated[str, among(*QOS_CLASSES)]
    container_id: Text | None
    name: Text | None
    namespace: Text | None
    pod_cgroup: LongText
    container_cgroup: LongText | None
    cgroup_version: Annotated[str, among("v1", "v2")] = field(default="v1", metadata=LOCAL)
    pod_dir: str | None = field(default=None, metadata=LOCAL)
    container_dir: str | None = field(default=None, metadata=LOCAL)


def pod_identity(root: str = "/", proc: Proc | None = None, path: str | None = None) -> PodIdentity | None:
    """The pod identity of process ``proc`` (default: this one) whose CPU cgroup is ``path`` (read
    when not given), or None when it is in no pod or its cgroup cannot be read."""
    root = os.path.abspath(root)
    try:
        found = pod_path(path if path is not None else _cgroup.cgroup_path(root, proc))
        where = None if found is None else _cgroup.controller_dir(root, "cpu", proc)
    except Unreadable:
        return None
    if found is None:
        return None
    name, _, namespace, _ = names_of(proc, root)
    cid = found.container_id
    dirs = [dir_at(where, found, i) if i is not None else None for i in (found.pod, found.container)]
    return PodIdentity(found.pod_uid, found.qos, cid if isinstance(cid, str) else None, name, namespace,
                       found.cgroup(found.pod), None if found.container is None else found.cgroup(found.container),
                       "v1" if where is None or where.version == "v1" else "v2",
                       *(d if isinstance(d, str) else None for d in dirs))


def _limit(root: str, d: str | Unknown, version: str) -> tuple[float | Unknown | None, Source]:
    if isinstance(d, Unknown):
        return d, unknown(d.why)
    rel = f"{d}/{'cpu.max' if version == 'v2' else 'cpu.cfs_quota_us'}"
    try:
        quota = _cgroup.quota_at(root, d, version)
    except Unreadable as exc:
        return Unknown(str(exc)), unknown(str(exc))
    if quota is None:
        return None, Source(NO_LIMIT.kind, shown(rel), f"none ({shown(rel)})")
    return quota, file(shown(rel))


def _cpus(root: str, where: _cgroup.CgroupDir | None, d: str | Unknown) -> tuple[Cpus | Unknown | None, str]:
    """The CPUs of the cpuset nearest ``d`` (itself, else its nearest ancestor with a cpuset file)."""
    if isinstance(d, Unknown) or where is None:
        return (d if isinstance(d, Unknown) else None), ""
    for level in _cgroup.CgroupDir(where.version, d, where.top).levels:
        for name in _CPUSET_FILES[where.version]:
            rel = f"{level}/{name}"
            if os.path.lexists(os.path.join(root, rel)):
                try:
                    return read_cpu_list(root, rel), shown(rel)
                except Unreadable as exc:
                    return Unknown(str(exc)), shown(rel)
    return None, ""


def pod_limits(root: str, proc: Proc | None, found: PodPath) -> tuple[int | Unknown | None, float | Unknown | None,
                                                                   float | Unknown | None]:
    """(the request in millicores, the container's limit, the pod's limit) of process ``proc`` whose
    cgroup path is ``found``: the few files an in-place resize rewrites, without the rest of the
    section (what the runtime's follower and ``host`` re-read)."""
    try:
        cpu = _cgroup.controller_dir(root, "cpu", proc)
    except Unreadable as exc:
        return Unknown(str(exc)), Unknown(str(exc)), Unknown(str(exc))
    version = "v1" if cpu is None or cpu.version == "v1" else "v2"
    mine = found.container if found.container is not None else found.pod
    request = request_at(root, dir_at(cpu, found, mine), version)[0]
    limit = _limit(root, dir_at(cpu, found, mine), version)[0] if found.container is not None else None
    return request, limit, _limit(root, dir_at(cpu, found, found.pod), version)[0]


def _exclusive(qos: str, limit: float | Unknown | None, cpus: Cpus | Unknown | None,
               node: Cpus | Unknown | None, online: int | None) -> bool | None:
    """Whether the CPU manager gave these CPUs to the container alone (see the module): narrower
    than the kubepods cgroup's cpuset, or than the ``online`` CPUs where kubepods has none."""
    if not isinstance(cpus, tuple) or isinstance(node, Unknown) or (node is None and online is None):
        return None
    narrower = set(cpus) < set(node) if node is not None else len(cpus) < (online or 0)
    whole = isinstance(limit, float) and limit == int(limit) and len(cpus) == int(limit)
    return qos == GUARANTEED and narrower and whole


def _cpuset_source(cpus: Cpus | Unknown | None, rel: str, node: Cpus | Unknown | None, node_rel: str,
                   exclusive: bool | None) -> Source:
    if isinstance(cpus, Unknown):
        return unknown(cpus.why)
    if cpus is None:
        return NO_LIMIT
    words = f"{rel} {format_cpu_list(list(cpus))}"
    if isinstance(node, tuple):
        words += f", kubepods {format_cpu_list(list(node))} ({node_rel})"
        if exclusive:
            words += ": the CPU manager's exclusive CPUs"
        elif set(cpus) < set(node):
            words += ": the shared pool (other containers hold CPUs alone)"
    return file(rel, words)


def _usable_notes(found: PodPath, limit: float | Unknown | None, pod_limit: float | Unknown | None,
                  request: int | Unknown | None, machine: MachineFacts) -> list[str]:
    notes = []
    go = machine.usable_by_rule.get("go")
    if machine.quota is not None and (limit is None or (isinstance(limit, float) and limit > machine.quota)):
        notes.append(f"Go reads its own cgroup's quota only: the {machine.quota:g}-CPU limit above it "
                     f"({machine.quota_source}) is not seen, GOMAXPROCS {go}")
    if limit is None and pod_limit is None and isinstance(request, int) and request > 0:
        notes.append(f"a request ({request}m) with no limit: the runtimes count the CPUs the cpuset allows "
                     f"({machine.usable_cpus}), the request is a share under contention, not a cap")
    if found.container is not None and found.container + 1 < len(found.parts):
        notes.append(f"the process sits below its container's cgroup, in {found.cgroup(len(found.parts) - 1)}")
    return notes


def pod_facts(root: str = "/", proc: Proc | None = None, machine: MachineFacts | None = None) -> PodFacts | None:
    """The pod section of process ``proc`` (default: this one) read under ``root``, or None when it
    is in no pod's cgroup. ``machine`` (the report's machine facts, read when not given) gives its
    cgroup path and usable CPUs."""
    from parinfo.machine.procfs import this_or
    from parinfo.machine.topology import machine_facts

    root = os.path.abspath(root)
    if machine is None:
        machine = machine_facts(root, proc)
    found = pod_path(machine.cgroup_path)
    if found is None:
        return None
    problem: Unknown | None = None
    try:
        cpu = _cgroup.controller_dir(root, "cpu", proc)
        cpuset_dir = _cgroup.controller_dir(root, "cpuset", proc)
    except Unreadable as exc:
        cpu = cpuset_dir = None
        problem = Unknown(str(exc))
    version = "v1" if cpu is None or cpu.version == "v1" else "v2"
    mine = found.container if found.container is not None else found.pod

    def at(where: _cgroup.CgroupDir | None, index: int) -> str | Unknown:
        return problem if problem is not None else dir_at(where, found, index)

    request, request_source = request_at(root, at(cpu, mine), version)
    pod_request, pod_request_source = request_at(root, at(cpu, found.pod), version)
    limit, limit_source = _limit(root, at(cpu, mine), version) if found.container is not None else (None, NO_LIMIT)
    pod_limit, pod_limit_source = _limit(root, at(cpu, found.pod), version)
    cpus, rel = _cpus(root, cpuset_dir, at(cpuset_dir, mine))
    node, node_rel = _cpus(root, cpuset_dir, at(cpuset_dir, found.kubepods))
    exclusive = _exclusive(found.qos, limit, cpus, node, machine.logical_cpus)
    name, name_source, namespace, namespace_source = names_of(proc, root)
    cid = found.container_id
    path = found.cgroup(len(found.parts) - 1)
    said = file(this_or(proc, root).shown("cgroup"))
    paid, paid_source = pod_cpus(machine.usable_cpus, machine.quota, machine.quota_source,
                                 *known(request, request_source), machine.quota_rounding)
    return PodFacts(
        qos=found.qos, qos_source=said, pod_uid=found.pod_uid, container_id=cid if isinstance(cid, str) else None,
        container_source=unknown(cid.why) if isinstance(cid, Unknown) else said,
        name=name, name_source=name_source, namespace=namespace, namespace_source=namespace_source,
        driver=found.driver, cgroup_version=version, cgroup=path, pod_cgroup=found.cgroup(found.pod),
        container_cgroup=None if found.container is None else found.cgroup(found.container), runtime=found.runtime,
        request_millicores=request, request_source=request_source, pod_request_millicores=pod_request,
        pod_request_source=pod_request_source, limit=limit, limit_source=limit_source, pod_limit=pod_limit,
        pod_limit_source=pod_limit_source, cpuset=cpus, node_cpuset=node, exclusive=exclusive,
        cpuset_source=_cpuset_source(cpus, rel, node, node_rel, exclusive), usable_cpus=machine.usable_cpus,
        usable_rule=machine.usable_rule, usable_by_rule=dict(machine.usable_by_rule),
        notes=tuple(_usable_notes(found, limit, pod_limit, request, machine)), pod_cpus=paid,
        pod_cpus_source=paid_source)
