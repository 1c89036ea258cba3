"""A cgroup's own CPU use and members: what ``parinfo watch`` without ``--pid`` (the container view)
reads, so that it never reports the machine's figures as the cgroup's.

The cgroup is the one the CPU controller puts a process in (its quota and throttling counters live
there). Its CPU time comes from the cgroup itself, counted by the kernel for every thread that ran in
it or in a cgroup below it, including threads that ended during an interval: on v1 from
``cpuacct.usage`` (nanoseconds) of the cpuacct hierarchy, on v2 from ``cpu.stat``'s ``usage_usec``.
Its members are the processes of ``cgroup.procs`` in it and every cgroup below it (each directory
lists only the processes placed directly in it). Everything is read under ``root``; what cannot be
read gives an :class:`~parinfo.records.unknown.Unknown` with the reason, never an exception.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from parinfo.machine import cgroup as _cgroup
from parinfo.machine.sysfs import Empty, Missing, Unreadable, garbage, read, read_int, shown
from parinfo.records.record import record
from parinfo.records.unknown import Unknown

if TYPE_CHECKING:
    from parinfo.machine.procfs import Proc

#: The most cgroup directories read for one cgroup's members (a machine's root has a few hundred).
MAX_DIRS = 10_000


@record(frozen=True)
class CgroupUse:
    """One reading of a cgroup: ``cgroup`` (its directory as shown on the machine), its cumulative
    CPU time in nanoseconds (or why not), and the pids of its processes (or why not)."""

    cgroup: str | Unknown
    usage_ns: int | Unknown
    pids: tuple[int, ...] | Unknown


def _usage_v2(root: str, leaf: str) -> int:
    rel = f"{leaf}/cpu.stat"
    for line in read(root, rel).splitlines():
        name, _, value = line.partition(" ")
        if name == "usage_usec":
            try:
                return int(value) * 1000
            except ValueError:
                raise garbage(rel, line) from None
    raise Unreadable(f"no usage_usec in {shown(rel)}")


def _usage(root: str, proc: Proc | None, cpu: _cgroup.CgroupDir) -> int | Unknown:
    """The cumulative CPU time of ``cpu``'s cgroup: v2 ``cpu.stat``, v1 the cpuacct hierarchy's
    ``cpuacct.usage``, when that cgroup is the same one (else Unknown: it would count other threads)."""
    try:
        if cpu.version == "v2":
            return _usage_v2(root, cpu.leaf)
        acct = _cgroup.controller_dir(root, "cpuacct", proc)
        if acct is None or acct.version != "v1":
            return Unknown("no cpuacct hierarchy is mounted")
        if acct.leaf[len(acct.top):] != cpu.leaf[len(cpu.top):]:
            return Unknown(f"its cpuacct cgroup {shown(acct.leaf)} is not its cpu cgroup {shown(cpu.leaf)}")
        return read_int(root, f"{acct.leaf}/cpuacct.usage")
    except Unreadable as exc:
        return Unknown(str(exc))


def _pids(root: str, leaf: str) -> tuple[int, ...]:
    """The processes of cgroup ``leaf`` and of every cgroup below it."""
    out: set[int] = set()
    for n, (d, _, _) in enumerate(os.walk(os.path.join(root, leaf))):
        if n >= MAX_DIRS:
            raise Unreadable(f"more than {MAX_DIRS} cgroups under {shown(leaf)}")
        rel = os.path.relpath(os.path.join(d, "cgroup.procs"), root)
        try:
            text = read(root, rel)
        except (Missing, Empty):
            continue  # removed while walked, or no process placed directly in it
        try:
            out.update(int(x) for x in text.split())
        except ValueError:
            raise garbage(rel, text[:80]) from None
    return tuple(sorted(out))


def cgroup_use(root: str = "/", proc: Proc | None = None) -> CgroupUse:
    """The CPU cgroup of process ``proc`` (default: this one): its usage and its processes, now."""
    root = os.path.abspath(root)
    try:
        where = _cgroup.controller_dir(root, "cpu", proc)
    except Unreadable as exc:
        why = Unknown(str(exc))
        return CgroupUse(why, why, why)
    if where is None:
        why = Unknown("no cgroup hierarchy is mounted")
        return CgroupUse(why, why, why)
    try:
        pids: tuple[int, ...] | Unknown = _pids(root, where.leaf)
    except Unreadable as exc:
        pids = Unknown(str(exc))
    return CgroupUse(shown(where.leaf), _usage(root, proc, where), pids)
