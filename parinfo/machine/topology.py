"""Facts about the machine: CPUs, cores, sockets, NUMA nodes, affinity, cgroup quota, usable CPUs.

Public entry point: :func:`machine_facts`. Every field that cannot be read is None and its reason
is in ``MachineFacts.unknown`` so the report can say "unknown (reason)". Everything is read under a
``root`` directory so that tests can pass a fake procfs/sysfs/cgroup tree (tests/fake_trees.py).

The sysfs topology is read once per root and cached; affinity and cgroup files are re-read on every
call because a process can be re-pinned or moved to another cgroup while it runs.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from parinfo.errors import UsageError
from parinfo.machine import cgroup as _cgroup, sysfs as _sysfs
from parinfo.machine.cpulist import parse_cpu_list
from parinfo.payload import flag, int_lists, integer, ints, number, section, text, text_map, texts
from parinfo.record import record

USABLE_RULE = "min(affinity CPUs, cpuset CPUs, floor(cgroup quota)), at least 1"


@record(frozen=True)
class MachineFacts:
    """What the machine and this process's constraints allow. CPU lists are sorted tuples of ids."""

    logical_cpus: int | None
    physical_cores: int | None
    sockets: int | None
    numa_nodes: tuple[tuple[int, ...], ...]
    smt: bool | None
    core_siblings: tuple[tuple[int, ...], ...]
    core_types: dict[str, tuple[int, ...]]
    affinity: tuple[int, ...]
    cpuset: tuple[int, ...] | None
    quota: float | None
    quota_source: str
    usable_cpus: int
    usable_physical_cores: int
    usable_rule: str = USABLE_RULE
    unknown: dict[str, str] = field(default_factory=dict)
    cgroup_version: str | None = None
    cgroup_path: str | None = None
    cpuset_source: str = "none"
    notes: tuple[str, ...] = ()

    @property
    def usable_cpu_list(self) -> tuple[int, ...]:
        """Affinity CPUs that are also in the cpuset (the CPUs threads may run on)."""
        if self.cpuset is None:
            return self.affinity
        allowed = set(self.cpuset)
        return tuple(c for c in self.affinity if c in allowed) or self.affinity

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MachineFacts:
        """The facts of a report's ``machine`` section (:meth:`to_dict`, or part of it: a fleet worker
        sends a few fields). A missing or odd field is unknown (None, or empty); missing usable CPUs
        are worked out again by USABLE_RULE from what is there, and a missing affinity is taken to be
        the usable CPU list (a part of it), each with a note."""
        d = section(data)
        unknown, notes = text_map(d.get("unknown")), texts(d.get("notes"))
        usable_list = ints(d.get("usable_cpu_list"))
        affinity = ints(d.get("affinity"))
        if not affinity and usable_list:
            affinity = usable_list
            unknown.setdefault("affinity", "not in the report; its usable CPU list stands for it")
        cpuset = None if d.get("cpuset") is None else ints(d.get("cpuset"))
        quota = number(d.get("quota"))
        usable = integer(d.get("usable_cpus"))
        if usable is None or usable < 1:
            usable = usable_from(len(usable_list or affinity) or 1, len(cpuset) if cpuset else None, quota)
            notes.append(f"usable CPUs not in the report: worked out again as {USABLE_RULE}")
        return cls(
            logical_cpus=integer(d.get("logical_cpus")),
            physical_cores=integer(d.get("physical_cores")),
            sockets=integer(d.get("sockets")),
            numa_nodes=int_lists(d.get("numa_nodes")),
            smt=flag(d.get("smt")),
            core_siblings=int_lists(d.get("core_siblings")),
            core_types={str(k): ints(v) for k, v in section(d.get("core_types")).items()},
            affinity=affinity,
            cpuset=cpuset,
            quota=quota,
            quota_source=text(d.get("quota_source")) or "none",
            usable_cpus=usable,
            usable_physical_cores=integer(d.get("usable_physical_cores")) or usable,
            usable_rule=text(d.get("usable_rule")) or USABLE_RULE,
            unknown=unknown,
            cgroup_version=text(d.get("cgroup_version")),
            cgroup_path=text(d.get("cgroup_path")),
            cpuset_source=text(d.get("cpuset_source")) or "none",
            notes=tuple(notes),
        )

    def to_dict(self) -> dict:
        """The report's ``machine`` section (JSON-ready): the fields, then ``usable_cpu_list``."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["numa_nodes"] = [list(n) for n in self.numa_nodes]
        d["core_siblings"] = [list(c) for c in self.core_siblings]
        d["core_types"] = {k: list(v) for k, v in self.core_types.items()}
        d["affinity"] = list(self.affinity)
        d["cpuset"] = None if self.cpuset is None else list(self.cpuset)
        d["usable_cpu_list"] = list(self.usable_cpu_list)
        d["unknown"] = dict(self.unknown)
        d["notes"] = list(self.notes)
        return d


def usable_from(affinity: int, cpuset: int | None, quota: float | None) -> int:
    """Apply USABLE_RULE: the fewest CPUs any constraint allows; a fractional quota is floored
    (running more threads than the quota pays for gets them throttled), but never below 1."""
    n = affinity
    if cpuset is not None:
        n = min(n, cpuset)
    if quota is not None:
        n = min(n, max(1, math.floor(quota)))
    return max(1, n)


def machine_facts(root: str = "/", pid: int | None = None) -> MachineFacts:
    """Read the machine's facts (under ``root`` for tests) for process ``pid`` (default: this one).

    Never raises for a missing or odd file (that field becomes None, with the reason in ``unknown``);
    raises UsageError only for a ``pid`` that names no process.
    """
    root = os.path.abspath(root)
    topo = _sysfs.topology(root)
    unknown = dict(topo.unknown)
    notes = list(topo.notes)
    if pid is not None and pid == os.getpid() and root == "/":
        pid = None
    affinity = _affinity(root, pid, topo.online, unknown)
    cg = _cgroup.cgroup_facts(root, pid)
    unknown.update(cg.unknown)
    notes.extend(cg.notes)

    allowed = set(cg.cpuset) if cg.cpuset is not None else None
    usable_list = [c for c in affinity if allowed is None or c in allowed] or list(affinity)
    usable = usable_from(len(usable_list), None if cg.cpuset is None else len(cg.cpuset), cg.quota)
    if topo.cores:
        usable_set = set(usable_list)
        usable_cores = sum(1 for core in topo.cores if usable_set.intersection(core))
    physical = len(topo.cores) or None
    if physical is None and root == "/":
        physical = _psutil_cores(notes)
        if physical is not None:
            unknown.pop("physical_cores", None)
    if not topo.cores:
        usable_cores = usable if physical is None else physical  # core layout unknown: a bound
    for name in ("physical_cores", "sockets", "smt"):
        if name not in unknown and (physical if name == "physical_cores" else getattr(topo, name)) is None:
            unknown[name] = unknown.get("logical_cpus", "sysfs has no CPU topology")
    return MachineFacts(
        logical_cpus=None if topo.online is None else len(topo.online),
        physical_cores=physical,
        sockets=topo.sockets,
        numa_nodes=topo.numa_nodes,
        smt=topo.smt,
        core_siblings=topo.cores,
        core_types=dict(topo.core_types),
        affinity=affinity,
        cpuset=cg.cpuset,
        quota=cg.quota,
        quota_source=cg.quota_source,
        usable_cpus=usable,
        usable_physical_cores=max(1, min(usable, usable_cores)),
        unknown=unknown,
        cgroup_version=cg.version,
        cgroup_path=cg.path,
        cpuset_source=cg.cpuset_source,
        notes=tuple(notes),
    )


def _psutil_cores(notes: list[str]) -> int | None:
    """psutil's physical core count (it also parses /proc/cpuinfo) when sysfs has no topology."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except Exception:  # psutil failing here must not break the report
        return None
    if n:
        notes.append("physical cores from psutil (sysfs has no core topology)")
    return n or None


