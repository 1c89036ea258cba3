"""The fleet report: one row per worker and one per host, with their findings.

Worker rows arrive as plain, JSON-ready dicts (made by :func:`parinfo.fleet.probe.worker_row` inside
each worker) and are parsed into typed rows (:class:`~parinfo.diagnostics.fleet_rows.WorkerRow`);
hosts are grouped here by host identity (boot, cgroup, usable CPUs) and judged by
:mod:`parinfo.diagnostics.fleet_rules`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from parinfo.diagnostics import fleet_rules
from parinfo.diagnostics.findings import Finding, Severity, at_least
from parinfo.diagnostics.fleet_rows import HostSummary, WorkerRow
from parinfo.records.convert import OMIT_NONE, dump, load
from parinfo.records.record import record
from parinfo.safe_text import plural

#: Version of :meth:`FleetReport.to_dict`; bumped on any incompatible change (docs/fleet.md).
SCHEMA_VERSION = 2


@record
class Cluster:
    """The cluster a fleet report read: its ``kind`` (dask, ray), scheduler ``address``, the probes
    sent (Ray: one task per CPU) and the workers or rows that gave no row, each with why."""

    kind: str
    address: str = ""
    probes: int | None = field(default=None, metadata=OMIT_NONE)
    failed: dict[str, str] = field(default_factory=dict)


@record
class FleetReport:
    """Every worker of a cluster, every host they run on, and what is wrong with them."""

    cluster: Cluster
    workers: list[WorkerRow]
    hosts: list[HostSummary] = field(default_factory=list)
    elapsed_s: float | None = None

    @classmethod
    def from_rows(cls, cluster: Cluster, rows: list[Any], elapsed_s: float | None = None, *,
                  strict: bool) -> FleetReport:
        """Parse the worker rows (a row that is not a JSON object is listed in ``cluster.failed``),
        group them by host and judge each host. ``strict``: how far the rows are trusted
        (:func:`parinfo.records.convert.load`): False for what workers answer, True for a test's rows."""
        parsed = []
        for i, row in enumerate(rows):
            if isinstance(row, Mapping):
                parsed.append(load(WorkerRow, row, strict=strict))
            else:
                cluster.failed[f"row {i}"] = f"not a worker row: {type(row).__name__}"
        by_host: dict[str, list[WorkerRow]] = {}
        for worker in sorted(parsed, key=lambda w: (w.host.key, w.worker)):
            by_host.setdefault(worker.host.key, []).append(worker)
        hosts = []
        for key, members in by_host.items():
            summary = fleet_rules.host_summary(key, members)
            summary.findings = fleet_rules.host_findings(summary)
            hosts.append(summary)
        return cls(cluster, [w for m in by_host.values() for w in m], hosts, elapsed_s)

    def findings(self) -> list[tuple[str, Finding]]:
        """(where, finding) for every host and worker finding: hosts first."""
        out = [(f"host {h.hostname}", f) for h in self.hosts for f in h.findings]
        out += [(f"worker {w.worker}", f) for w in self.workers for f in w.findings]
        return out

    def problems(self, severity: Severity | str = Severity.WARNING) -> list[tuple[str, Finding]]:
        """Findings at ``severity`` or above (what ``parinfo fleet show --check`` fails on)."""
        return [(where, f) for where, f in self.findings() if at_least([f], severity)]

    def to_dict(self) -> dict[str, Any]:
        """The ``parinfo fleet show --json`` payload."""
        return dict(dump(self))

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        from parinfo.version import __version__

        return {"schema_version": SCHEMA_VERSION, "parinfo_version": __version__, "cluster": data["cluster"],
                "elapsed_s": data["elapsed_s"], "hosts": data["hosts"], "workers": data["workers"]}

    def table(self) -> str:
        """Hosts, then workers, then findings, as text for people."""
        lines = [f"{self.cluster.kind} cluster {self.cluster.address}: "
                 f"{plural(len(self.workers), 'worker')} on "
                 f"{plural(len(self.hosts), 'host')}"]
        lines.append("")
        lines.append(f"{'host':<24} {'workers':>7} {'usable CPUs':>11} {'task threads':>12} {'threads at once':>15}")
        for h in self.hosts:
            lines.append(f"{_cut(h.hostname, 24):<24} {len(h.workers):>7} {h.usable_cpus:>11} "
                         f"{h.outer_threads:>12} {h.threads_at_once:>15}")
        lines.append("")
        lines.append(f"{'worker':<28} {'pid':>7} {'CPUs':>4} {'threads':>7}  pools")
        for w in self.workers:
            threads = None if w.report.outer is None else w.report.outer.threads
            pools = ", ".join(f"{p.library}={p.num_threads if p.num_threads is not None else '?'}"
                              for p in w.report.pools if not p.duplicate_of) or "none loaded"
            if w.per_thread:
                seen = sorted({f"{p.library}={p.num_threads}" for t in w.per_thread for p in t.pools
                               if p.num_threads is not None})
                pools += f"  [{len(w.per_thread)} executor threads: {', '.join(seen)}]"
            pid = w.pid if w.pid is not None else "?"
            lines.append(f"{_cut(w.worker, 28):<28} {pid:>7} "
                         f"{fleet_rules.budget(w.report):>4} {threads if threads is not None else '-':>7}  {pools}")
        setters = sorted({(e.name, e.value, who) for w in self.workers for e, who in w.variables()
                          if who and e.value is not None})
        if setters:
            lines.append("")
            lines.append("variables set in the workers")
            lines += [f"  {name}={value}  by {who}" for name, value, who in setters]
        found = self.findings()
        lines.append("")
        if not found:
            lines.append("no findings")
        for where, f in found:
            lines.append(f"{f.severity}: [{f.id}] {where}: {f.message}")
            lines.append(f"  fix: {f.fix}")
        return "\n".join(lines)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"
