"""How a host scan is judged: the cgroup whose limit binds each process (:class:`CgroupInfo`), the
families of like processes (:func:`families`), and each cgroup's row, CPU use, throttling, pressure
and findings (:func:`judge`), counted over the time since the last reading (:class:`Reading`).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import field
from typing import TYPE_CHECKING

from parinfo.diagnostics import fleet_rules
from parinfo.diagnostics.fleet_rows import ProcessLoad
from parinfo.host import adoption
from parinfo.host.model import CgroupRow, Family, HostProcess, HostReport
from parinfo.process import libraries as reg
from parinfo.records.record import record
from parinfo.records.unknown import Unknown, in_words

if TYPE_CHECKING:
    from parinfo.diagnostics.findings import Finding
    from parinfo.host.resizes import ResizeLog
    from parinfo.machine.pod import PodIdentity
    from parinfo.machine.pressure import CpuCounters, PressureFacts
    from parinfo.machine.procfs import Proc
    from parinfo.machine.resize import CpuBudget

_DIGITS = re.compile(r"\d+")


@record
class CgroupInfo:
    """One cgroup membership (the text of /proc/PID/cgroup) and the cgroup whose limit binds it."""

    path: str
    key: str
    quota: float | None
    cpuset: tuple[int, ...] | None
    usable: int
    proc: Proc  # the handle of a process in it, to read its counters through
    read_at: float  # time.monotonic() of the reading
    pod: PodIdentity | None = None  # the Kubernetes pod and container of its processes, if any
    budget: CpuBudget | None = None  # what an in-place resize rewrites, as read (parinfo.host.resizes)


@record
class Reading:
    clock: float
    ticks: dict[tuple[int, int], int]  # (pid, start time) -> CPU ticks
    counters: dict[str, CpuCounters]
    pressure: dict[str, PressureFacts]
    waits: dict[tuple[int, int], int] = field(default_factory=dict)  # (pid, start time) -> run-queue wait, ns


def run_queue(report: HostReport, waits: dict[tuple[int, int], int], groups: Mapping[tuple[int, int], str],
              before: Reading | None, dt: float | None) -> None:
    """Each cgroup row's run-queue wait over the interval (its processes' threads, summed, percent of
    the interval) beside its throttled time: throttled told apart from contended. ``groups`` gives
    each process's row."""
    if before is None or dt is None:
        return
    share: dict[str, float] = {}
    for k, ns in waits.items():
        old = before.waits.get(k)
        if old is not None:
            share[groups[k]] = share.get(groups[k], 0.0) + max(0, ns - old) / 1e9 / dt * 100
    for row in report.cgroups:
        row.run_queue_wait_percent = round(share.get(row.path, 0.0), 1)


def own_pressure(key: str, a: PressureFacts, b: PressureFacts, dt: float) -> float | Unknown:
    """Cgroup ``key``'s CPU pressure over the interval, when the v2 cgroup its processes' pressure
    was read from is ``key`` itself; a v1 cgroup has no pressure file, and the figure of the v2
    cgroup its processes sit in (often the root: the whole machine) is not its own."""
    from parinfo.watching.sample import pressure_percent

    if b.cgroup_dir is None or os.path.realpath(b.cgroup_dir) != os.path.realpath(key):
        where = f"its processes' v2 cgroup is {b.cgroup_dir}" if b.cgroup_dir else "no v2 cgroup"
        return Unknown(f"no CPU pressure file of its own: {where}")
    return pressure_percent(a.cgroup, b.cgroup, dt)


def judge(report: HostReport, reps: Mapping[str, CgroupInfo], clock: float,
          ticks: dict[tuple[int, int], int], before: Reading | None, dt: float | None) -> Reading:
    """Fill the report's cgroup rows and findings; return this reading's counters."""
    from parinfo.machine.pressure import cpu_counters, cpu_pressure
    from parinfo.watching.sample import pressure_percent, throttle_use

    counters: dict[str, CpuCounters] = {}
    pressure: dict[str, PressureFacts] = {}
    by_group: dict[str, list[HostProcess]] = {}
    for p in report.processes:
        by_group.setdefault(p.group, []).append(p)
    families = {f.key: f for f in report.families}
    for key in sorted(by_group, key=lambda k: (k != "/", k)):
        info, members = reps[key], by_group[key]
        pressure[key] = cpu_pressure("/", info.proc)
        row = CgroupRow(key, info.quota, info.cpuset, info.usable, [p.pid for p in members],
                        sum(p.threads for p in members), sum(p.runnable_now for p in members))
        row.threads_at_once = sum(p.threads_at_once or 0 for p in members if p.pools)
        row.threads_predicted = sum(p.threads_predicted or p.threads_at_once or 0 for p in members if p.pools)
        row.predicted_pids = [p.pid for p in members if p.threads_predicted is not None]
        row.unknown_pids = [p.pid for p in members if p.pools_unknown is not None]
        if info.quota is not None:
            counters[key] = cpu_counters("/", info.proc)
        else:
            row.throttling_unknown = "none: no CPU quota on this cgroup or its ancestors"
        if before is not None and dt is not None:
            row.cpu_percent = round(sum(p.cpu_percent or 0.0 for p in members), 1)
            if key in counters and key in before.counters:
                row.throttling, why = throttle_use(before.counters[key], counters[key], dt)
                row.throttling_unknown = why
            if key in before.pressure:
                a, b = before.pressure[key], pressure[key]
                row.pressure_some = in_words(pressure_percent(a.system, b.system, dt) if key == "/" else
                                             own_pressure(key, a, b, dt))
        loads = [load(p, families) for p in members if p.pools or p.pools_unknown is not None]
        where = "the machine" if key == "/" else f"cgroup {key}"
        row.findings = fleet_rules.cgroup_findings(where, row.usable_cpus, loads) + advisories(where, members, info)
        report.cgroups.append(row)
    both = [k for k in pressure if before is not None and k in before.pressure]
    if before is not None and dt is not None and both:  # every reading holds the machine's too
        report.pressure_some = in_words(pressure_percent(before.pressure[both[0]].system, pressure[both[0]].system,
                                                         dt))
    report.processes.sort(key=lambda p: (p.group != "/", p.group, -(p.threads_at_once or 0), p.pid))
    return Reading(clock, ticks, counters, pressure)


