"""The typed rows of a fleet report: one worker (a process of a Dask or Ray cluster) and one host.

A worker row is made inside the worker (:func:`parinfo.fleet.probe.worker_row`) and travels to the
client as a plain dict (:meth:`WorkerRow.to_dict`, the ``workers`` rows of ``parinfo fleet show
--json``). :meth:`WorkerRow.from_dict` turns it back into typed sections through
:meth:`Report.from_dict <parinfo.diagnostics.model.Report.from_dict>`, the one parse path: a worker
row carries a few sections of its worker's report (machine, outer, pools, frameworks, findings)
under the same keys, and its thread variables with who set them. The fleet rules
(:mod:`parinfo.diagnostics.fleet_rules`) read these rows; :class:`HostSummary` is what they say of
the workers of one host.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from parinfo.diagnostics.findings import Finding
from parinfo.diagnostics.model import ProcessInfo, Report
from parinfo.errors import UsageError
from parinfo.payload import integer, rows, section, text
from parinfo.process.environment import EnvRow
from parinfo.process.outer import OuterThreads
from parinfo.process.pools import PoolRow
from parinfo.record import record

#: The machine facts and pool fields a worker row carries (the rest stays in the worker).
MACHINE_KEYS = ("usable_cpus", "usable_cpu_list", "quota", "cpuset", "logical_cpus", "cgroup_path")
POOL_KEYS = ("library", "user_api", "internal_api", "num_threads", "threading_layer", "owner", "filepath",
             "duplicate_of", "copies")
#: The pool fields read in each executor thread (OpenMP's count is per thread).
THREAD_POOL_KEYS = ("library", "user_api", "num_threads")


@record
class HostIdentity:
    """What makes workers share CPUs: one boot of one machine, one cgroup, one set of usable CPUs
    (``key`` joins them); ``hostname``, ``boot_id``, ``cgroup`` and ``cpus`` say each."""

    key: str
    hostname: str
    boot_id: str | None = None
    cgroup: str | None = None
    cpus: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HostIdentity:
        d = section(data)
        hostname = text(d.get("hostname")) or "unknown host"
        return cls(text(d.get("key")) or hostname, hostname, text(d.get("boot_id")), text(d.get("cgroup")),
                   text(d.get("cpus")))

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "hostname": self.hostname, "boot_id": self.boot_id, "cgroup": self.cgroup,
                "cpus": self.cpus}


@record
class ThreadPools:
    """The pools' counts as one executor thread saw them (``per_thread`` rows)."""

    thread: str
    pools: list[PoolRow] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ThreadPools:
        d = section(data)
        return cls(text(d.get("thread")) or "?", [PoolRow.from_dict(p) for p in rows(d.get("pools"))])

    def to_dict(self) -> dict[str, Any]:
        return {"thread": self.thread, "pools": [_keep(p.to_dict(), THREAD_POOL_KEYS) for p in self.pools]}


@record
class WorkerRow:
    """One worker of a cluster: its name, host, and the part of its report the fleet needs
    (``report``: machine, outer threads, pools, torch, the thread variables with who set each in
    ``outer.variables_set_by``, and the worker's findings); ``per_thread`` when every executor
    thread's counts were read."""

    worker: str
    host: HostIdentity
    report: Report
    per_thread: list[ThreadPools] | None = None

    @property
    def pid(self) -> int | None:
        return self.report.process.pid

    @property
    def findings(self) -> list[Finding]:
        return self.report.findings

    @classmethod
    def from_dict(cls, data: Any) -> WorkerRow:
        """The row of :meth:`to_dict`, from a worker; a missing field is unknown. Raises UsageError
        only when ``data`` is not a JSON object."""
        if not isinstance(data, Mapping):
            raise UsageError(f"a fleet worker row is a JSON object, not {type(data).__name__}")
        report = Report.from_dict(data)
        report.process = ProcessInfo(pid=integer(data.get("pid")))
        variables = rows(data.get("variables"))
        report.environment = [EnvRow.from_dict(v) for v in variables]
        set_by = {str(v.get("name")): who for v in variables if (who := text(v.get("set_by"))) is not None}
        if report.outer is None and set_by:
            report.outer = OuterThreads()
        if report.outer is not None:
            report.outer.variables_set_by = set_by
        per_thread = data.get("per_thread")
        return cls(text(data.get("worker")) or "unknown worker", HostIdentity.from_dict(section(data.get("host"))),
                   report, None if per_thread is None else [ThreadPools.from_dict(t) for t in rows(per_thread)])

    def variables(self) -> list[tuple[EnvRow, str | None]]:
        """The thread variables set in the worker now or at its launch, each with who set it (or None)."""
        r = self.report
        set_by = (r.outer.variables_set_by if r.outer is not None else None) or {}
        return [(e, set_by.get(e.name)) for e in r.environment if e.value is not None or e.launch_value]

    def to_dict(self) -> dict[str, Any]:
        r = self.report
        outer = {} if r.outer is None else {k: v for k, v in r.outer.to_dict().items() if k != "variables_set_by"}
        return {
            "worker": self.worker,
            "host": self.host.to_dict(),
            "pid": self.pid,
            "machine": _keep(r.machine.to_dict(), MACHINE_KEYS),
            "outer": outer,
            "pools": [_keep(p.to_dict(), POOL_KEYS) for p in r.pools],
            "frameworks": r.frameworks.to_dict(),
            "per_thread": None if self.per_thread is None else [t.to_dict() for t in self.per_thread],
            "variables": [{"name": e.name, "value": e.value, "launch_value": e.launch_value, "set_by": who}
                          for e, who in self.variables()],
            "findings": [f.to_dict() for f in r.findings],
        }


@record
class HostSummary:
    """One host of a fleet: its workers, the usable CPUs they share (the fewest any of them
    reports), their task threads, the threads they can run at once, the widest pool, the framework
    that runs them, and the host's findings."""

    host: str
    hostname: str
    workers: list[str]
    usable_cpus: int
    outer_threads: int
    threads_at_once: int
    widest_pool: int
    framework: str | None = None
    findings: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "workers": list(self.workers), "usable_cpus": self.usable_cpus,
                "outer_threads": self.outer_threads, "threads_at_once": self.threads_at_once,
                "widest_pool": self.widest_pool, "framework": self.framework, "hostname": self.hostname,
                "findings": [f.to_dict() for f in self.findings]}


def _keep(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: d.get(k) for k in keys}


@record(frozen=True)
class ProcessLoad:
    """One process of a cgroup as ``parinfo host`` reads it from outside: its widest native pool
    (``pool``, ``threads``; None when unknown), its outer threads (1: a process read from outside
    is one outer worker; a family's size counts its members), the family it belongs to (``family``:
    the pids with its parent and command, itself included), its ``command`` (escaped, quoted for a
    shell), the ``variables`` that decide its pools' counts (one per pool library, first in its
    precedence), ``unknown``: why its pools could not be read (then it is never guessed), and
    ``adopted_by``: the parent in words when it adopted the family (pid 1 or a subreaper), whose
    environment is no place to fix them."""

    pid: int
    name: str
    pool: str | None
    threads: int | None
    outer: int = 1
    parent: int | None = None
    family: tuple[int, ...] = ()
    command: str = ""
    variables: tuple[str, ...] = ()
    unknown: str | None = None
    adopted_by: str | None = None
