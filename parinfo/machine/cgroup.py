"""The cgroup limits on a process's CPUs: CPU quota (v1 and v2) and cpuset.

The process's cgroups come from ``/proc/<pid>/cgroup``; where each hierarchy is mounted comes from
``/proc/self/mountinfo`` (this process's mount namespace, where the files are read). A mount's root
field matters in containers: the process's path "/docker/abc" on a mount whose root is "/docker/abc"
is the mount point itself. When the mapped directory does not exist, the mount point is used.

The quota is the tightest of the process's cgroup and every ancestor up to the mount point, so a
limit set on a systemd slice, a Slurm job or an outer container is not missed. Files are re-read on
every call: a process can be moved between cgroups and limits can change while it runs.
"""
from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from dataclasses import field
from typing import Any

from parinfo.machine.procfs import Proc, this_or
from parinfo.machine.sysfs import Unreadable, garbage, read, read_cpu_list, read_int, shown
from parinfo.records.record import record
from parinfo.records.source import NO_LIMIT, Source, file


@record
class CgroupFacts:
    """The cgroup view of one process. ``unknown`` maps a field to why it could not be read."""

    quota: float | None = None
    quota_source: Source = NO_LIMIT
    cpuset: tuple[int, ...] | None = None
    cpuset_source: Source = NO_LIMIT
    cpuset_files: tuple[str, ...] = ()  # the cpuset files that narrow it, nearest the root first
    leaf_quota: float | None = None  # the CPU controller's own cgroup's quota (a v1 cpu hierarchy wins; no ancestors)
    v2_quota: float | None = None  # the tightest quota of the v2 hierarchy alone
    outer_v2_quota: float | None = None  # the v2 quota nearest the mount point (what libuv keeps)
    version: str | None = None  # "v1", "v2", "hybrid" or None (no cgroup mounted)
    path: str | None = None  # the process's cgroup for the CPU controller, as /proc/<pid>/cgroup says
    unknown: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@record(frozen=True)
class _Mount:
    """One cgroup mount of mountinfo: where it is, and which controllers it holds."""

    root: str  # the mount's root inside its hierarchy (field 4 of mountinfo)
    point: str  # where it is mounted, relative to the filesystem root (no leading "/")
    v2: bool
    controllers: frozenset[str]


_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(s: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), s)


def _mounts(text: str) -> list[_Mount]:
    """The cgroup mounts of a mountinfo ``text`` (parsed once per distinct text: a report reads
    the file several times, and it rarely changes)."""
    return list(_parsed_mounts(text))


@functools.lru_cache(maxsize=8)
def _parsed_mounts(text: str) -> tuple[_Mount, ...]:
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        out.append(_Mount(root=_unescape(fields[3]), point=_unescape(fields[4]).strip("/"),
                          v2=tail[0] == "cgroup2",
                          controllers=frozenset(tail[2].split(",")) if tail[0] == "cgroup" else frozenset()))
    return tuple(out)


def cpu_hierarchy(mounts: list[_Mount]) -> _Mount | None:
    """The mount of the hierarchy whose paths :attr:`CgroupFacts.path` gives: the v1 cpu
    controller's where one is mounted, else the v2 one (a mount of the whole hierarchy first)."""
    for group in ([m for m in mounts if not m.v2 and "cpu" in m.controllers], [m for m in mounts if m.v2]):
        if group:
            return min(group, key=lambda m: (m.root != "/", len(m.point)))
    return None


def _hierarchy_name(m: _Mount) -> str:
    return "v2" if m.v2 else ",".join(sorted(c for c in m.controllers if c not in ("rw", "ro")))


