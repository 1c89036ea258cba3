"""The fleet report: one row per worker and one per host, with their findings.

Rows are plain, JSON-ready dicts (made by :func:`parinfo.fleet.probe.worker_row` inside each
worker); hosts are grouped here by host identity (boot, cgroup, usable CPUs) and judged by
:mod:`parinfo.diagnostics.fleet_rules`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from parinfo.diagnostics import fleet_rules
from parinfo.diagnostics.findings import Finding, at_least

#: Version of :meth:`FleetReport.to_dict`; bumped on any incompatible change (docs/fleet.md).
SCHEMA_VERSION = 1


@dataclass
class FleetReport:
    """Every worker of a cluster, every host they run on, and what is wrong with them."""

    cluster: dict[str, Any]
    workers: list[dict[str, Any]]
    hosts: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float | None = None

    @classmethod
    def from_rows(cls, cluster: dict[str, Any], rows: list[dict[str, Any]],
                  elapsed_s: float | None = None) -> FleetReport:
        """Group worker rows by host and judge each host."""
        by_host: dict[str, list[dict[str, Any]]] = {}
        for row in sorted(rows, key=lambda r: (r["host"]["key"], str(r["worker"]))):
            by_host.setdefault(row["host"]["key"], []).append(row)
        hosts = []
        for key, members in by_host.items():
            summary = fleet_rules.host_summary(key, members)
            summary["hostname"] = members[0]["host"]["hostname"]
            summary["findings"] = [f.to_dict() for f in fleet_rules.host_findings(summary)]
            hosts.append(summary)
        return cls(cluster, [r for m in by_host.values() for r in m], hosts, elapsed_s)

    def findings(self) -> list[tuple[str, Finding]]:
        """(where, finding) for every host and worker finding: hosts first."""
        out = [(f"host {h['hostname']}", Finding(**f)) for h in self.hosts for f in h["findings"]]
        out += [(f"worker {w['worker']}", Finding(**f)) for w in self.workers for f in w["findings"]]
        return out

    def problems(self, severity: str = "warning") -> list[tuple[str, Finding]]:
        """Findings at ``severity`` or above (what ``parinfo fleet show --check`` fails on)."""
        return [(where, f) for where, f in self.findings() if at_least([f], severity)]

    def to_dict(self) -> dict[str, Any]:
        """The ``parinfo fleet show --json`` payload."""
        from parinfo.version import __version__

        return {"schema_version": SCHEMA_VERSION, "parinfo_version": __version__, "cluster": self.cluster,
                "elapsed_s": self.elapsed_s, "hosts": self.hosts, "workers": self.workers}

    def table(self) -> str:
        """Hosts, then workers, then findings, as text for people."""
        lines = [f"{self.cluster.get('kind', '?')} cluster {self.cluster.get('address', '')}: "
                 f"{len(self.workers)} worker{'s' if len(self.workers) != 1 else ''} on "
                 f"{len(self.hosts)} host{'s' if len(self.hosts) != 1 else ''}"]
        lines.append("")
        lines.append(f"{'host':<24} {'workers':>7} {'usable CPUs':>11} {'task threads':>12} {'threads at once':>15}")
        for h in self.hosts:
            lines.append(f"{_cut(h['hostname'], 24):<24} {len(h['workers']):>7} {h['usable_cpus']:>11} "
                         f"{h['outer_threads']:>12} {h['threads_at_once']:>15}")
        lines.append("")
        lines.append(f"{'worker':<28} {'pid':>7} {'CPUs':>4} {'threads':>7}  pools")
        for w in self.workers:
            outer = w.get("outer") or {}
            threads = outer.get("threads")
            pools = ", ".join(f"{p['library']}={p['num_threads'] if p['num_threads'] is not None else '?'}"
                              for p in w["pools"] if not p.get("duplicate_of")) or "none loaded"
            per = w.get("per_thread")
            if per:
                seen = sorted({f"{p['library']}={p['num_threads']}" for t in per for p in t["pools"]
                               if p.get("num_threads") is not None})
                pools += f"  [{len(per)} executor threads: {', '.join(seen)}]"
            lines.append(f"{_cut(str(w['worker']), 28):<28} {w['pid']:>7} "
                         f"{fleet_rules.budget(w):>4} {threads if threads is not None else '-':>7}  {pools}")
        setters = sorted({(v["name"], v["value"], v["set_by"]) for w in self.workers for v in w["variables"]
                          if v.get("set_by") and v.get("value") is not None})
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
