"""One report, whoever read it: readers fill what they can, :func:`assemble` makes the report.

A reader is one way to know a process: from inside this process
(:func:`parinfo.diagnostics.report.read_here`), from outside through /proc and its memory
(:func:`parinfo.diagnostics.outside_report.read_outside`), or inside another CPython 3.14+ process through
``sys.remote_exec`` with the rest from outside (:func:`parinfo.diagnostics.attached.read_attached`).
Each fills a :class:`Filled`; what every report has whoever read it (the CPU's identity, the live
evidence, the memory policy, the pod, the findings) is added here, once. A count shown for another process
is decided by the one rule :func:`parinfo.outside.standing.decide` (in force > attached > launch
environment > unknown): a pool's ``num_threads`` holds a count in force only, a prediction stays in
``launch_count`` and says so, so the findings, which read ``num_threads``, never warn on a
prediction alone.

A report of another process ends by checking that its handle still names the process first read
(:meth:`parinfo.machine.procfs.Proc.same_or_gone`): a pid given to a new process during the read
is ProcessGone, never a report mixing two processes.
"""
from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

from parinfo.diagnostics.model import Report
from parinfo.records.record import record

if TYPE_CHECKING:
    from parinfo.diagnostics.model import Backend, Frameworks, LiveSection, ProcessInfo
    from parinfo.machine.mempolicy import MemoryPolicy
    from parinfo.machine.procfs import Proc
    from parinfo.machine.topology import MachineFacts
    from parinfo.process.environment import EnvRow
    from parinfo.process.outer import OuterThreads
    from parinfo.process.pools import PoolRow
    from parinfo.process.probing import Probes
    from parinfo.process.provenance import SettingRow
    from parinfo.process.thread_teams import ThreadTeams
    from parinfo.process.threads import ThreadList
    from parinfo.runtime.snapshot import RuntimeSection

__all__ = ["Filled", "assemble"]


@record
class Filled:
    """What one reader could tell of a process, section by section of :class:`Report`.

    ``live`` and ``memory`` are None when the assembler is to read them (a reader of a tree samples
    its own live section); ``descendants`` are the pool rows of a tree's other processes, added to
    the report after its findings (a rule over pools judges one process), None for one process."""

    machine: MachineFacts
    process: ProcessInfo
    probes: Probes
    runtime: RuntimeSection
    backend: Backend
    pools: list[PoolRow]
    frameworks: Frameworks
    threads: ThreadList
    environment: list[EnvRow] = field(default_factory=list)
    settings: list[SettingRow] = field(default_factory=list)
    outer: OuterThreads | None = None
    live: LiveSection | None = None
    memory: MemoryPolicy | None = None
    teams: ThreadTeams | None = None
    descendants: list[PoolRow] | None = None


def assemble(filled: Filled, proc: Proc | None, root: str = "/") -> Report:
    """The report of the process ``proc`` (None: this one) from what a reader ``filled``: the
    sections every report has are read here, the findings judged, and the handle checked to name
    the same process at the end. Raises ProcessGone when the process ends, or its pid is given to
    another, while it is read."""
    from parinfo.diagnostics.live import live_section
    from parinfo.diagnostics.process_rules import diagnose
    from parinfo.machine.cpuid import cpu_identity
    from parinfo.machine.mempolicy import memory_policy
    from parinfo.machine.proc_words import ProcessGone, exited_during_read

    count = filled.threads.count
    try:
        live = filled.live if filled.live is not None else live_section(
            proc, root, threads=count if isinstance(count, int) else None)
        memory = filled.memory if filled.memory is not None else memory_policy(proc, root)
        pod = None
        if filled.machine.pod_request is not None:  # None only outside a pod: the pod model is read only in one
            from parinfo.machine.pod import pod_facts

            pod = pod_facts(root, proc, filled.machine)
    except ProcessGone:
        if proc is None:
            raise
        raise exited_during_read(proc.pid or 0) from None
    report = Report(machine=filled.machine, process=filled.process, probes=filled.probes, cpu=cpu_identity(root),
                    runtime=filled.runtime, backend=filled.backend, pools=filled.pools,
                    frameworks=filled.frameworks, settings=filled.settings, environment=filled.environment,
                    threads=filled.threads, live=live, outer=filled.outer, memory=memory,
                    teams=filled.teams, pod=pod)
    report.findings = diagnose(report)
    if filled.descendants is not None:
        for row in report.pools:
            row.pid = report.process.pid
        report.pools += filled.descendants
    if proc is not None:
        proc.same_or_gone()
    return report