def locate_cgroup(path: str) -> tuple[str | None, str]:
    """(the cgroup that ``path`` names, as /proc/PID/cgroup names it in :func:`cpu_hierarchy`, or
    None; why not). ``path`` is absolute and normalised: a cgroup ("/system.slice/app.service") or
    its directory under a mount of that hierarchy ("/sys/fs/cgroup/cpu/system.slice/app.service")."""
    if path == "/":
        return "/", ""  # every process, whatever is mounted
    try:
        mounts = _mounts(read("/", "proc/self/mountinfo"))
    except Unreadable:
        mounts = []
    cpu = cpu_hierarchy(mounts)
    if cpu is None:
        return None, "no cgroup hierarchy with the cpu controller is mounted here"
    real = os.path.realpath(path) if os.path.exists(path) else path  # /sys/fs/cgroup/cpu -> cpu,cpuacct
    for m in sorted(mounts, key=lambda m: -len(m.point)):
        point = "/" + m.point
        if real != point and not real.startswith(point.rstrip("/") + "/"):
            continue
        if (m.v2, m.controllers) != (cpu.v2, cpu.controllers):
            return None, (f"a directory of the {_hierarchy_name(m)} hierarchy; parinfo groups processes by "
                          f"the {_hierarchy_name(cpu)} hierarchy, mounted at /{cpu.point}")
        if not os.path.isdir(real):
            return None, "no such cgroup"
        return "/" + "/".join(p for p in (m.root.strip("/"), real[len(point):].strip("/")) if p), ""
    mroot = cpu.root.rstrip("/")
    if mroot and path != mroot and not path.startswith(mroot + "/"):
        return None, f"no such cgroup here (the {_hierarchy_name(cpu)} hierarchy is mounted from {cpu.root})"
    if not os.path.isdir(os.path.join("/", cpu.point, path[len(mroot):].strip("/"))):
        return None, "no such cgroup"
    return path, ""


def _memberships(text: str, rel: str) -> tuple[str | None, dict[str, str]]:
    """Parse /proc/<pid>/cgroup: (v2 path or None, {v1 controller: path})."""
    v2: str | None = None
    v1: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            raise garbage(rel, line)
        hier, controllers, path = parts
        if hier == "0" and controllers == "":
            v2 = path
        else:
            for c in controllers.split(","):
                v1[c] = path
    return v2, v1


def _leaf(root: str, mount: _Mount, path: str, notes: list[str]) -> str:
    """The directory (relative to root) of cgroup ``path`` under ``mount``."""
    mroot = mount.root.rstrip("/")
    if mroot == "":
        sub = path
    elif path == mroot or path.startswith(mroot + "/"):
        sub = path[len(mroot):]
    else:
        sub = None
    leaf = "/".join(p for p in (mount.point, (sub or "").strip("/")) if p)
    if sub is None or not os.path.isdir(os.path.join(root, leaf)):
        why = "is outside the mount's root" if sub is None else "does not exist"
        notes.append(f"cgroup {path} {why} under {shown(mount.point)} (mount root {mount.root}); "
                     f"used the mount point")
        return mount.point
    return leaf


def _ancestors(leaf: str, top: str) -> list[str]:
    """leaf, its parent, ... up to and including top (all relative to root)."""
    out = [leaf]
    while leaf != top and "/" in leaf and len(leaf) > len(top):
        leaf = leaf.rsplit("/", 1)[0]
        out.append(leaf)
    return out


def _v2_quota(root: str, d: str) -> tuple[float | None, str]:
    rel = f"{d}/cpu.max"
    text = read(root, rel)
    parts = text.split()
    try:
        period = int(parts[1]) if len(parts) > 1 else 100000
        quota = None if parts[0] == "max" else int(parts[0])
    except ValueError:
        raise garbage(rel, text) from None
    if (quota is not None and quota <= 0) or period <= 0 or len(parts) > 2:
        raise garbage(rel, text)
    return None if quota is None else quota / period, rel


def _v1_quota(root: str, d: str) -> tuple[float | None, str]:
    rel = f"{d}/cpu.cfs_quota_us"
    quota = read_int(root, rel)
    if quota == -1:
        return None, rel
    period = read_int(root, f"{d}/cpu.cfs_period_us")
    if quota <= 0:
        raise garbage(rel, str(quota))
    if period <= 0:
        raise garbage(f"{d}/cpu.cfs_period_us", str(period))
    return quota / period, rel


def quota_at(root: str, d: str, version: str) -> float | None:
    """The quota set at cgroup directory ``d`` (relative to ``root``) of a ``version`` ("v1", "v2")
    hierarchy, in CPUs; None when none is set there (no file: the root cgroup, or on v2 the cpu
    controller not enabled at that level). Raise Unreadable when its files cannot be read or hold garbage."""
    name, reader = ("cpu.max", _v2_quota) if version == "v2" else ("cpu.cfs_quota_us", _v1_quota)
    if not os.path.lexists(os.path.join(root, d, name)):
        return None
    quota, _ = reader(root, d)
    return quota