_ALLOWED = re.compile(r"^Cpus_allowed_list:\s*(\S*)\s*$", re.MULTILINE)


def _affinity(root: str, pid: int | None, online: tuple[int, ...] | None,
              unknown: dict[str, str]) -> tuple[int, ...]:
    """The CPUs the process may run on: sched_getaffinity on this machine, else /proc/<pid>/status."""
    if root == "/":
        try:
            return tuple(sorted(os.sched_getaffinity(pid or 0)))
        except ProcessLookupError:
            raise UsageError(f"no process with pid {pid} (check the pid with ps)") from None
        except OSError:
            pass  # not permitted: /proc/<pid>/status still says it
    proc = f"proc/{'self' if pid is None else pid}"
    if pid is not None and not os.path.isdir(os.path.join(root, proc)):
        raise UsageError(f"no process with pid {pid}: {_sysfs.shown(proc)} does not exist "
                         f"(check the pid with ps)")
    rel = f"{proc}/status"
    try:
        text = _sysfs.read(root, rel)
        m = _ALLOWED.search(text)
        if m is None:
            raise _sysfs.Unreadable(f"no Cpus_allowed_list line in {_sysfs.shown(rel)}")
        try:
            return tuple(parse_cpu_list(m.group(1)))
        except ValueError:
            raise _sysfs.garbage(rel, m.group(0)) from None
    except _sysfs.Unreadable as exc:
        unknown["affinity"] = f"{exc}; assumed all online CPUs"
        return tuple(online or ())
