"""What ``parinfo host`` says, as typed data: one row per process, per cgroup and per family.

The scanner (:mod:`parinfo.host.scanner`) makes these from /proc and the cgroup files; the text
form (:mod:`parinfo.host.text`) and ``--json`` (:meth:`HostReport.to_dict`) read them.
"""
from __future__ import annotations

from dataclasses import asdict, field
from typing import Any

from parinfo.diagnostics.findings import Finding, at_least
from parinfo.record import record
from parinfo.watching.model import ThrottleUse

#: Version of :meth:`HostReport.to_dict`; bumped on any incompatible change (docs/host.md).
SCHEMA_VERSION = 1

#: The end of a count's source when it comes from the launch environment.
FROM_LAUNCH = "the process may have changed it"


@record(frozen=True)
class PoolCount:
    """One native pool (a loaded copy of a thread runtime) of a process and its count: ``in_force``
    when read from the process's memory; else what its launch environment asks for (``source``
    says so), or None with "unknown (why)"."""

    library: str
    path: str
    owner: str
    count: int | None
    source: str
    in_force: bool = False
    duplicate_of: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@record(frozen=True)
class ThreadGroup:
    """The threads of a process that share a name (but for a worker number), how many of them are
    runnable now, and the pools they are counted to (``pool``; None: threads of no pool). Native
    pool workers inherit the name of the thread that started them, so the threads that carry the
    process's own name are its main thread and its native pools' workers."""

    name: str
    threads: int
    runnable: int
    pool: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@record
class HostProcess:
    """One process: who it is, where it runs, its pools and its threads."""

    pid: int
    ppid: int
    name: str
    command: str  # the command line, shell-quoted with controls escaped
    user: str
    cgroup: str  # its cgroup (CPU controller, or the unified hierarchy), or "unknown (why)"
    group: str  # the cgroup whose limit it is judged against (a CgroupRow's path)
    usable_cpus: int
    affinity: int  # CPUs in its affinity mask
    pools: list[PoolCount] = field(default_factory=list)
    pools_unknown: str | None = None  # why its pools could not be read ("unknown (permission...)")
    threads: int = 0
    states: dict[str, int] = field(default_factory=dict)
    runnable_now: int = 0
    groups: list[ThreadGroup] = field(default_factory=list)
    cpu_percent: float | None = None  # CPU use over the interval (100: one CPU)
    family: str | None = None  # the key of its Family
    outer_threads: int = 1

    @property
    def widest(self) -> tuple[str | None, int | None]:
        """The pool with the most threads: (library, count); (None, 1) without pools, (None, None)
        when its pools or all their counts are unknown (never guessed)."""
        if self.pools_unknown is not None:
            return None, None
        best: tuple[str | None, int | None] = (None, None) if self.pools else (None, 1)
        for p in self.pools:
            if p.count is not None and not p.duplicate_of and (best[1] is None or p.count > best[1]):
                best = (p.library, p.count)
        return best

    @property
    def threads_at_once(self) -> int | None:
        """Its widest pool x its outer threads; None when its pools are unknown."""
        count = self.widest[1]
        return None if count is None else count * self.outer_threads

    @property
    def runnable_in_pools(self) -> int:
        """Runnable threads counted to a pool."""
        return sum(g.runnable for g in self.groups if g.pool is not None)

    def to_dict(self) -> dict[str, Any]:
        library, count = self.widest
        return {"pid": self.pid, "ppid": self.ppid, "name": self.name, "command": self.command, "user": self.user,
                "cgroup": self.cgroup, "group": self.group, "usable_cpus": self.usable_cpus,
                "affinity_cpus": self.affinity, "pools": [p.to_dict() for p in self.pools],
                "pools_unknown": self.pools_unknown, "widest_pool": {"library": library, "count": count},
                "outer_threads": self.outer_threads, "threads_at_once": self.threads_at_once,
                "threads": {"count": self.threads, "states": dict(self.states), "runnable_now": self.runnable_now,
                            "runnable_in_pools": self.runnable_in_pools,
                            "groups": [g.to_dict() for g in self.groups]},
                "cpu_percent": self.cpu_percent, "family": self.family}


