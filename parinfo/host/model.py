"""What ``parinfo host`` says, as typed data: one row per process, per cgroup and per family.

The scanner (:mod:`parinfo.host.scanner`) makes these from /proc and the cgroup files; the text
form (:meth:`HostReport.table`, at the end of this module) and ``--json`` (:meth:`HostReport.to_dict`)
read them.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from parinfo.diagnostics.findings import Finding, Severity, at_least
from parinfo.host.pods import PodRow, pod_lines
from parinfo.host.resizes import CgroupResize, resize_lines
from parinfo.machine.pod import PodIdentity
from parinfo.records.convert import OMIT_EMPTY, OMIT_NONE, dump, key
from parinfo.records.record import record
from parinfo.records.source import Source
from parinfo.safe_text import escape_controls, plural
from parinfo.watching.model import ThrottleUse

#: Version of :meth:`HostReport.to_dict`; bumped on any incompatible change (docs/host.md).
SCHEMA_VERSION = 2


@record(frozen=True)
class Scope:
    """What a host scan covers: one cgroup's processes (``cgroup``, as given), one user's (``user``),
    or, with neither, every process of the machine."""

    cgroup: str | None = None
    user: str | None = None


@record(frozen=True)
class PoolCount:
    """One native pool (a loaded copy of a thread runtime) of a process and its count: ``in_force``
    when read from the process's memory, or, with ``attached``, from inside the process (``host
    --attach``: ``source`` is then what decided the count, as the process's own report says); else
    what its launch environment asks for (``source`` says so), or None with "unknown (why)"."""

    library: str
    path: str
    owner: str
    count: int | None
    source: Source
    in_force: bool = False
    duplicate_of: str | None = None
    attached: bool = False


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
    affinity: int = field(metadata=key("affinity_cpus"))  # CPUs in its affinity mask
    pools: list[PoolCount] = field(default_factory=list)
    pools_unknown: str | None = None  # why its pools could not be read ("unknown (permission...)")
    threads: int = 0
    states: dict[str, int] = field(default_factory=dict)
    runnable_now: int = 0
    groups: list[ThreadGroup] = field(default_factory=list)
    cpu_percent: float | None = None  # CPU use over the interval (100: one CPU)
    family: str | None = None  # the key of its Family
    outer_threads: int = 1
    owners: dict[str, int] | None = None  # threads by the library that started them (processes with pools)
    pod: PodIdentity | None = field(default=None, metadata=OMIT_NONE)  # its Kubernetes pod, if in one

    def _widest(self, predicted: bool) -> tuple[str | None, int | None]:
        if self.pools_unknown is not None:
            return None, None
        best: tuple[str | None, int | None] = (None, None) if self.pools else (None, 1)
        for p in self.pools:
            counted = p.in_force or (predicted and p.count is not None)
            if counted and p.count is not None and not p.duplicate_of and (best[1] is None or p.count > best[1]):
                best = (p.library, p.count)
        return best

    @property
    def widest(self) -> tuple[str | None, int | None]:
        """The pool in force with the most threads: (library, count); (None, 1) without pools, (None,
        None) when its pools are unknown or no count of theirs is in force (a prediction is not)."""
        return self._widest(False)

    @property
    def widest_predicted(self) -> tuple[str | None, int | None]:
        """The widest pool when counts predicted from the launch environment count too."""
        return self._widest(True)

    @property
    def threads_at_once(self) -> int | None:
        """Its widest pool in force x its outer threads; None when no count of its pools is in force."""
        count = self.widest[1]
        return None if count is None else count * self.outer_threads

    @property
    def threads_predicted(self) -> int | None:
        """Its threads at once if the predicted counts hold; None unless a prediction raises
        :attr:`threads_at_once` (a process whose counts are all in force has nothing predicted)."""
        count = self.widest_predicted[1]
        if count is None or count * self.outer_threads <= (self.threads_at_once or 0):
            return None
        return count * self.outer_threads

    @property
    def runnable_in_pools(self) -> int:
        """Runnable threads counted to a pool."""
        return sum(g.runnable for g in self.groups if g.pool is not None)

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """Its JSON: the widest pool and threads at once worked out; the thread facts in one object."""
        library, count = self.widest
        out = {k: data[k] for k in ("pid", "ppid", "name", "command", "user", "cgroup", "group", "usable_cpus",
                                    "affinity_cpus", "pools", "pools_unknown")}
        predicted = self.threads_predicted
        guess, most = self.widest_predicted
        out.update(widest_pool={"library": library, "count": count}, outer_threads=self.outer_threads,
                   threads_at_once=self.threads_at_once,
                   predicted=None if predicted is None else {
                       "widest_pool": {"library": guess, "count": most},
                       "threads_at_once": predicted},
                   threads={"count": self.threads, "states": data["states"], "runnable_now": self.runnable_now,
                            "runnable_in_pools": self.runnable_in_pools, "groups": data["groups"]},
                   cpu_percent=self.cpu_percent, family=self.family)
        if self.owners is not None:
            out["threads"]["owners"] = self.owners
        if "pod" in data:
            out["pod"] = data["pod"]
        return out


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
    threads_at_once: int = 0  # the sum over its processes with a pool in force of widest pool x outer threads
    # the same sum if the counts predicted from launch environments hold, and the processes they raise
    threads_predicted: int = field(default=0, metadata=key("threads_at_once_predicted"))
    predicted_pids: list[int] = field(default_factory=list)
    unknown_pids: list[int] = field(default_factory=list)  # processes whose pools could not be read
    cpu_percent: float | None = None
    throttling: ThrottleUse | None = None
    throttling_unknown: str | None = None
    pressure_some: float | str = "unknown (one reading: no interval)"
    findings: list[Finding] = field(default_factory=list)
    #: its threads' run-queue wait over the interval (schedstat, summed; percent of the interval): with
    #: ``throttling.percent_time`` it tells throttled (held back by the quota) from contended (the rest)
    run_queue_wait_percent: float | None = field(default=None, metadata=OMIT_NONE)


@record
class Family:
    """Processes with one parent and one command (server workers, a multiprocessing or loky pool,
    torchrun ranks, pytest-xdist workers): together they are the outer workers of one program.
    ``adopted_by`` names the parent when it did not start them as one program's workers: pid 1 or
    a subreaper that took them in after their own parent exited (:mod:`parinfo.host.adoption`)."""

    key: str
    parent: int
    command: str
    pids: list[int]
    adopted_by: str | None = None

    @property
    def size(self) -> int:
        return len(self.pids)

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"key": self.key, "parent": self.parent, "command": self.command, "pids": data["pids"],
                "size": self.size, "adopted_by": self.adopted_by}


@record
class HostReport:
    """Every process scanned, the cgroups they are judged in, their families and findings."""

    time: float
    interval: float | None  # seconds between the two readings; None: one reading
    scope: Scope
    logical_cpus: int | None
    processes: list[HostProcess] = field(default_factory=list)
    cgroups: list[CgroupRow] = field(default_factory=list)
    families: list[Family] = field(default_factory=list)
    kernel_threads: int = 0
    kernel_runnable: int = 0
    pressure_some: float | str = "unknown (one reading: no interval)"
    elapsed_ms: float = 0.0
    notes: list[str] = field(default_factory=list)
    pods: list[PodRow] = field(default_factory=list, metadata=OMIT_EMPTY)  # processes by pod (parinfo.host.pods)
    resizes: list[CgroupResize] = field(default_factory=list, metadata=OMIT_EMPTY)  # parinfo.host.resizes

    def findings(self) -> list[tuple[str, Finding]]:
        """(cgroup, finding) for every finding."""
        return [(c.path, f) for c in self.cgroups for f in c.findings]

    def problems(self, severity: Severity | str = Severity.WARNING) -> list[tuple[str, Finding]]:
        """Findings at ``severity`` or above (what ``parinfo host --check`` fails on)."""
        return [(where, f) for where, f in self.findings() if at_least([f], severity)]

    def process(self, pid: int) -> HostProcess | None:
        return next((p for p in self.processes if p.pid == pid), None)

    def to_dict(self) -> dict[str, Any]:
        """The ``parinfo host --json`` payload (docs/host.md)."""
        return dict(dump(self))

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        from parinfo.version import __version__

        return {"schema_version": SCHEMA_VERSION, "parinfo_version": __version__,
                **{k: data[k] for k in ("time", "interval", "scope", "logical_cpus", "kernel_threads",
                                        "kernel_runnable", "pressure_some", "elapsed_ms", "cgroups", "families",
                                        "processes", "notes")},
                **{k: data[k] for k in ("pods", "resizes") if k in data}}

    def table(self, *, all_processes: bool = False) -> str:
        """The report as text for people: cgroups, the processes with pools (every process with
        ``all_processes``), families, then findings."""
        return _render(self, all_processes=all_processes)

    def _repr_html_(self) -> str:
        """The text report in a notebook, as it is (escaped, self-contained HTML)."""
        from parinfo.diagnostics.html import preformatted

        return preformatted(self.table())


# -- the text form -----------------------------------------------------------------------------

#: Processes listed without ``all_processes``: those with pools, then the busiest others.
OTHERS_SHOWN = 5


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def _pct(value: float | str | None) -> str:
    if value is None:
        return "-"
    return "?" if isinstance(value, str) else f"{value:.0f}%"


def _pool(p: PoolCount) -> str:
    if p.count is None:
        return f"{p.library} ?"
    kind = "attached" if p.attached else "in force" if p.in_force else "launch env"
    return f"{p.library} {p.count} ({kind})"


def _pools(p: HostProcess) -> str:
    if p.pools_unknown is not None:
        return p.pools_unknown
    shown = [_pool(x) for x in p.pools if not x.duplicate_of]
    copies = sum(1 for x in p.pools if x.duplicate_of)
    return ", ".join(shown) + (f" (+{copies} cop{'ies' if copies != 1 else 'y'})" if copies else "") or "none"


def _throttle(c: CgroupRow) -> str:
    t = c.throttling
    if t is None:
        return "none" if c.quota is None else "?" if c.throttling_unknown else "-"
    return f"{t.percent_periods:.0f}% of periods"


def _held(c: CgroupRow) -> str:
    """Time the quota held the row's threads back, percent of the interval ("-": none measured)."""
    return "-" if c.throttling is None else _pct(c.throttling.percent_time)


