"""The report model: a :class:`Report` and its typed sections, and the one way a payload becomes one.

A section whose facts a lower layer produces is that layer's class, so each fact has one
definition, next to the code that reads it: :class:`~parinfo.machine.topology.MachineFacts`,
:class:`~parinfo.machine.cpuid.CpuIdentity`, the live counters of :mod:`parinfo.machine.pressure`
and :mod:`parinfo.machine.memlimit`, and the rows of :mod:`parinfo.process` (pools, settings,
variables, torch, outer threads, OS threads, probes). Each record says on its fields how it
travels as JSON (:mod:`parinfo.records.convert`). The sections only the report assembles (the
process, parinfo's runtime as ``parinfo.runtime.info()`` gives it, the backends, the live evidence)
are defined in :mod:`parinfo.diagnostics.parts` and named here too.

:meth:`Report.from_dict` (:func:`parinfo.records.convert.load`) is the one parse path: a report from
another process (a fleet worker), from an older or newer parinfo, or a hand-made dict in a test
becomes typed sections there. It reads strictly by default (a report read back, a test's payload:
an unknown key or a value of the wrong type is a RecordError naming its path; a missing field
takes its default); with ``strict=False`` (another process, another user) a field that is missing
or odd is unknown, never an error. The rules only ever see typed sections.
:meth:`Report.to_dict` (:func:`parinfo.records.convert.dump`) is the ``--json`` payload (report.schema.json).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, Literal

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
from parinfo.machine.pod import PodFacts
from parinfo.machine.topology import MachineFacts
from parinfo.process.environment import EnvRow
from parinfo.process.outer import OuterThreads
from parinfo.process.pools import PoolRow
from parinfo.process.probing import Probes
from parinfo.process.provenance import SettingRow
from parinfo.process.thread_teams import ThreadTeams
from parinfo.process.threads import ThreadList
from parinfo.records.convert import EMPTY_IS_NONE, OMIT_NONE, doc, dump, load
from parinfo.records.record import record
from parinfo.runtime.snapshot import PoolCount as PoolCount, RuntimeSection as RuntimeSection
from parinfo.version import __version__

#: Version of the ``--json`` payload; bumped on any incompatible change (docs/report-schema.md).
SCHEMA_VERSION = 2


@record
class Report:
    """A snapshot of a process's parallelism, one typed section per fact family (``to_dict``: the
    ``--json`` payload). ``live``, ``outer``, ``teams`` and ``memory`` are None when not gathered
    (``{}`` in the payload), ``pod`` outside a pod (no key); ``parinfo_version`` is the version of the
    parinfo that gathered it."""

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
    live: LiveSection | None = field(default=None, metadata=EMPTY_IS_NONE)
    outer: OuterThreads | None = field(default=None, metadata=EMPTY_IS_NONE)
    parinfo_version: str = field(default=__version__, metadata={"missing": "unknown"})
    teams: ThreadTeams | None = field(default=None, metadata={**EMPTY_IS_NONE, **doc(
        "The team each Python thread gets from each pool whose scope is measured (added within version 2; "
        "{} when not gathered: a report of another process, or of a process with no thread besides the one "
        "that asked): columns (pool, copy, scope, shared), then per thread its cells (count, why, exact, "
        "source); exact is false where the count is predicted, not read in or for that thread.")})
    memory: MemoryPolicy | None = field(default=None, metadata={**EMPTY_IS_NONE, **doc(
        "The process's NUMA memory policy (added within version 2; {} when not gathered): policy as "
        "/proc/PID/numa_maps words it (default, bind, interleave, prefer, local, ...) or null when unknown "
        "(source says why), the nodes it names, the nodes the process may use (Mems_allowed_list, or null), "
        "where each was read, and a note on mappings under another policy.")})
    pod: PodFacts | None = field(default=None, metadata={**OMIT_NONE, **doc(
        "The Kubernetes pod the process runs in, read from the cgroups the kubelet made (added within "
        "version 2; absent outside a pod): QoS class, pod uid, container id, request, container and pod "
        "limits, the CPU manager's cpuset, and the usable CPUs as parinfo and each runtime count them "
        "(docs/kubernetes.md).")})

    _json_extra = (("schema_version", Literal[SCHEMA_VERSION]),)  # written by _json_out

    def problems(self, severity: Severity | str = Severity.WARNING) -> list[Finding]:
        """Findings at ``severity`` or above (what ``parinfo show --check`` fails on)."""
        return at_least(self.findings, severity)

    def _repr_html_(self) -> str:
        """The report in a notebook: a table per section, the findings by severity (self-contained HTML)."""
        from parinfo.diagnostics.html import report_html

        return report_html(self)

    @classmethod
    def from_dict(cls, payload: Any, *, strict: bool = True) -> Report:
        """The report of a ``--json`` payload (or any part of one: a missing section is empty, a
        missing field unknown). Raises UsageError when ``payload`` is not a JSON object, and, read
        ``strict`` (trusted: a report read back, a test's payload), RecordError (a UsageError too)
        naming the path of an unknown key, a missing REQUIRED field or a value of the wrong type.
        ``strict=False`` is for a payload from another process or user: a missing or odd value is
        unknown, never an error."""
        if not isinstance(payload, Mapping):
            raise UsageError(f"a report is a JSON object (parinfo show --json), not {type(payload).__name__}")
        return load(cls, payload, strict=strict)

    def to_dict(self) -> dict[str, Any]:
        """The ``parinfo show --json`` payload."""
        return dict(dump(self))

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        gathered = ("outer", "live", "memory", "teams")  # not gathered: {} (read back as None)
        out = {"schema_version": SCHEMA_VERSION, **{k: (data[k] or {}) if k in gathered else data[k] for k in _ORDER}}
        if "pod" in data:  # only in a pod: the payload of any other process is as it was
            out["pod"] = data["pod"]
        return out


#: The order of the payload's sections (report.schema.json).
_ORDER = ("parinfo_version", "process", "probes", "machine", "cpu", "runtime", "backend", "pools", "frameworks",
          "settings", "environment", "threads", "teams", "outer", "findings", "live", "memory")
