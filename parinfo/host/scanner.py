"""The scan behind ``parinfo host``: every process of the machine read from /proc, grouped by the
cgroup whose CPU limit binds it, with its families and the finding ``host-oversubscribed``.

Cost. A scan reads, per thread, its ``stat`` (name and state), and per process its ``stat``,
``cgroup``, affinity (one system call) and ``maps`` (the runtimes mapped into it), plus each pool's
count from the process's memory where the library exposes one, all through the /proc front
(:mod:`parinfo.machine.procfs`). What does not change while a process lives (its command line,
user, launch environment) is read once per process: the :class:`Scanner` keeps it, keyed by pid,
start time and name, so a warm scan (``parinfo host``'s refresh) pays for the changing files only.
``maps`` is re-read on every scan (a library can be loaded at any time) but parsed again only when
its bytes changed. Each cgroup membership's binding and the machine's facts are read again once they
are :data:`FOLLOW_S` old, so a long-running scanner follows quota changes; what a scan no longer
sees is forgotten. Plain reads of /proc are used rather than psutil: one process's row needs a few
files, and psutil's per-process objects and exceptions cost several times more per process.

A process that exits during a scan is dropped; a zombie or a kernel thread has no row (kernel
threads are counted apart). A process whose maps or environment this user may not read gets its
pools as "unknown (permission: ...)": they are never guessed, and it counts for nothing in the
sums its cgroup is judged by.

The scan reads; how it is judged (cgroups, families, findings) is :mod:`parinfo.host.judging`, and
how each pool's count is decided :mod:`parinfo.host.pool_counts`.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import shlex
import time
from typing import TYPE_CHECKING

import parinfo.machine.checks as checks
from parinfo.errors import UsageError
from parinfo.host import judging, pool_counts
from parinfo.host.judging import CgroupInfo, Reading
from parinfo.host.model import (
    HostProcess,
    HostReport,
    PoolCount,
    Scope,
    ThreadGroup,
)
from parinfo.host.pods import group as pod_groups
from parinfo.host.resizes import ResizeLog
from parinfo.machine.procfs import MAPS_LIMIT, Proc, ProcessGone, parse_environ, pids
from parinfo.machine.topology import REREAD_S
from parinfo.outside.standing import decide
from parinfo.process import libraries as reg
from parinfo.process.tasks import CLOCK_TICKS, run_delay_ns
from parinfo.process.thread_owners import owners_of
from parinfo.process.threads import thread_group
from parinfo.records.record import record
from parinfo.records.source import unknown as unknown_source
from parinfo.records.unknown import Unknown

if TYPE_CHECKING:
    from parinfo.machine.pressure import CpuCounters
    from parinfo.machine.topology import MachineFacts
    from parinfo.process.pools import PoolRow

#: How old a cgroup's binding or the machine's facts may grow before a scan reads them again.
FOLLOW_S = REREAD_S


def _attach_budget(seconds: float) -> float:
    from parinfo.outside.attach import MAX_TIMEOUT

    return checks.seconds(seconds, "--timeout", 0.1, MAX_TIMEOUT)


@record
class _AttachLog:
    """What ``--attach`` did in one scan: the pids read inside, those refused (and why), how many
    were not tried for want of time, and the seconds spent."""

    read: list[int] = dataclasses.field(default_factory=list)
    refused: dict[int, str] = dataclasses.field(default_factory=dict)
    skipped: int = 0
    seconds: float = 0.0
    waiting: set[int] = dataclasses.field(default_factory=set)  # parinfo's ancestors: never tried
    not_tried: dict[int, str] = dataclasses.field(default_factory=dict)


def check_interval(interval: float) -> float:
    """``interval`` as seconds; UsageError unless it is a number from 0 to 3600."""
    return checks.seconds(interval, "interval", 0, 3600)


@functools.lru_cache(maxsize=4096)
def _group_of(raw: bytes) -> str:
    """The thread group of a raw thread name (names repeat: one decode and match per name)."""
    return thread_group(raw.decode("utf-8", "replace"))


@functools.lru_cache(maxsize=1024)
def _user(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _uid_of(name: str | int) -> int:
    return checks.uid(name, "--user")


@record
class _Static:
    """What stays while one process lives: read once per (pid, start time, name)."""

    args: tuple[str, ...]
    command: str
    uid: int
    environ: dict[str, str] | Unknown  # its thread variables at launch, or why they cannot be read
    maps: bytes | None = None
    pools: list[PoolRow] | None = None  # rows of runtimes_in_maps (None: not read yet)
    symbol_maps: str | None = None  # the maps lines of its pools whose count can be read from memory


class Scanner:
    """Scans of the processes (of ``user``, in ``cgroup``), each made against the previous one:
    CPU use, throttling and pressure are counted over the time between them."""

    def __init__(self, cgroup: str | None = None, user: str | int | None = None,
                 attach: float | None = None) -> None:
        from parinfo.machine.topology import machine_facts

        self.attach = None if attach is None else _attach_budget(attach)
        self._attach_deadline = 0.0
        self._attach_log = _AttachLog()
        self.uid = None if user is None else _uid_of(user)
        self.user = None if user is None else str(user)
        self.facts: MachineFacts = machine_facts()
        self._facts_at = time.monotonic()
        self._cgroups_seen: set[bytes] = set()
        self.cgroup = None if cgroup is None else self._cgroup_path(cgroup)
        self.cgroup_given = cgroup
        self._static: dict[tuple[int, int, str], _Static] = {}
        self._cgroups: dict[bytes, CgroupInfo] = {}
        self._last: Reading | None = None
        self.resizes = ResizeLog()  # the in-place resizes seen between scans, by cgroup

    @property
    def counters(self) -> dict[str, CpuCounters]:
        """The cumulative throttling counters the last scan read, by cgroup row (``CgroupRow.path``;
        rows with a quota only), each level with a quota from the row's cgroup up: what
        ``host --serve`` exports as counters, never reset between scans."""
        return {} if self._last is None else dict(self._last.counters)

    def _refresh_facts(self, clock: float) -> None:
        """Re-read the machine's facts (CPUs brought online or offline, the scanner's own cgroup)."""
        from parinfo.machine.topology import machine_facts

        self.facts = machine_facts()
        self._facts_at = clock

    # -- the pieces of one process --------------------------------------------------------------

    @staticmethod
    def _cgroup_path(given: str) -> str:
        """A cgroup as /proc/PID/cgroup names it ("/demo"), from that form or a directory under a
        cgroup mount ("/sys/fs/cgroup/cpu/demo"); UsageError when neither names a cgroup."""
        return checks.cgroup(given, "--cgroup")

    def _static_of(self, proc: Proc, key: tuple[int, int, str]) -> _Static | None:
        static = self._static.get(key)
        if static is not None:
            return static
        try:
            raw = proc.cmdline()
            uid = proc.uid()
        except ProcessGone:
            return None
        except UsageError:
            raw, uid = [], -1
        from parinfo.safe_text import escape_controls

        command = escape_controls(shlex.join(raw)) if raw else f"[{escape_controls(key[2])}]"
        environ: dict[str, str] | Unknown
        try:
            block = proc.read_or_why("environ", 1 << 22)
        except ProcessGone:
            return None
        environ = block if isinstance(block, Unknown) else {
            k: v for k, v in parse_environ(block).items() if k in reg.THREAD_VARS}
        static = _Static(tuple(raw), command, uid, environ)
        self._static[key] = static
        return static

    def _cgroup_of(self, proc: Proc, clock: float) -> CgroupInfo | None:
        """The binding of ``proc``'s cgroup, computed once per membership and re-read when older than
        :data:`FOLLOW_S` (a quota or cpuset changed under a long-running scanner shows in its next
        scan); memberships no process has any more are forgotten at the end of each scan."""
        try:
            raw = proc.cgroup()
        except UsageError:
            return None
        info = self._cgroups.get(raw)
        if info is None or clock - info.read_at >= FOLLOW_S:
            old, info = info, self._binding(proc, clock)
            self._cgroups[raw] = info
            if old is not None and old.budget is not None and info.budget is not None:
                self.resizes.compare(info.path, old.budget, info.budget, (old.usable, info.usable))
        self._cgroups_seen.add(raw)
        return info

    def _binding(self, proc: Proc, clock: float) -> CgroupInfo:
        """The cgroup whose CPU limit binds ``proc``: where its tightest quota is set, else the
        nearest cpuset narrower than the machine, else "/" (the machine)."""
        from parinfo.machine.cgroup import cgroup_facts
        from parinfo.machine.pod import pod_identity
        from parinfo.machine.resize import budget_of
        from parinfo.machine.topology import usable_from

        cg = cgroup_facts("/", proc)
        online = self.facts.logical_cpus or len(self.facts.affinity) or 1
        narrower = cg.cpuset is not None and len(cg.cpuset) < online
        key = (os.path.dirname(cg.quota_source.detail) if cg.quota is not None
               else os.path.dirname(cg.cpuset_files[0]) if narrower else "/")
        cpus = len(cg.cpuset) if cg.cpuset is not None else online
        pod = pod_identity("/", proc, cg.path) if cg.path else None
        budget = budget_of(cg.quota, tuple(cg.cpuset) if cg.cpuset is not None else None, cg.path, (), "/", proc)
        return CgroupInfo(cg.path or "/", key, cg.quota, cg.cpuset if narrower else None,
                           usable_from(cpus, None, cg.quota), proc, clock, pod, budget)

    def _pools(self, proc: Proc, static: _Static) -> list[PoolRow] | Unknown:
        try:
            maps = proc.read_or_why("maps", MAPS_LIMIT)
        except ProcessGone:
            return Unknown("the process has exited")
        if isinstance(maps, Unknown):
            return maps
        if static.pools is None or maps != static.maps:
            from parinfo.process.pools import runtimes_in_maps

            rows = runtimes_in_maps(maps, "/proc/PID/maps")
            static.maps, static.pools, static.symbol_maps = maps, rows, pool_counts.symbol_lines(maps, rows)
        return static.pools if static.pools is not None else []

    def _counts(self, proc: Proc, rows: list[PoolRow], static: _Static,
                facts: MachineFacts) -> list[PoolCount]:
        """Each pool's count by the one precedence rule (:func:`parinfo.outside.standing.decide`): in
        force where it can be read from the process's memory, else what its launch environment
        predicts (said so), else unknown."""
        read = pool_counts.in_force(proc, static.symbol_maps)
        return [pool_counts.pool_count(row, decide(row.library, read.get(row.filepath or ""), static.environ, facts))
                for row in rows]

    def _inside(self, proc: Proc, rows: list[PoolRow], static: _Static,
                facts: MachineFacts) -> list[PoolCount] | None:
        """Each pool's count read inside a Python process (``host --attach``), with the source that
        decided it as the process's own report gives it; None when the attach was refused or not
        tried (the scan's budget is spent), and the scan's notes say which."""
        from parinfo.diagnostics.attached import EACH_S, LEAST_S, read_inside, unreadable, waits_for_parinfo
        from parinfo.process.pools import loaded_objects

        log = self._attach_log
        pid = proc.pid or 0
        why = waits_for_parinfo(pid, log.waiting)
        if why is not None:
            log.not_tried[pid] = why
            return None
        left = self._attach_deadline - time.monotonic()
        if left < LEAST_S:
            log.skipped += 1
            return None
        began = time.monotonic()
        try:
            inside = read_inside(proc, [dataclasses.replace(r) for r in rows], loaded_objects(
                (static.maps or b"").decode("utf-8", "surrogateescape")), static.environ, facts,
                min(left, EACH_S))
            counts = [pool_counts.pool_count(row, decide(row.library, None, static.environ, facts, attached=(
                row.num_threads, row.count_source or unknown_source("not read inside the process"))))
                for row in inside.pool_counts()]
        except UsageError as exc:
            log.refused[pid] = str(exc)
            return None
        except Exception as exc:  # one process's answer, however odd, never ends the scan
            log.refused[pid] = unreadable(pid, exc)
            return None
        finally:
            log.seconds += time.monotonic() - began
        log.read.append(pid)
        return counts

    def _attach_notes(self) -> list[str]:
        """What ``--attach`` did in the last scan, in lines."""
        log = self._attach_log
        notes = [f"attach: {len(log.read)} Python process{'es' if len(log.read) != 1 else ''} read inside "
                 f"({log.seconds * 1e3:.0f} ms of a {self.attach:g} s budget)"]
        notes += [f"attach refused: {why}" for why in log.refused.values()]
        notes += [f"attach not tried: {why}" for why in log.not_tried.values()]
        if log.skipped:
            notes.append(f"attach not tried for {log.skipped} process{'es' if log.skipped != 1 else ''}: the "
                         f"{self.attach:g} s budget was spent (--timeout gives more)")
        return notes

    # -- one scan ---------------------------------------------------------------------------------

    def scan(self, attach: bool = True) -> HostReport:
        """One reading of every process in scope, judged; counted over the time since the last one.
        ``attach`` False leaves the processes unattached this time (a first reading only taken to
        count the next one's CPU use over the interval)."""
        started = time.perf_counter()
        clock = time.monotonic()
        before = self._last
        dt = None if before is None else max(clock - before.clock, 1e-6)
        processes: list[HostProcess] = []
        ticks: dict[tuple[int, int], int] = {}
        waits: dict[tuple[int, int], int] = {}
        rows: dict[tuple[int, int], str] = {}
        reps: dict[str, CgroupInfo] = {}
        kernel_threads = kernel_runnable = 0
        seen: set[tuple[int, int, str]] = set()
        self._cgroups_seen = set()
        if clock - self._facts_at >= FOLLOW_S:
            self._refresh_facts(clock)
        attaching = self.attach is not None and attach
        if attaching:
            from parinfo.outside.remote import ancestors

            self._attach_deadline = time.monotonic() + (self.attach or 0.0)
            self._attach_log = _AttachLog(waiting=set(ancestors()))
        for pid in pids():
            proc = Proc.of(pid)  # the door: this scan's handle of the process
            try:
                st = proc.stat()
            except UsageError:
                continue  # exited meanwhile
            if st.kernel_thread:
                kernel_threads += 1
                kernel_runnable += st.state == "R"
                continue
            if st.dead and not proc.follow_live_thread():  # a zombie, unless only its main thread exited
                continue
            key = (pid, st.start, st.name)
            static = self._static_of(proc, key)
            if static is None:
                continue
            seen.add(key)
            if self.uid is not None and static.uid != self.uid:
                continue
            cg = self._cgroup_of(proc, clock)
            if cg is None:
                continue
            if self.cgroup is not None and self.cgroup != "/" and not (
                    cg.path == self.cgroup or cg.path.startswith(self.cgroup + "/")):
                continue
            name, ppid, cpu = st.name, st.ppid, st.ticks
            start = st.start
            row = self._process(proc, ppid, name, static, cg, attaching)
            if row is None:
                continue
            ticks[(pid, start)] = cpu
            wait = run_delay_ns(proc)
            if wait is not None:
                waits[(pid, start)], rows[(pid, start)] = wait, cg.key
            if before is not None and dt is not None and (pid, start) in before.ticks:
                row.cpu_percent = round((cpu - before.ticks[(pid, start)]) / CLOCK_TICKS / dt * 100, 1)
            reps.setdefault(cg.key, cg)
            processes.append(row)
        self._forget(seen)
        families = judging.families(processes)
        report = HostReport(time=time.time(), interval=None if dt is None else round(dt, 3),
                            scope=Scope(self.cgroup_given, self.user),
                            logical_cpus=self.facts.logical_cpus, processes=processes, families=families,
                            kernel_threads=kernel_threads, kernel_runnable=kernel_runnable,
                            pods=pod_groups((p.pid, p.pod) for p in processes))
        if attaching:
            report.notes += self._attach_notes()
        reading = judging.judge(report, reps, clock, ticks, before, dt)
        judging.resized(report, self.resizes, ticks)
        reading.waits = waits
        judging.run_queue(report, waits, rows, before, dt)
        self._last = reading
        report.elapsed_ms = round((time.perf_counter() - started) * 1e3, 2)
        return report

    def _forget(self, seen: set[tuple[int, int, str]]) -> None:
        """Forget the processes (``seen``: those this scan read) and cgroup memberships no longer seen."""
        for gone in set(self._static) - seen:
            del self._static[gone]
        for raw in set(self._cgroups) - self._cgroups_seen:
            del self._cgroups[raw]
        self.resizes.forget({info.path for info in self._cgroups.values()})

    def _process(self, proc: Proc, ppid: int, name: str, static: _Static, cg: CgroupInfo,
                 attaching: bool = False) -> HostProcess | None:
        pid = proc.pid or 0
        try:
            affinity = proc.affinity()
        except ProcessGone:
            return None
        except UsageError:
            affinity = set(self.facts.affinity)
        threads = proc.thread_states()
        if threads is None:
            return None
        states: dict[str, int] = {}
        by_raw: dict[bytes, list[int]] = {}
        for raw, state in threads:
            if state in ("Z", "X"):
                continue  # an exited main thread whose process runs on
            states[state] = states.get(state, 0) + 1
            counts = by_raw.get(raw)
            if counts is None:
                counts = by_raw[raw] = [0, 0]
            counts[0] += 1
            counts[1] += state == "R"
        if not states:
            return None
        by_name: dict[str, list[int]] = {}
        for raw, (n, r) in by_raw.items():
            group = by_name.setdefault(_group_of(raw), [0, 0])
            group[0] += n
            group[1] += r
        cpus = cg.cpuset
        usable_list = [c for c in affinity if cpus is None or c in cpus] or sorted(affinity)
        from parinfo.machine.topology import usable_from

        usable = usable_from(len(usable_list), None, cg.quota)
        maps = self._pools(proc, static)
        pools: list[PoolCount] = []
        unknown = None
        if isinstance(maps, Unknown):
            unknown = str(maps)
        elif maps:
            facts = dataclasses.replace(self.facts, affinity=tuple(sorted(affinity)), cpuset=cg.cpuset,
                                        quota=cg.quota, usable_cpus=usable)
            inside = None
            if attaching and pid != os.getpid() and b"python" in (static.maps or b""):
                inside = self._inside(proc, maps, static, facts)
            pools = self._counts(proc, maps, static, facts) if inside is None else inside
        try:
            owners = owners_of(proc) if pools else None
        except ProcessGone:
            return None
        multi = sorted({p.library for p in pools if not p.duplicate_of})
        own = thread_group(name)
        groups = [ThreadGroup(n, v[0], v[1], ", ".join(multi) if n == own and multi else None)
                  for n, v in sorted(by_name.items(), key=lambda kv: (-kv[1][1], -kv[1][0], kv[0]))]
        return HostProcess(
            pid=pid, ppid=ppid, name=name, command=static.command, user=_user(static.uid) if static.uid >= 0 else "?",
            cgroup=cg.path, group=cg.key, usable_cpus=usable, affinity=len(affinity), pools=pools,
            pools_unknown=unknown, threads=sum(states.values()), states=states, runnable_now=states.get("R", 0),
            groups=groups, owners=owners, pod=cg.pod)
