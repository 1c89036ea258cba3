"""``parinfo host``'s processes grouped by Kubernetes pod and container.

Each process's pod comes from its cgroup (:func:`parinfo.machine.pod.pod_identity`, read once per
cgroup membership by the scanner); processes of no pod are in no group. The groups are listed
after the cgroups in the text and under ``pods`` in ``--json`` (absent when no process is in a pod).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field
from typing import TYPE_CHECKING

from parinfo.records.record import record
from parinfo.safe_text import escape_controls, plural

if TYPE_CHECKING:
    from parinfo.machine.pod import PodIdentity


@record
class ContainerRow:
    """One container of a pod and the processes in it (``id`` None: the pod's own cgroup, or a
    container whose id its cgroup does not give)."""

    id: str | None
    cgroup: str
    pids: list[int] = field(default_factory=list)


@record
class PodRow:
    """One pod: who it is, and its containers with their processes."""

    uid: str
    qos: str
    name: str | None
    namespace: str | None
    cgroup: str
    containers: list[ContainerRow] = field(default_factory=list)


def group(members: Iterable[tuple[int, PodIdentity | None]]) -> list[PodRow]:
    """The pods of ``members`` ((pid, its pod or None) of each process), in the order first met,
    each container once, its pids in order."""
    pods: dict[str, PodRow] = {}
    for pid, who in members:
        if who is None:
            continue
        row = pods.get(who.pod_uid)
        if row is None:
            row = pods[who.pod_uid] = PodRow(who.pod_uid, who.qos, who.name, who.namespace, who.pod_cgroup)
        cgroup = who.container_cgroup or who.pod_cgroup
        box = next((c for c in row.containers if c.cgroup == cgroup), None)
        if box is None:
            box = ContainerRow(who.container_id, cgroup)
            row.containers.append(box)
        box.pids.append(pid)
    for row in pods.values():
        for box in row.containers:
            box.pids.sort()
    return list(pods.values())


def pod_lines(pods: list[PodRow]) -> list[str]:
    """The text of the pods, for :meth:`parinfo.host.model.HostReport.table`."""
    if not pods:
        return []
    lines = ["", "pods (namespace/name, QoS class; each container: its processes)"]
    for row in pods:
        who = "/".join(x for x in (row.namespace, row.name) if x) or f"pod {row.uid}"
        lines.append(escape_controls(f"  {who} ({row.qos}, uid {row.uid})"))
        for box in row.containers:
            what = f"container {box.id[:12]}" if box.id else (
                "the pod's cgroup" if box.cgroup == row.cgroup else f"cgroup {box.cgroup}")
            pids = ", ".join(map(str, box.pids[:10])) + (" ..." if len(box.pids) > 10 else "")
            lines.append(escape_controls(f"    {what}: {plural(len(box.pids), 'process')} ({pids})"))
    return lines
