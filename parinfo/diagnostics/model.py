"""The report model: a :class:`Report` and its typed sections, and the one way a payload becomes one.

A section whose facts a lower layer produces is that layer's class, so each fact has one
definition, next to the code that reads it: :class:`~parinfo.machine.topology.MachineFacts`,
:class:`~parinfo.machine.cpuid.CpuIdentity`, the live counters of :mod:`parinfo.machine.pressure`
and :mod:`parinfo.machine.memlimit`, and the rows of :mod:`parinfo.process` (pools, settings,
variables, torch, outer threads, OS threads, probes). Those layers keep handing out plain dicts
(their ``to_dict``), which is their public API. The sections only the report assembles (the
process, parinfo's runtime as ``parinfo.runtime.info()`` gives it, the backends, the live evidence)
are defined in :mod:`parinfo.diagnostics.parts` and named here too.

:meth:`Report.from_dict` is the one parse path: a report from another process (a fleet worker),
from an older or newer parinfo, or a hand-made dict in a test becomes typed sections there, each
field that is missing or odd being unknown, never an error; the rules only ever see typed sections.
:meth:`Report.to_dict` is the ``--json`` payload (report.schema.json), field for field as before.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from parinfo.diagnostics.findings import Finding, Severity, at_least
from parinfo.diagnostics.parts import (
    Backend as Backend,
    Frameworks as Frameworks,
    LiveSection as LiveSection,
    ProcessInfo as ProcessInfo,
    ProcessTree as ProcessTree,
    StackBudget as StackBudget,
    StackLimit as StackLimit,
    TreeMember as TreeMember,
)
from parinfo.errors import UsageError
from parinfo.machine.cpuid import CpuIdentity
from parinfo.machine.mempolicy import MemoryPolicy
from parinfo.machine.topology import MachineFacts
from parinfo.payload import rows, section, text
from parinfo.process.environment import EnvRow
from parinfo.process.outer import OuterThreads
from parinfo.process.pools import PoolRow
from parinfo.process.probing import Probes
from parinfo.process.provenance import SettingRow
from parinfo.process.threads import ThreadList
from parinfo.record import record
from parinfo.runtime.snapshot import PoolCount as PoolCount, RuntimeSection as RuntimeSection
from parinfo.version import __version__

#: Version of the ``--json`` payload; bumped on any incompatible change (docs/report-schema.md).
SCHEMA_VERSION = 2


@record
class Report:
    """A snapshot of a process's parallelism, one typed section per fact family (``to_dict``: the
    ``--json`` payload). ``live``, ``outer`` and ``memory`` are None when not gathered (``{}`` in the payload);
    ``parinfo_version`` is the version of the parinfo that gathered it."""

    machine: MachineFacts
    process: ProcessInfo = field(default_factory=ProcessInfo)
    probes: Probes = field(default_factory=Probes)
    cpu: CpuIdentity = field(default_factory=CpuIdentity)
    runtime: RuntimeSection = field(default_factory=RuntimeSection)
    backend: Backend = field(default_factory=Backend)
    pools: list[PoolRow] = field(default_factory=list)
    frameworks: Frameworks = field(default_factory=Frameworks)
    settings: list[SettingRow] = field(default_factory=list)
    environment: list[EnvRow] = field(default_factory=list)
    threads: ThreadList = field(default_factory=ThreadList)
    findings: list[Finding] = field(default_factory=list)
    live: LiveSection | None = None
    outer: OuterThreads | None = None
    parinfo_version: str = __version__
    memory: MemoryPolicy | None = None

    def problems(self, severity: Severity | str = Severity.WARNING) -> list[Finding]:
        """Findings at ``severity`` or above (what ``parinfo show --check`` fails on)."""
        return at_least(self.findings, severity)

    def _repr_html_(self) -> str:
        """The report in a notebook: a table per section, the findings by severity (self-contained HTML)."""
        from parinfo.diagnostics.html import report_html

        return report_html(self)

    @classmethod
    def from_dict(cls, payload: Any) -> Report:
        """The report of a ``--json`` payload (or any part of one: a missing section is empty, a
        missing field unknown). Raises UsageError only when ``payload`` is not a JSON object."""
        if not isinstance(payload, Mapping):
            raise UsageError(f"a report is a JSON object (parinfo show --json), not {type(payload).__name__}")
        d = payload
        live, outer, memory = section(d.get("live")), section(d.get("outer")), section(d.get("memory"))
        found = (Finding.from_dict(f) for f in rows(d.get("findings")))
        return cls(
            machine=MachineFacts.from_dict(section(d.get("machine"))),
            process=ProcessInfo.from_dict(section(d.get("process"))),
            probes=Probes.from_dict(section(d.get("probes"))),
            cpu=CpuIdentity.from_dict(section(d.get("cpu"))),
            runtime=RuntimeSection.from_dict(section(d.get("runtime"))),
            backend=Backend.from_dict(section(d.get("backend"))),
            pools=[PoolRow.from_dict(p) for p in rows(d.get("pools"))],
            frameworks=Frameworks.from_dict(section(d.get("frameworks"))),
            settings=[SettingRow.from_dict(s) for s in rows(d.get("settings"))],
            environment=[EnvRow.from_dict(e) for e in rows(d.get("environment"))],
            threads=ThreadList.from_dict(section(d.get("threads"))),
            findings=[f for f in found if f is not None],
            live=LiveSection.from_dict(live) if live else None,
            outer=OuterThreads.from_dict(outer) if outer else None,
            parinfo_version=text(d.get("parinfo_version")) or "unknown",
            memory=MemoryPolicy.from_dict(memory) if memory else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``parinfo show --json`` payload."""
        return {
            "schema_version": SCHEMA_VERSION,
            "parinfo_version": self.parinfo_version,
            "process": self.process.to_dict(),
            "probes": self.probes.to_dict(),
            "machine": self.machine.to_dict(),
            "cpu": self.cpu.to_dict(),
            "runtime": self.runtime.to_dict(),
            "backend": self.backend.to_dict(),
            "pools": [p.to_dict() for p in self.pools],
            "frameworks": self.frameworks.to_dict(),
            "settings": [s.to_dict() for s in self.settings],
            "environment": [e.to_dict() for e in self.environment],
            "threads": self.threads.to_dict(),
            "outer": {} if self.outer is None else self.outer.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "live": {} if self.live is None else self.live.to_dict(),
            "memory": {} if self.memory is None else self.memory.to_dict(),
        }
