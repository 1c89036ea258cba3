"""Real cgroups shaped as the kubelet makes them (cgroupfs driver, cgroup v1: the cpu and cpuset
hierarchies), under a fresh ``--cgroup-root`` of the test's own so that nothing else's kubepods is
touched: ``/parinfo-test-<random>/kubepods[/burstable]/pod<uid>/<container id>``.

    with kubelet_cgroup(qos="Guaranteed", shares=1024, limit=1, pod_limit=1, cpuset="1") as pod:
        child = subprocess.Popen(...); pod.enter(child.pid)
        ...
        (stop the child here; the cgroups are removed leaf first once it is gone)
"""
from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

PERIOD_US = 100_000


def _v1_mount(controller: str) -> Path | None:
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) > 4 and len(tail) > 2 and tail[0] == "cgroup" and controller in tail[2].split(",") \
                and fields[3] == "/":
            return Path(fields[4])
    return None


def unavailable() -> str | None:
    """Why kubelet-shaped cgroups cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root"
    if _v1_mount("cpu") is None or _v1_mount("cpuset") is None:
        return "no cgroup v1 cpu and cpuset hierarchies mounted"
    return None


class KubeletPod:
    """The cgroups of one pod with one container; ``path`` is the container's cgroup as
    /proc/PID/cgroup names it, ``uid`` and ``cid`` the pod's uid and the container's id."""

    def __init__(self, qos: str) -> None:
        self.uid = str(uuid.uuid4())
        self.cid = uuid.uuid4().hex + uuid.uuid4().hex
        self.top = f"/parinfo-test-{uuid.uuid4().hex[:12]}"
        word = {"Guaranteed": "", "Burstable": "/burstable", "BestEffort": "/besteffort"}[qos]
        self.kubepods = f"{self.top}/kubepods"
        self.pod = f"{self.kubepods}{word}/pod{self.uid}"
        self.path = f"{self.pod}/{self.cid}"
        self.cpu, self.cpuset = _v1_mount("cpu"), _v1_mount("cpuset")
        self.made: list[Path] = []

    def dir(self, hierarchy: Path | None, cgroup: str) -> Path:
        assert hierarchy is not None
        return hierarchy / cgroup.lstrip("/")

    def make(self) -> None:
        parts = self.path.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            cgroup = "/" + "/".join(parts[:depth])
            for hierarchy in (self.cpu, self.cpuset):
                d = self.dir(hierarchy, cgroup)
                d.mkdir()
                self.made.append(d)
                if hierarchy == self.cpuset:  # a v1 cpuset takes no process until both are set
                    for name in ("cpuset.cpus", "cpuset.mems"):
                        (d / name).write_text((d.parent / name).read_text())

    def write(self, cgroup: str, name: str, value: str, hierarchy: Path | None = None) -> None:
        (self.dir(hierarchy or self.cpu, cgroup) / name).write_text(value)

    def enter(self, pid: int) -> None:
        """Move process ``pid`` into the container's cgroups."""
        for hierarchy in (self.cpu, self.cpuset):
            (self.dir(hierarchy, self.path) / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        for d in reversed(self.made):  # leaf first
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


@contextlib.contextmanager
def kubelet_cgroup(qos: str, *, shares: int, limit: float | None = None, pod_limit: float | None = None,
                   pod_shares: int | None = None, cpuset: str | None = None) -> Iterator[KubeletPod]:
    """A pod's and its container's cgroups with the kubelet's files written: ``shares`` (the
    container's cpu.shares), ``limit`` and ``pod_limit`` in CPUs (None: -1), ``cpuset`` the
    container's cpuset.cpus; all removed afterwards (leaf first; the caller ends its processes)."""
    pod = KubeletPod(qos)
    try:
        pod.make()
        for cgroup, value, quota in ((pod.path, shares, limit), (pod.pod, pod_shares or shares, pod_limit)):
            pod.write(cgroup, "cpu.shares", str(value))
            pod.write(cgroup, "cpu.cfs_period_us", str(PERIOD_US))
            pod.write(cgroup, "cpu.cfs_quota_us", str(-1 if quota is None else int(quota * PERIOD_US)))
        if cpuset is not None:
            pod.write(pod.path, "cpuset.cpus", cpuset, pod.cpuset)
        yield pod
    finally:
        pod.remove()