@record
class CgroupRow:
    """The processes judged against one cgroup's CPUs: the cgroup whose quota (or cpuset) binds
    them, or "/" (the machine) when none does."""

    path: str
    quota: float | None
    cpuset: tuple[int, ...] | None
    usable_cpus: int
    pids: list[int] = field(default_factory=list)
    threads: int = 0
    runnable_now: int = 0
    threads_at_once: int = 0  # the sum over its processes with a pool of widest pool x outer threads
    unknown_pids: list[int] = field(default_factory=list)  # processes whose pools could not be read
    cpu_percent: float | None = None
    throttling: ThrottleUse | None = None
    throttling_unknown: str | None = None
    pressure_some: float | str = "unknown (one reading: no interval)"
    findings: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "quota": self.quota, "cpuset": None if self.cpuset is None else list(self.cpuset),
                "usable_cpus": self.usable_cpus, "pids": list(self.pids), "threads": self.threads,
                "runnable_now": self.runnable_now, "threads_at_once": self.threads_at_once,
                "unknown_pids": list(self.unknown_pids), "cpu_percent": self.cpu_percent,
                "throttling": None if self.throttling is None else asdict(self.throttling),
                "throttling_unknown": self.throttling_unknown, "pressure_some": self.pressure_some,
                "findings": [f.to_dict() for f in self.findings]}


@record
class Family:
    """Processes with one parent and one command (server workers, a multiprocessing or loky pool,
    torchrun ranks, pytest-xdist workers): together they are the outer workers of one program."""

    key: str
    parent: int
    command: str
    pids: list[int]

    @property
    def size(self) -> int:
        return len(self.pids)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "parent": self.parent, "command": self.command, "pids": list(self.pids),
                "size": self.size}


@record
class HostReport:
    """Every process scanned, the cgroups they are judged in, their families and findings."""

    time: float
    interval: float | None  # seconds between the two readings; None: one reading
    scope: dict[str, str | None]
    logical_cpus: int | None
    processes: list[HostProcess] = field(default_factory=list)
    cgroups: list[CgroupRow] = field(default_factory=list)
    families: list[Family] = field(default_factory=list)
    kernel_threads: int = 0
    kernel_runnable: int = 0
    pressure_some: float | str = "unknown (one reading: no interval)"
    elapsed_ms: float = 0.0
    notes: list[str] = field(default_factory=list)

    def findings(self) -> list[tuple[str, Finding]]:
        """(cgroup, finding) for every finding."""
        return [(c.path, f) for c in self.cgroups for f in c.findings]

    def problems(self, severity: str = "warning") -> list[tuple[str, Finding]]:
        """Findings at ``severity`` or above (what ``parinfo host --check`` fails on)."""
        return [(where, f) for where, f in self.findings() if at_least([f], severity)]

    def process(self, pid: int) -> HostProcess | None:
        return next((p for p in self.processes if p.pid == pid), None)

    def to_dict(self) -> dict[str, Any]:
        """The ``parinfo host --json`` payload (docs/host.md)."""
        from parinfo.version import __version__

        return {"schema_version": SCHEMA_VERSION, "parinfo_version": __version__, "time": self.time,
                "interval": self.interval, "scope": dict(self.scope), "logical_cpus": self.logical_cpus,
                "kernel_threads": self.kernel_threads, "kernel_runnable": self.kernel_runnable,
                "pressure_some": self.pressure_some, "elapsed_ms": self.elapsed_ms,
                "cgroups": [c.to_dict() for c in self.cgroups], "families": [f.to_dict() for f in self.families],
                "processes": [p.to_dict() for p in self.processes], "notes": list(self.notes)}

    def table(self, *, all_processes: bool = False) -> str:
        """The report as text for people: cgroups, the processes with pools (every process with
        ``all_processes``), families, then findings."""
        from parinfo.host.text import render

        return render(self, all_processes=all_processes)
