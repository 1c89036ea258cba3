"""The CPU request of a process's container, read back from the weight the kubelet gave its cgroup,
and where a pod's cgroups lie in a hierarchy mounted here: what :mod:`parinfo.machine.pod` shows
and :func:`parinfo.machine.topology.machine_facts` keeps for a profile's ``pod_cpus``
(:mod:`parinfo.machine.pod_cpus`). Read bounded under ``root``; what cannot be read is an
:class:`~parinfo.records.unknown.Unknown` with a source that says why, never an exception.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from parinfo.machine import cgroup as _cgroup
from parinfo.machine.pod_path import PodPath, pod_path
from parinfo.machine.pod_shares import request_of
from parinfo.machine.sysfs import Unreadable, read_int, shown
from parinfo.records.source import NO_LIMIT, Source, file, unknown
from parinfo.records.unknown import Unknown

if TYPE_CHECKING:
    from parinfo.machine.procfs import Proc


def dir_at(where: _cgroup.CgroupDir | None, found: PodPath, index: int) -> str | Unknown:
    """The directory (relative to the root) of the cgroup ``found.parts[:index + 1]`` in the
    hierarchy ``where`` holds the process's leaf of, or why it is not visible here."""
    if where is None:
        return Unknown("no such cgroup hierarchy is mounted")
    if not where.found:
        return Unknown(f"the process's cgroup is not under {shown(where.top)} here")
    sub = [p for p in where.leaf[len(where.top):].split("/") if p]
    start = len(found.parts) - len(sub)
    if start < 0 or list(found.parts[start:]) != sub:
        return Unknown(f"{shown(where.leaf)} is not the cgroup {found.cgroup(len(found.parts) - 1)}")
    if index + 1 < start:
        return Unknown(f"{found.cgroup(index)} lies above the cgroup mount here ({shown(where.top)})")
    return "/".join(p for p in (where.top, *found.parts[start:index + 1]) if p)


def container_request(root: str, proc: Proc | None, path: str) -> tuple[int | Unknown | None, Source]:
    """The CPU request (millicores) of the container of process ``proc`` (default: this one) whose
    CPU cgroup is ``path`` (the pod's, for a process in the pod's own cgroup), and where it was read;
    (None, none) when ``path`` is no pod's. A request that cannot be read is Unknown, never None."""
    found = pod_path(path)
    if found is None:
        return None, NO_LIMIT
    try:
        cpu = _cgroup.controller_dir(root, "cpu", proc)
    except Unreadable as exc:
        return Unknown(str(exc)), unknown(str(exc))
    version = "v1" if cpu is None or cpu.version == "v1" else "v2"
    mine = found.container if found.container is not None else found.pod
    return known(*request_at(root, dir_at(cpu, found, mine), version))


def known(request: int | Unknown | None, source: Source) -> tuple[int | Unknown, Source]:
    """A request with None ("no cpu.weight file": the cpu controller is off) as the Unknown it is."""
    return (Unknown(str(source)) if request is None else request), source


def request_at(root: str, d: str | Unknown, version: str) -> tuple[int | Unknown | None, Source]:
    """The request read from the weight file in cgroup directory ``d`` (:mod:`parinfo.machine.pod_shares`);
    None on v2 when the cpu controller is off there (no weight file)."""
    if isinstance(d, Unknown):
        return d, unknown(d.why)
    rel = f"{d}/{'cpu.weight' if version == 'v2' else 'cpu.shares'}"
    if version == "v2" and not os.path.lexists(os.path.join(root, rel)):
        return None, Source(NO_LIMIT.kind, shown(rel), f"none: no {shown(rel)} (the cpu controller is not enabled)")
    try:
        value = read_int(root, rel)
    except Unreadable as exc:
        return Unknown(str(exc)), unknown(str(exc))
    got = request_of(value, version == "v2")
    if got is None:
        why = f"{value} in {shown(rel)} is not a value the kubelet writes"
        return Unknown(why), unknown(why)
    millicores, low, high = got
    span = "" if low == high else f": {low}m to {high}m, shown as the roundest"
    return millicores, file(shown(rel), f"{shown(rel)} {value}{span}")