def _cgroup_lines(r: HostReport) -> list[str]:
    head = (f"{'cgroup':<34} {'usable':>6} {'quota':>6} {'procs':>5} {'threads':>7} {'runnable':>8} "
            f"{'at once':>7} {'CPU use':>7} {'throttled':>16} {'held':>5} {'queued':>6} {'pressure':>8}")
    lines = [head]
    for c in r.cgroups:
        quota = "none" if c.quota is None else f"{c.quota:g}"
        at_once = f"{c.threads_at_once}{'*' if c.predicted_pids else ''}"
        lines.append(f"{_cut(escape_controls(c.path), 34):<34} {c.usable_cpus:>6} {quota:>6} {len(c.pids):>5} "
                     f"{c.threads:>7} {c.runnable_now:>8} {at_once:>7} {_pct(c.cpu_percent):>7} "
                     f"{_throttle(c):>16} {_held(c):>5} {_pct(c.run_queue_wait_percent):>6} "
                     f"{_pct(c.pressure_some if r.interval else None):>8}")
    if r.interval:
        lines.append("  held: time the quota held threads back; queued: their run-queue wait (schedstat, summed, "
                     "held time included): queued beyond held is contention for CPUs")
    lines += [escape_controls(f"  * {c.path}: {c.threads_at_once} threads at once in force; up to "
                              f"{c.threads_predicted} if the counts predicted from the launch environments of "
                              f"{len(c.predicted_pids)} process{'es' if len(c.predicted_pids) != 1 else ''} hold "
                              f"(launch env: not read, not counted)")
              for c in r.cgroups if c.predicted_pids]
    return lines


