"""The typed rows of a fleet report: one worker (a process of a Dask or Ray cluster) and one host.

A worker row is made inside the worker (:func:`parinfo.fleet.probe.worker_row`) and travels to the
client as JSON (``convert.dump`` of a :class:`WorkerRow`, the ``workers`` rows of ``parinfo fleet
show --json``). ``convert.load(WorkerRow, row)`` turns it back into typed sections through the
report's own parse path: a worker row carries a few sections of its worker's report (machine,
outer, pools, frameworks, findings) under the same keys, and its thread variables with who set them. The fleet rules
(:mod:`parinfo.diagnostics.fleet_rules`) read these rows; :class:`HostSummary` is what they say of
the workers of one host.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from parinfo.diagnostics.findings import Finding
from parinfo.diagnostics.model import Frameworks, Report
from parinfo.process.environment import EnvRow
from parinfo.process.pools import PoolRow
from parinfo.records.payload import rows, section, text
from parinfo.records.record import record

#: The machine facts and pool fields a worker row carries (the rest stays in the worker).
MACHINE_KEYS = ("usable_cpus", "usable_cpu_list", "quota", "cpuset", "logical_cpus", "cgroup_path")
POOL_KEYS = ("library", "user_api", "internal_api", "num_threads", "threading_layer", "owner", "filepath",
             "duplicate_of", "copies")
#: The pool fields read in each executor thread (OpenMP's count is per thread).
THREAD_POOL_KEYS = ("library", "user_api", "num_threads")
#: The report's sections a worker row carries under the report's own keys.
REPORT_KEYS = ("machine", "outer", "pools", "frameworks", "findings")


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
    def _json_in(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        hostname = text(data.get("hostname")) or "unknown host"
        return {**data, "hostname": hostname, "key": text(data.get("key")) or hostname}


@record
class ThreadPools:
    """The pools' counts as one executor thread saw them (``per_thread`` rows)."""

    thread: str = field(metadata={"missing": "?"})
    pools: list[PoolRow] = field(default_factory=list)

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"thread": self.thread, "pools": [_keep(p, THREAD_POOL_KEYS) for p in data["pools"]]}


@record
class WorkerRow:
    """One worker of a cluster: its name, host, and the part of its report the fleet needs
    (``report``: machine, outer threads, pools, torch, the thread variables with who set each in
    ``outer.variables_set_by``, and the worker's findings); ``per_thread`` when every executor
    thread's counts were read.

    Its JSON (what travels from the worker) carries those sections of the report under the report's
    own keys, the pid, and the thread variables that are set, each with who set it."""

    worker: str = field(metadata={"missing": "unknown worker"})
    host: HostIdentity
    report: Report
    per_thread: list[ThreadPools] | None = None

    @property
    def pid(self) -> int | None:
        return self.report.process.pid

    @property
    def findings(self) -> list[Finding]:
        return self.report.findings

    def variables(self) -> list[tuple[EnvRow, str | None]]:
        """The thread variables set in the worker now or at its launch, each with who set it (or None)."""
        r = self.report
        set_by = (r.outer.variables_set_by if r.outer is not None else None) or {}
        return [(e, set_by.get(e.name)) for e in r.environment if e.value is not None or e.launch_value]

    #: The keys its _json_out writes beside its fields: the pid, the report's sections (the machine's and
    #: pools' in part, MACHINE_KEYS and POOL_KEYS), the variables with who set each.
    _json_extra = (("pid", int | None), ("machine", dict[str, object]), ("outer", dict[str, object]),
                   ("pools", list[dict[str, object]]), ("frameworks", Frameworks), ("findings", list[Finding]),
                   ("variables", list[dict[str, object]]))

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        report = data["report"]
        outer = {k: v for k, v in report["outer"].items() if k != "variables_set_by"}
        return {
            "worker": self.worker,
            "host": data["host"],
            "pid": self.pid,
            "machine": _keep(report["machine"], MACHINE_KEYS),
            "outer": outer,
            "pools": [_keep(p, POOL_KEYS) for p in report["pools"]],
            "frameworks": report["frameworks"],
            "per_thread": data["per_thread"],
            "variables": [{"name": e.name, "value": e.value, "launch_value": e.launch_value, "set_by": who}
                          for e, who in self.variables()],
            "findings": report["findings"],
        }

    @classmethod
    def _json_in(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        variables = rows(data.get("variables"))
        set_by = {str(v.get("name")): who for v in variables if (who := text(v.get("set_by"))) is not None}
        outer = section(data.get("outer")) or None
        if outer is not None or set_by:
            outer = {**(outer or {}), "variables_set_by": set_by}
        report = {**{k: data[k] for k in REPORT_KEYS if k in data}, "process": {"pid": data.get("pid")},
                  "environment": [{k: v for k, v in row.items() if k != "set_by"} for row in variables],
                  "outer": outer}
        return {"worker": data.get("worker"), "host": section(data.get("host")), "report": report,
                "per_thread": data.get("per_thread")}


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

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        return {k: data[k] for k in ("host", "workers", "usable_cpus", "outer_threads", "threads_at_once",
                                     "widest_pool", "framework", "hostname", "findings")}


def _keep(d: Mapping[str, Any], keys: tuple[str, ...]) -> Mapping[str, Any]:
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
    environment is no place to fix them. ``predicted_pool`` and ``predicted``: its widest pool when
    the counts predicted from its launch environment count too, where that is wider than ``threads``
    (None otherwise): shown, never counted as in force."""

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
    predicted_pool: str | None = None
    predicted: int | None = None