def advisories(where: str, members: list[HostProcess], info: CgroupInfo) -> list[Finding]:
    """The known-bad library versions the processes of one cgroup load (the advisories table), each
    copy's version read from its file through the process's root (a count only where in force)."""
    from parinfo.diagnostics.advisory_rules import Copy, host_findings
    from parinfo.process.advisories import for_library
    from parinfo.process.file_version import version_in_file

    copies = []
    for p in members:
        for pool in p.pools:
            if pool.path and for_library(pool.library):
                path = os.path.join(info.proc.root, "proc", str(p.pid), "root") + pool.path
                copies.append((p.pid, Copy(pool.library, version_in_file(path, pool.library), pool.owner, pool.path,
                                           None, pool.count if pool.in_force else None)))
    return host_findings(where, copies, os.uname().machine) if copies else []


def load(p: HostProcess, families: Mapping[str, Family]) -> ProcessLoad:
    """What the rules judge of one process: its widest pool in force and, apart, what its launch
    environment predicts where that is more."""
    library, count = p.widest
    guess, predicted = p.widest_predicted if p.threads_predicted is not None else (None, None)
    unknown = p.pools_unknown
    if unknown is None and count is None and predicted is None:
        unknown = next((x.source.text for x in p.pools if x.count is None), "unknown (no count in force)")
    family = families.get(p.family or "")
    variables = []
    for pool in p.pools:
        lib = reg.find(pool.library)
        if lib is not None and lib.count_vars and pool.count is not None and pool.count > 1:
            variables.append(lib.count_vars[0])
    return ProcessLoad(p.pid, p.name, library, count, p.outer_threads, p.ppid,
                       tuple(family.pids) if family is not None else (p.pid,), p.command,
                       tuple(dict.fromkeys(variables)), unknown, family.adopted_by if family is not None else None,
                       guess, predicted)


def families(processes: list[HostProcess]) -> list[Family]:
    """Processes with one parent and one command, two or more of them. Numbers in the command are
    masked: workers that differ by a pipe handle or an index (``spawn_main(pipe_handle=11)``,
    ``--process-name LokyProcess-3``) run one command."""
    groups: dict[tuple[int, str], list[HostProcess]] = {}
    for p in processes:
        groups.setdefault((p.ppid, _DIGITS.sub("#", p.command)), []).append(p)
    out = []
    for (parent, _), members in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[1][0].pid)):
        if len(members) < 2 or parent < 1:
            continue
        key = f"{parent}:{members[0].pid}"
        for p in members:
            p.family = key
        out.append(Family(key, parent, members[0].command, sorted(p.pid for p in members),
                          adoption.adopter(parent, members[0].pid)))
    return out


def resized(report: HostReport, log: ResizeLog, ticks: Mapping[tuple[int, int], int]) -> None:
    """List the resizes ``log`` saw in the report,
    and add ``pool-fixed-after-resize`` to the rows of the processes that started (``ticks``' keys:
    pid and start, in clock ticks since boot) before a resize that narrowed their CPUs."""
    from parinfo.diagnostics.resize_rules import pool_fixed_after_resize
    from parinfo.process.tasks import CLOCK_TICKS

    report.resizes = [log.by_cgroup[k] for k in sorted(log.by_cgroup)]
    started = {pid: start / CLOCK_TICKS for pid, start in ticks}
    rows = {c.path: c for c in report.cgroups}
    for p in report.processes:
        r, row = log.by_cgroup.get(p.cgroup), rows.get(p.group)
        if r is None or row is None or len(r.usable_cpus) != 2 or started.get(p.pid, r.boot_s) >= r.boot_s:
            continue
        pools = [(x.library, x.count) for x in p.pools
                 if x.count is not None and (x.in_force or x.attached) and not x.duplicate_of]
        variables = [lib.count_vars[0] for lib in map(reg.find, dict.fromkeys(n for n, _ in pools))
                     if lib is not None and lib.count_vars]
        where = "the machine" if row.path == "/" else f"cgroup {row.path}"
        found = pool_fixed_after_resize(where, p.pid, p.name, pools, r.usable_cpus[0], r.usable_cpus[1], r.at,
                                        r.changes, variables)
        if found is not None:
            row.findings.append(found)
