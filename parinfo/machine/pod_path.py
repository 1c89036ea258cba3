"""Where a cgroup path puts a process in the tree the kubelet makes, told from the path alone.

The kubelet puts every pod under one cgroup, its QoS class in the path:

- cgroupfs driver: ``/kubepods/pod<uid>/<container>`` (Guaranteed: the pod sits directly under
  kubepods), ``/kubepods/burstable/pod<uid>/<container>``, ``/kubepods/besteffort/pod<uid>/<container>``;
- systemd driver: ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
  cri-containerd-<id>.scope`` (the uid's dashes written as underscores; ``crio-`` and ``docker-``
  scopes too; a Guaranteed pod is ``kubepods-pod<uid>.slice`` directly under kubepods.slice).

A kubelet run with ``--cgroup-root`` puts the tree lower (``/kubelet/kubepods/...``,
``kubelet.slice/kubelet-kubepods.slice/...``), so the kubepods cgroup is looked for anywhere in the
path. The path is the process's own words in ``/proc/PID/cgroup`` (a cgroup that anyone with a
delegated subtree could name ``kubepods``): every part is checked against the shape the kubelet
gives it, and anything else is not a pod (None) or, for the container's part, an unknown id.
"""
from __future__ import annotations

import re

from parinfo.records.record import record
from parinfo.records.unknown import Unknown
from parinfo.safe_text import escape_controls, shorten

GUARANTEED, BURSTABLE, BEST_EFFORT = "Guaranteed", "Burstable", "BestEffort"
QOS_CLASSES = (GUARANTEED, BURSTABLE, BEST_EFFORT)
_QOS_DIRS = {"burstable": BURSTABLE, "besteffort": BEST_EFFORT}
_UID = re.compile(r"[0-9a-fA-F][0-9a-fA-F-]{0,63}")
_ID = re.compile(r"[0-9a-f]{12,128}")
#: A container's cgroup as each runtime names it: ``<prefix>-<id>`` (and ``.scope`` with systemd).
_SCOPE = re.compile(r"(cri-containerd|crio|docker)-([0-9a-f]{12,128})(\.scope)?")
_RUNTIMES = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker"}


@record(frozen=True)
class PodPath:
    """A process's place in the kubelet's tree: ``parts`` are its cgroup path's parts, ``kubepods``,
    ``pod`` and ``container`` the index of the kubepods, pod and container cgroups among them
    (``container`` None: the process sits in the pod's cgroup itself)."""

    driver: str  # "cgroupfs" or "systemd"
    qos: str  # one of QOS_CLASSES
    pod_uid: str
    container_id: str | Unknown | None
    runtime: str | None  # the container runtime its cgroup's name gives ("containerd", "cri-o", "docker")
    parts: tuple[str, ...]
    kubepods: int
    pod: int
    container: int | None

    def cgroup(self, index: int) -> str:
        """The cgroup of ``parts[index]``, as /proc/PID/cgroup names it."""
        return "/" + "/".join(self.parts[:index + 1])


def _container(name: str) -> tuple[str | Unknown, str | None]:
    """(the container id, its runtime) of a container cgroup's name."""
    scoped = _SCOPE.fullmatch(name)
    if scoped is not None:
        return scoped.group(2), _RUNTIMES[scoped.group(1)]
    if _ID.fullmatch(name):
        return name, None
    return Unknown(f"{escape_controls(shorten(name, 80))!r} is not a container id the kubelet's runtimes write"), None


def _cgroupfs(parts: tuple[str, ...], i: int) -> PodPath | None:
    qos = _QOS_DIRS.get(parts[i + 1]) if i + 1 < len(parts) else None
    pod = i + 2 if qos else i + 1
    if pod >= len(parts) or not parts[pod].startswith("pod") or not _UID.fullmatch(parts[pod][3:]):
        return None
    return _with_container(PodPath("cgroupfs", qos or GUARANTEED, parts[pod][3:], None, None, parts, i, pod, None))


def _systemd(parts: tuple[str, ...], i: int) -> PodPath | None:
    stem = parts[i][:-len(".slice")]
    qos = None
    for word, cls in _QOS_DIRS.items():
        if i + 1 < len(parts) and parts[i + 1] == f"{stem}-{word}.slice":
            qos, stem = cls, f"{stem}-{word}"
    pod = i + 2 if qos else i + 1
    name = parts[pod] if pod < len(parts) else ""
    head, tail = f"{stem}-pod", ".slice"
    uid = name[len(head):-len(tail)].replace("_", "-") if name.startswith(head) and name.endswith(tail) else ""
    if not _UID.fullmatch(uid):
        return None
    return _with_container(PodPath("systemd", qos or GUARANTEED, uid, None, None, parts, i, pod, None))


def _with_container(found: PodPath) -> PodPath:
    if found.pod + 1 >= len(found.parts):
        return found
    cid, runtime = _container(found.parts[found.pod + 1])
    return PodPath(found.driver, found.qos, found.pod_uid, cid, runtime, found.parts, found.kubepods, found.pod,
                   found.pod + 1)


def pod_path(path: str | None) -> PodPath | None:
    """Where cgroup ``path`` ("/kubepods/burstable/pod<uid>/<id>") lies in the kubelet's tree, or
    None when it is not a pod's cgroup (or a cgroup below one)."""
    if not path:
        return None
    parts = tuple(p for p in path.split("/") if p)
    for i, part in enumerate(parts):
        if part == "kubepods":
            return _cgroupfs(parts, i)
        if part.endswith(".slice") and (part == "kubepods.slice" or part.endswith("-kubepods.slice")):
            return _systemd(parts, i)
    return None