def _walk_quota(root: str, leaf: str, top: str, quota_file: str, reader: Callable[..., Any],
                facts: CgroupFacts, problems: list[str]) -> tuple[float | None, float | None, float | None]:
    """Keep the tightest quota of ``leaf`` and its ancestors up to ``top`` in ``facts``; return
    (the leaf's own quota, the tightest of this hierarchy, the one nearest ``top``), which some
    runtimes read alone."""
    own = tightest = outer = None
    for d in _ancestors(leaf, top):
        if not os.path.lexists(os.path.join(root, d, quota_file)):
            continue  # the root cgroup, or (v2) the cpu controller is not enabled at this level
        try:
            quota, rel = reader(root, d)
        except Unreadable as exc:
            problems.append(str(exc))
            continue
        if d == leaf:
            own = quota
        if quota is not None and (tightest is None or quota < tightest):
            tightest = quota
        outer = quota if quota is not None else outer
        if quota is not None and (facts.quota is None or quota < facts.quota):
            facts.quota, facts.quota_source = quota, file(shown(rel))
    return own, tightest, outer


def _first_cpuset(root: str, leaf: str, top: str, names: tuple[str, ...]) -> tuple[tuple[int, ...], str] | None:
    """The CPU list of the nearest cgroup (leaf first) that has one of ``names``."""
    for d in _ancestors(leaf, top):
        for name in names:
            rel = f"{d}/{name}"
            if os.path.lexists(os.path.join(root, rel)):
                return read_cpu_list(root, rel), shown(rel)
    return None


_V1_CPUSET = ("cpuset.effective_cpus", "cpuset.cpus")
_V2_CPUSET = ("cpuset.cpus.effective",)


#: One hierarchy to read: its mount, the cgroup path in it, (quota file, its reader) or None, cpuset file names.
_Job = tuple[_Mount, str, "tuple[str, Callable[..., Any]] | None", tuple[str, ...]]


def _jobs(mounts: list[_Mount], v2_path: str | None, v1_paths: dict[str, str]) -> list[_Job]:
    """(mount, cgroup path, quota file and reader or None, cpuset file names) for each hierarchy
    that can limit CPUs; the first mount of a hierarchy wins (later ones are bind mounts)."""
    jobs: list[_Job] = []
    seen: set[str] = set()
    for m in mounts:
        if m.v2:
            if v2_path is not None and "v2" not in seen:
                seen.add("v2")
                jobs.append((m, v2_path, ("cpu.max", _v2_quota), _V2_CPUSET))
            continue
        v1: tuple[tuple[str, tuple[str, Callable[..., Any]] | None, tuple[str, ...]], ...] = (
            ("cpu", ("cpu.cfs_quota_us", _v1_quota), ()), ("cpuset", None, _V1_CPUSET))
        for ctrl, quota, names in v1:
            if ctrl in m.controllers and ctrl in v1_paths and ctrl not in seen:
                seen.add(ctrl)
                jobs.append((m, v1_paths[ctrl], quota, names))
    return jobs


