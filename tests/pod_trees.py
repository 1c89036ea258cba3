"""Fake cgroup trees shaped as the kubelet makes them (both drivers, v1 and v2), for the pod tests.

    root = pod_machine(tmp_path, version="v1", driver="cgroupfs", qos="Burstable", request=500)

``request`` and ``pod_request`` are millicores (written as the kubelet writes them: cpu.shares on v1,
cpu.weight on v2), ``limit`` and ``pod_limit`` CPUs (None: no quota, written as -1 / "max"),
``cpuset`` and ``node_cpuset`` CPU lists of the container and of the kubepods cgroup.
"""
from __future__ import annotations

from pathlib import Path

from fake_trees import FakeMachine

from parinfo.machine.pod_shares import shares_of, weight_of

UID = "1234abcd-1111-2222-3333-444455556666"
CID = "0123456789abcdef" * 4
PERIOD = 100_000
V1_CPU, V1_CPUSET, V2 = "sys/fs/cgroup/cpu,cpuacct", "sys/fs/cgroup/cpuset", "sys/fs/cgroup"


def kube_paths(driver: str, qos: str, uid: str = UID, cid: str = CID,
               runtime: str = "cri-containerd") -> tuple[str, str, str]:
    """(kubepods, pod, container) cgroups as the kubelet names them for ``driver`` and ``qos``."""
    word = {"Guaranteed": "", "Burstable": "burstable", "BestEffort": "besteffort"}[qos]
    if driver == "cgroupfs":
        pod = f"/kubepods{'/' + word if word else ''}/pod{uid}"
        return "/kubepods", pod, f"{pod}/{cid}"
    slug = uid.replace("-", "_")
    if word:
        pod = f"/kubepods.slice/kubepods-{word}.slice/kubepods-{word}-pod{slug}.slice"
    else:
        pod = f"/kubepods.slice/kubepods-pod{slug}.slice"
    return "/kubepods.slice", pod, f"{pod}/{runtime}-{cid}.scope"


def _quota(version: str, cpus: float | None) -> str:
    if version == "v2":
        return f"{'max' if cpus is None else int(cpus * PERIOD)} {PERIOD}"
    return str(-1 if cpus is None else int(cpus * PERIOD))


def pod_machine(tmp_path: Path | str, *, version: str, driver: str, qos: str, request: int | None = None,
                pod_request: int | None = None, limit: float | None = None, pod_limit: float | None = None,
                cpuset: str | None = None, node_cpuset: str = "0-7", cpus: int = 8, in_pod_cgroup: bool = False,
                edit: dict[str, str] | None = None) -> str:
    """A machine of ``cpus`` CPUs whose process sits in a container (or, ``in_pod_cgroup``, the pod's
    own cgroup) of a pod of class ``qos``; ``edit`` writes raw files (paths relative to the root,
    ``{pod}`` and ``{container}`` replaced by their cgroups) after the rest."""
    kube, pod, container = kube_paths(driver, qos)
    leaf = pod if in_pod_cgroup else container
    m = FakeMachine(tmp_path).cpus(cpus)
    cpu_base = V2 if version == "v2" else V1_CPU
    set_base = V2 if version == "v2" else V1_CPUSET
    sets = {kube: node_cpuset, **({leaf: cpuset} if cpuset else {})}
    if version == "v2":
        m.cgroup_v2(leaf, cpu_max={pod: _quota(version, pod_limit), **(
            {} if in_pod_cgroup else {container: _quota(version, limit)})}, cpuset=sets)
    else:
        m.cgroup_v1(leaf, cpuset=sets)
        for cg, cpus_ in ((pod, pod_limit), *(() if in_pod_cgroup else ((container, limit),))):
            m.file(f"{cpu_base}{cg}/cpu.cfs_quota_us", _quota(version, cpus_))
            m.file(f"{cpu_base}{cg}/cpu.cfs_period_us", str(PERIOD))
    for cg, milli in ((pod, pod_request), *(() if in_pod_cgroup else ((container, request),))):
        shares = shares_of(milli or 0)
        if version == "v2":
            m.file(f"{cpu_base}{cg}/cpu.weight", str(weight_of(shares)))
        else:
            m.file(f"{cpu_base}{cg}/cpu.shares", str(shares))
    for rel, text in (edit or {}).items():
        m.file(rel.format(pod=pod, container=container, cpu=cpu_base, cpuset=set_base), text)
    return m.build()