def _process_line(p: HostProcess) -> str:
    run = f"{p.runnable_now}" + (f"/{p.runnable_in_pools}" if p.pools else "")
    return (f"{p.pid:>7} {_cut(escape_controls(p.user), 8):<8} {p.usable_cpus:>4} {p.threads:>7} {run:>5} "
            f"{_pct(p.cpu_percent):>5}  {_cut(_pools(p), 44):<44} {_cut(p.command, 60)}")


def _render(r: HostReport, *, all_processes: bool = False) -> str:
    """The whole report as text for people (:meth:`HostReport.table`). Every text that comes from a
    process (names, command lines) is escaped here or already was (:mod:`parinfo.safe_text`)."""
    threads = sum(p.threads for p in r.processes)
    runnable = sum(p.runnable_now for p in r.processes)
    scope = ", ".join(f"{k} {v}" for k, v in (("cgroup", r.scope.cgroup), ("user", r.scope.user)) if v)
    every = f"over {r.interval:g} s" if r.interval else "one reading (no interval)"
    lines = [escape_controls(
        f"host: {plural(len(r.processes), 'process')}{' (' + scope + ')' if scope else ''}, "
        f"{plural(threads, 'thread')}, {runnable} runnable now; {plural(r.kernel_threads, 'kernel thread')} "
        f"({r.kernel_runnable} runnable); {plural(r.logical_cpus or '?', 'logical CPU')}; {every}; "
        f"scan {r.elapsed_ms:.0f} ms")]
    if r.interval:
        lines.append(f"CPU pressure, machine: {_pct(r.pressure_some)} of the interval some task waited for a CPU")
    lines += ["", *_cgroup_lines(r), *pod_lines(r.pods), "", *resize_lines(r.resizes)]
    with_pools = [p for p in r.processes if p.pools or p.pools_unknown is not None]
    others = [p for p in r.processes if p not in with_pools]
    shown = list(r.processes) if all_processes else with_pools + sorted(
        others, key=lambda p: (-(p.cpu_percent or 0), -p.runnable_now, -p.threads))[:OTHERS_SHOWN]
    order = {c.path: i for i, c in enumerate(r.cgroups)}
    shown.sort(key=lambda p: order.get(p.group, len(order)))  # stable: pools first within each cgroup
    hidden = len(r.processes) - len(shown)
    lines.append(f"{'pid':>7} {'user':<8} {'CPUs':>4} {'threads':>7} {'run':>5} {'CPU':>5}  "
                 f"{'pools (count: source)':<44} command")
    group = None
    for p in shown:
        if p.group != group and len(r.cgroups) > 1:
            group = p.group
            lines.append(escape_controls(f"  in {p.group}"))
        lines.append(_process_line(p))
        if p.owners:
            lines.append(escape_controls("          threads by owner: " + ", ".join(
                f"{owner} {n}" for owner, n in p.owners.items())))
    if hidden:
        lines.append(f"  ... and {hidden} more processes without native pools (--json lists them all)")
    lines.append("  run: runnable now / of them in pools;  in force: read from the process's memory;  "
                 "launch env: what its launch environment asks for (the process may have changed it; a prediction, "
                 "not counted in at once)"
                 + (";  attached: read inside the process (sys.remote_exec)"
                    if any(x.attached for p in shown for x in p.pools) else ""))
    lines += [escape_controls(f"  {note}") for note in r.notes]
    if r.families:
        lines += ["", "families (one parent, one command)"]
        for f in r.families:
            members = ", ".join(map(str, f.pids[:10])) + (" ..." if len(f.pids) > 10 else "")
            who = (f"{f.adopted_by}: {plural(f.size, 'process')} it adopted or started each on its own" if f.adopted_by
                   else f"pid {f.parent}: {plural(f.size, 'worker')}")
            lines.append(f"  {who} ({members}): {_cut(f.command, 80)}")
    found = r.findings()
    lines.append("")
    if not found:
        lines.append("no findings")
    for _, finding in found:
        lines.append(escape_controls(f"{finding.severity}: [{finding.id}] {finding.message}"))
        lines.append(escape_controls(f"  fix: {finding.fix}"))
    return "\n".join(lines)