def cgroup_facts(root: str, handle: Proc | None = None) -> CgroupFacts:
    """The CPU quota and cpuset of process ``handle`` (default: this one) as read under ``root``."""
    facts = CgroupFacts()
    proc = this_or(handle, root)
    try:
        mounts = _mounts(read(root, "proc/self/mountinfo"))
    except Unreadable as exc:
        facts.unknown["quota"] = facts.unknown["cpuset"] = str(exc)
        return facts
    if not mounts:
        return facts  # no cgroup file system mounted: nothing limits the process
    has_v1, has_v2 = any(not m.v2 for m in mounts), any(m.v2 for m in mounts)
    facts.version = "hybrid" if has_v1 and has_v2 else "v2" if has_v2 else "v1"
    try:
        v2_path, v1_paths = _memberships(proc.text("cgroup"), proc.shown("cgroup"))
    except Unreadable as exc:
        facts.unknown["quota"] = facts.unknown["cpuset"] = str(exc)
        return facts
    facts.path = v1_paths.get("cpu", v2_path)

    problems: list[str] = []
    has_v1_cpu = any(not m.v2 and "cpu" in m.controllers for m in mounts) and "cpu" in v1_paths
    cpusets: list[tuple[tuple[int, ...], str]] = []
    cpuset_problem = None
    for mount, path, quota, names in _jobs(mounts, v2_path, v1_paths):
        leaf = _leaf(root, mount, path, facts.notes)
        if quota is not None:
            own, tightest, outer = _walk_quota(root, leaf, mount.point, *quota, facts, problems)
            if mount.v2:
                facts.v2_quota, facts.outer_v2_quota = tightest, outer
                if not has_v1_cpu:
                    facts.leaf_quota = own
            else:
                facts.leaf_quota = own
        if names:
            try:
                found = _first_cpuset(root, leaf, mount.point, names)
            except Unreadable as exc:
                cpuset_problem = str(exc)
                continue
            if found is not None:
                cpusets.append(found)
    facts.notes = list(dict.fromkeys(facts.notes))

    if problems:
        if facts.quota is None:
            facts.unknown["quota"] = "; ".join(problems)
        else:
            facts.notes.append("quota may be tighter than shown: " + "; ".join(problems))
    if cpuset_problem is not None and not cpusets:
        facts.unknown["cpuset"] = cpuset_problem
    elif cpusets:
        cpus = set(cpusets[0][0])
        for other, _ in cpusets[1:]:
            cpus &= set(other)
        facts.cpuset = tuple(sorted(cpus))
        facts.cpuset_files = tuple(src for _, src in cpusets)
        facts.cpuset_source = file(", ".join(facts.cpuset_files))
    return facts


@record(frozen=True)
class CgroupDir:
    """Where one controller's files for a process lie: ``leaf`` (its cgroup) and ``top`` (the mount
    point), both relative to the root; ``levels`` is the leaf and its ancestors up to the top."""

    version: str  # "v1" or "v2"
    leaf: str
    top: str
    found: bool = True  # False: the process's cgroup is not under the mount here, and leaf is the mount point

    @property
    def levels(self) -> list[str]:
        return _ancestors(self.leaf, self.top)


def controller_dir(root: str, controller: str, handle: Proc | None = None) -> CgroupDir | None:
    """The cgroup directory of process ``handle`` (default: this one) for ``controller`` ("cpu",
    "cpuacct", "memory", "pids"): a v1 hierarchy that has it wins, else the v2 hierarchy. None when
    no cgroup file system is mounted; raise Unreadable when mountinfo or the process's cgroup file
    cannot be read (a process that is gone: its /proc directory no longer exists)."""
    mounts = _mounts(read(root, "proc/self/mountinfo"))
    if not mounts:
        return None
    proc = this_or(handle, root)
    v2_path, v1_paths = _memberships(proc.text("cgroup"), proc.shown("cgroup"))
    notes: list[str] = []
    for m in mounts:
        if not m.v2 and controller in m.controllers and controller in v1_paths:
            leaf = _leaf(root, m, v1_paths[controller], notes)
            return CgroupDir("v1", leaf, m.point, not notes)
    for m in mounts:
        if m.v2 and v2_path is not None:
            leaf = _leaf(root, m, v2_path, notes)
            return CgroupDir("v2", leaf, m.point, not notes)
    return None


def cgroup_path(root: str, handle: Proc | None = None) -> str | None:
    """The cgroup of process ``handle`` (default: this one) as its /proc/PID/cgroup names it for
    the CPU controller (a v1 cpu hierarchy's, else the v2 one), as :attr:`CgroupFacts.path` is,
    without reading the limits; None when it names none. Raises Unreadable when the file cannot be read."""
    proc = this_or(handle, root)
    v2_path, v1_paths = _memberships(proc.text("cgroup"), proc.shown("cgroup"))
    return v1_paths.get("cpu", v2_path)


def unified_dir(root: str, handle: Proc | None = None) -> CgroupDir | None:
    """The process's directory in the v2 (unified) hierarchy, where cpu.pressure, memory.max and
    pids.current live on v2 and hybrid machines; None without one. Raises like controller_dir."""
    return controller_dir(root, "", handle)
