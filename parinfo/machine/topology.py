"""Facts about the machine: CPUs, cores, sockets, NUMA nodes, affinity, cgroup quota, usable CPUs.

Public entry point: :func:`machine_facts`. Every field that cannot be read is None and its reason
is in ``MachineFacts.unknown`` so the report can say "unknown (reason)". Everything is read under a
``root`` directory so that tests can pass a fake procfs/sysfs/cgroup tree (tests/fake_trees.py).

The sysfs topology is read once per root and cached; affinity and cgroup files are re-read on every
call because a process can be re-pinned or moved to another cgroup while it runs.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import field, replace
from typing import TYPE_CHECKING, Annotated, Any

from parinfo.errors import UsageError
from parinfo.machine import cgroup as _cgroup, rounding as _rounding, scheduler as _scheduler, sysfs as _sysfs
from parinfo.machine.cpulist import parse_cpu_list
from parinfo.records.convert import LOCAL, above, among, between, doc
from parinfo.records.payload import integer, ints, number, section, text, text_map, texts
from parinfo.records.record import record
from parinfo.records.source import NO_LIMIT, PARINFO_DEFAULT, Source, argument
from parinfo.records.unknown import Unknown

if TYPE_CHECKING:
    from parinfo.machine.procfs import Proc


def usable_rule(rounding: str = _rounding.DEFAULT, allocation: bool = False) -> str:
    """The usable-CPU rule as text: the quota's rounding, and the scheduler's allocation when there is one."""
    slurm = ", Slurm allocation" if allocation else ""
    return f"min(affinity CPUs, cpuset CPUs, {rounding}(cgroup quota){slurm}), at least 1"


USABLE_RULE = usable_rule()
#: A CPU's (or a NUMA node's) number as the kernel gives it.
CpuId = Annotated[int, between(0)]
#: The source of a quota rounding given to :func:`machine_facts` by its caller.
QUOTA_ROUNDING_ARGUMENT = argument("quota_rounding", "argument")


@record(frozen=True)
class MachineFacts:
    """What the machine and this process's constraints allow. CPU lists are sorted tuples of ids."""

    logical_cpus: int | None
    physical_cores: int | None
    sockets: int | None
    numa_nodes: tuple[tuple[CpuId, ...], ...]
    smt: bool | None
    core_siblings: tuple[tuple[CpuId, ...], ...]
    core_types: dict[str, tuple[CpuId, ...]]
    affinity: tuple[CpuId, ...]
    cpuset: tuple[CpuId, ...] | None
    quota: Annotated[float, above(0)] | None
    quota_source: Source = field(metadata={"missing": NO_LIMIT})
    usable_cpus: Annotated[int, between(1)]
    usable_physical_cores: Annotated[int, between(1)]
    usable_rule: str = USABLE_RULE
    unknown: dict[str, str] = field(default_factory=dict)
    cgroup_version: str | None = None
    cgroup_path: str | None = None
    cpuset_source: Source = NO_LIMIT
    notes: tuple[str, ...] = ()
    quota_rounding: Annotated[str, among(*_rounding.ROUNDINGS)] = _rounding.DEFAULT
    quota_rounding_source: Source = PARINFO_DEFAULT
    allocation: Annotated[int, between(1)] | None = None
    allocation_source: Source = NO_LIMIT
    usable_by_rule: dict[str, Annotated[int, between(1)]] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)
    numa_node_ids: tuple[CpuId, ...] = field(default=(), metadata=doc(
        "the kernel's number of each entry of numa_nodes (added within version 2)"))
    #: The CPU request (millicores) of the process's container in a Kubernetes pod, and where it was
    #: read (None: in no pod): what a profile's ``pod_cpus`` is bounded by when no quota binds
    #: (:mod:`parinfo.machine.pod_cpus`). Not in the JSON: the ``pod`` section says it.
    pod_request: Annotated[int, between(0)] | Unknown | None = field(default=None, metadata=LOCAL)
    pod_request_source: Source = field(default=NO_LIMIT, metadata=LOCAL)

    @property
    def node_ids(self) -> tuple[int, ...]:
        """The kernel's number of each of ``numa_nodes`` (0, 1, ... where not known)."""
        if len(self.numa_node_ids) == len(self.numa_nodes):
            return self.numa_node_ids
        return tuple(range(len(self.numa_nodes)))

    @property
    def usable_cpu_list(self) -> tuple[int, ...]:
        """Affinity CPUs that are also in the cpuset (the CPUs threads may run on)."""
        if self.cpuset is None:
            return self.affinity
        allowed = set(self.cpuset)
        return tuple(c for c in self.affinity if c in allowed) or self.affinity

    _json_extra = (("usable_cpu_list", tuple[CpuId, ...]),)  # derived: written by _json_out, read by _json_in

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The report's ``machine`` section: the fields (each NUMA node's number as the kernel gives
        it, or 0, 1, ... where not known), then ``usable_cpu_list``."""
        return {**data, "numa_node_ids": list(self.node_ids), "usable_cpu_list": list(self.usable_cpu_list)}

    @classmethod
    def _json_in(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """A report's ``machine`` section (or part of it: a fleet worker sends a few fields) with
        what a record needs worked out: missing usable CPUs by USABLE_RULE from what is there, and
        a missing affinity taken to be the usable CPU list (a part of it), each with a note."""
        d = dict(data)
        unknown, notes = text_map(d.get("unknown")), texts(d.get("notes"))
        usable_list = ints(d.get("usable_cpu_list"))
        affinity = ints(d.get("affinity"))
        if not affinity and usable_list:
            affinity = usable_list
            unknown.setdefault("affinity", "not in the report; its usable CPU list stands for it")
        cpuset = None if d.get("cpuset") is None else ints(d.get("cpuset"))
        rounding = text(d.get("quota_rounding"))
        rounding = rounding if rounding in _rounding.ROUNDINGS else _rounding.DEFAULT
        allocation = integer(d.get("allocation"))
        allocation = allocation if allocation is not None and allocation > 0 else None
        usable = integer(d.get("usable_cpus"))
        if usable is None or usable < 1:
            usable = usable_from(len(usable_list or affinity) or 1, len(cpuset) if cpuset else None,
                                 number(d.get("quota")), rounding, allocation)
            rule = usable_rule(rounding, bool(allocation))
            notes.append(f"usable CPUs not in the report: worked out again as {rule}")
        d.update(unknown=unknown, notes=notes, affinity=list(affinity), cpuset=cpuset, quota_rounding=rounding,
                 allocation=allocation, usable_cpus=usable,
                 usable_physical_cores=integer(d.get("usable_physical_cores")) or usable,
                 usable_rule=text(d.get("usable_rule")) or USABLE_RULE,
                 usable_by_rule={k: v for k, v in section(d.get("usable_by_rule")).items()
                                 if isinstance(v, int) and not isinstance(v, bool) and v > 0})
        return d

    def rounded(self, rule: str, source: Source) -> MachineFacts:
        """These facts with the quota rounded by ``rule`` (one of ``ROUNDINGS``), said to come from
        ``source`` (a profile's ``quota_rounding``): the usable CPUs and cores worked out again."""
        usable_list = self.usable_cpu_list
        usable = usable_from(len(usable_list) or 1, None if self.cpuset is None else len(self.cpuset),
                             self.quota, rule, self.allocation)
        cores = _usable_cores(self.core_siblings, usable_list, self.physical_cores, usable)
        return replace(self, usable_cpus=usable, usable_physical_cores=max(1, min(usable, cores)),
                       usable_rule=usable_rule(rule, self.allocation is not None),
                       quota_rounding=rule, quota_rounding_source=source)


def usable_from(affinity: int, cpuset: int | None, quota: float | None, rounding: str = _rounding.DEFAULT,
                allocation: int | None = None) -> int:
    """Apply :func:`usable_rule`: the fewest CPUs any constraint allows; a fractional quota is rounded
    by ``rounding`` (floor by default: running more threads than the quota pays for gets them
    throttled), but never below 1; a scheduler's ``allocation`` bounds it too."""
    n = affinity
    if cpuset is not None:
        n = min(n, cpuset)
    if quota is not None:
        n = min(n, _rounding.round_quota(quota, rounding))
    if allocation is not None:
        n = min(n, allocation)
    return max(1, n)


def _usable_cores(cores: tuple[tuple[int, ...], ...], usable_list: tuple[int, ...] | list[int],
                  physical: int | None, usable: int) -> int:
    """Physical cores among the usable CPUs; without a core layout, the physical cores (a bound) or
    the usable CPUs."""
    if cores:
        usable_set = set(usable_list)
        return sum(1 for core in cores if usable_set.intersection(core))
    return usable if physical is None else physical


def _environment(root: str, handle: Proc | None, unknown: dict[str, str]) -> dict[str, str]:
    """The variables of the process that bear on its usable CPUs: this process's own environment,
    else /proc/<pid or self>/environ under ``root`` (a missing file: none set)."""
    wanted = (*_scheduler.VARIABLES, _rounding.ROUNDING_VAR)
    if handle is None and root == "/":
        return {k: os.environ[k] for k in wanted if k in os.environ}
    from parinfo.machine.procfs import parse_environ, this_or

    proc = this_or(handle, root)
    if not os.path.lexists(proc.path("environ")):
        return {}
    try:
        block = proc.read("environ", 1 << 22)
    except UsageError as exc:
        unknown["allocation"] = str(exc)
        return {}
    return {k: v for k, v in parse_environ(block).items() if k in wanted}


def machine_facts(root: str = "/", proc: Proc | None = None, *, environ: Mapping[str, str] | None = None,
                  quota_rounding: str | None = None, rounding_source: Source = QUOTA_ROUNDING_ARGUMENT) -> MachineFacts:
    """Read the machine's facts (under ``root`` for tests) for process ``proc`` (its handle; default:
    this one).

    The Slurm variables and PARINFO_QUOTA_ROUNDING come from ``environ`` when given, else from the
    process's environment. ``quota_rounding`` (floor, ceil or nearest; from ``rounding_source``, e.g.
    a profile) wins over the variable. Never raises for a missing or odd file or variable (the field
    becomes None, with the reason in ``unknown``, or the variable is listed in ``invalid``); raises
    UsageError only for a ``proc`` that names no process or an unknown ``quota_rounding``.
    """
    root = os.path.abspath(root)
    topo = _sysfs.topology(root)
    unknown = dict(topo.unknown)
    notes = list(topo.notes)
    if proc is not None and proc.pid == os.getpid() and root == "/":
        proc = None
    affinity = _affinity(root, proc, topo.online, unknown)
    cg = _cgroup.cgroup_facts(root, proc)
    unknown.update(cg.unknown)
    notes.extend(cg.notes)

    env = dict(environ) if environ is not None else _environment(root, proc, unknown)
    invalid: dict[str, str] = {}
    rule, rule_source, problem = _rounding.rounding_from_env(env)
    if problem is not None:
        invalid[_rounding.ROUNDING_VAR] = problem
    if quota_rounding is not None:
        if quota_rounding not in _rounding.ROUNDINGS:
            raise UsageError(f"quota rounding {quota_rounding!r}: use one of {', '.join(_rounding.ROUNDINGS)}")
        rule, rule_source = quota_rounding, rounding_source
    job = _scheduler.allocation(env)
    invalid.update(job.invalid)

    allowed = set(cg.cpuset) if cg.cpuset is not None else None
    usable_list = [c for c in affinity if allowed is None or c in allowed] or list(affinity)
    usable = usable_from(len(usable_list), None if cg.cpuset is None else len(cg.cpuset), cg.quota, rule, job.cpus)
    physical = len(topo.cores) or None
    if physical is None and root == "/":
        physical = _psutil_cores(notes)
        if physical is not None:
            unknown.pop("physical_cores", None)
    usable_cores = _usable_cores(topo.cores, usable_list, physical, usable)
    logical = None if topo.online is None else len(topo.online)
    by_rule = _rounding.usable_by_rule(len(usable_list) or 1, logical, cg.quota, cg.leaf_quota, cg.v2_quota,
                                       _rounding.loky_quota(root), physical=physical, environ=env,
                                       physical_in_affinity=_cores_in(topo.cores, tuple(usable_list)),
                                       outer_v2_quota=cg.outer_v2_quota if cg.version == "v2" else None)
    request, request_source = _pod_request(root, proc, cg.path)
    for name in ("physical_cores", "sockets", "smt"):
        if name not in unknown and (physical if name == "physical_cores" else getattr(topo, name)) is None:
            unknown[name] = unknown.get("logical_cpus", "sysfs has no CPU topology")
    return MachineFacts(
        logical_cpus=logical,
        physical_cores=physical,
        sockets=topo.sockets,
        numa_nodes=topo.numa_nodes,
        numa_node_ids=topo.numa_node_ids,
        smt=topo.smt,
        core_siblings=topo.cores,
        core_types=dict(topo.core_types),
        affinity=affinity,
        cpuset=cg.cpuset,
        quota=cg.quota,
        quota_source=cg.quota_source,
        usable_cpus=usable,
        usable_physical_cores=max(1, min(usable, usable_cores)),
        usable_rule=usable_rule(rule, job.cpus is not None),
        unknown=unknown,
        cgroup_version=cg.version,
        cgroup_path=cg.path,
        cpuset_source=cg.cpuset_source,
        notes=tuple(notes),
        quota_rounding=rule,
        quota_rounding_source=rule_source,
        allocation=job.cpus, allocation_source=job.source,
        usable_by_rule=by_rule,
        invalid=invalid,
        pod_request=request, pod_request_source=request_source,
    )


def _pod_request(root: str, proc: Proc | None, path: str | None) -> tuple[int | Unknown | None, Source]:
    """The CPU request of the process's container when its cgroup is a pod's (the pod model is read
    only then: outside a pod this is one look at the path), else (None, none)."""
    from parinfo.machine.pod_path import pod_path

    if path is None or pod_path(path) is None:
        return None, NO_LIMIT
    from parinfo.machine.pod_request import container_request

    return container_request(root, proc, path)


def _cores_in(cores: tuple[tuple[int, ...], ...], cpus: tuple[int, ...]) -> int | None:
    """The physical cores with a CPU in ``cpus`` (None where sysfs has no core topology)."""
    allowed = set(cpus)
    return sum(1 for core in cores if allowed & set(core)) or None


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


#: How old the machine's facts may grow in a long-running reader before it reads them again (the
#: runtime's quota follower, the host scanner, the watch sampler): quotas and cpusets change under them.
REREAD_S = 1.0

_ALLOWED = re.compile(r"^Cpus_allowed_list:\s*(\S*)\s*$", re.MULTILINE)


def _affinity(root: str, handle: Proc | None, online: tuple[int, ...] | None,
              unknown: dict[str, str]) -> tuple[int, ...]:
    """The CPUs the process may run on: sched_getaffinity on this machine, else /proc/<pid>/status."""
    pid = None if handle is None else handle.pid
    if root == "/":
        try:
            return tuple(sorted(os.sched_getaffinity(pid or 0)))
        except ProcessLookupError:
            raise UsageError(f"no process with pid {pid} (check the pid with ps)") from None
        except OSError:
            pass  # not permitted: /proc/<pid>/status still says it
    from parinfo.machine.procfs import this_or

    proc = this_or(handle, root)
    if pid is not None and not proc.exists():
        raise UsageError(f"no process with pid {pid}: {proc.shown('')[:-1]} does not exist "
                         f"(check the pid with ps)")
    try:
        text = proc.text("status", 1 << 16)
        m = _ALLOWED.search(text)
        if m is None:
            raise _sysfs.Unreadable(f"no Cpus_allowed_list line in {proc.shown('status')}")
        try:
            return tuple(parse_cpu_list(m.group(1)))
        except ValueError:
            raise _sysfs.garbage(proc.shown("status"), m.group(0)) from None
    except _sysfs.Unreadable as exc:
        unknown["affinity"] = f"{exc}; assumed all online CPUs"
        return tuple(online or ())
