"""The report as sections of rows: what every front end shows, decided once.

Each section is a title, rows of cells (an optional header row: ``columns``), lines under a row
(``details``: a pool's file and note) and notes under the rows. Emphasis is plain data, a *tone*
(:data:`TONES`), which each renderer turns into its own styles: the text renderer
(parinfo.cli.render_text) into aligned lines styled through rich, :mod:`parinfo.diagnostics.html`
into tables. Findings are not a section here: they are data already (``Report.findings``), and each
renderer lays them out its own way (:func:`findings_by_severity` groups them).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from parinfo.diagnostics.findings import WORST_FIRST
from parinfo.diagnostics.wording import (
    THREAD_STATES,
    human_bytes,
    pool_count,
    pool_title,
    pressure_text,
    probes_text,
    python_text,
    quota_text,
    show_value,
    stack_text,
    throttling_text,
)
from parinfo.machine.cpulist import format_cpu_list
from parinfo.process.threads import thread_group
from parinfo.records.record import record
from parinfo.records.source import Kind
from parinfo.safe_text import escape_controls, plural

if TYPE_CHECKING:
    from parinfo.diagnostics.findings import Finding, Severity
    from parinfo.diagnostics.parts import Backend, Frameworks, LiveSection, ProcessInfo
    from parinfo.machine.cpuid import CpuIdentity
    from parinfo.machine.mempolicy import MemoryPolicy
    from parinfo.machine.pod import PodFacts
    from parinfo.machine.topology import MachineFacts
    from parinfo.process.environment import EnvRow
    from parinfo.process.outer import OuterThreads
    from parinfo.process.pools import PoolRow
    from parinfo.process.probing import Probes
    from parinfo.process.provenance import SettingRow
    from parinfo.process.serving import Served
    from parinfo.process.thread_teams import ThreadTeams
    from parinfo.process.threads import ThreadList
    from parinfo.runtime.snapshot import RuntimeSection

    class Report(Protocol):
        """What the sections read of a report (parinfo.diagnostics.model.Report, which renders
        through this module and so cannot be imported by it)."""

        machine: MachineFacts
        process: ProcessInfo
        probes: Probes
        cpu: CpuIdentity
        runtime: RuntimeSection
        backend: Backend
        pools: list[PoolRow]
        frameworks: Frameworks
        settings: list[SettingRow]
        environment: list[EnvRow]
        threads: ThreadList
        findings: list[Finding]
        live: LiveSection | None
        outer: OuterThreads | None
        memory: MemoryPolicy | None
        teams: ThreadTeams | None
        pod: PodFacts | None

#: The tones a row, a note or a span may carry: "" (plain), "strong" (the line that sums the section
#: up), "dim" (how or why), "warning" (a value that is wrong or changed), "good" (all is well).
TONES = ("", "strong", "dim", "warning", "good")

Span = tuple[str, str]  # (text, tone)


@record(frozen=True)
class Row:
    """One row of a section: its cells, a tone, and lines shown under it."""

    cells: tuple[str, ...]
    tone: str = ""
    details: tuple[str, ...] = ()


@record(frozen=True)
class Note:
    """A line under a section's rows: how a value was decided, what is not set, why it is empty."""

    text: str
    tone: str = "dim"


@record(frozen=True)
class Section:
    """A titled part of the report (``key`` names it for programs: "machine", "pools", ...)."""

    key: str
    title: str
    rows: tuple[Row, ...] = ()
    columns: tuple[str, ...] = ()
    notes: tuple[Note, ...] = ()


def _pairs(pairs: list[tuple[str, str]]) -> tuple[Row, ...]:
    return tuple(Row(cells) for cells in pairs)


def machine(r: Report) -> Section:
    m, unknown = r.machine, r.machine.unknown
    nodes = m.numa_nodes
    rows = [
        ("logical CPUs", show_value(m.logical_cpus, unknown, "logical_cpus")),
        ("physical cores", show_value(m.physical_cores, unknown, "physical_cores")),
        ("sockets", show_value(m.sockets, unknown, "sockets")),
        ("NUMA nodes", f"{len(nodes)}: " + "; ".join(format_cpu_list(n) for n in nodes) if nodes
         else show_value(None, unknown, "numa_nodes")),
        ("SMT", show_value(m.smt, unknown, "smt")),
    ]
    for kind, cpus in m.core_types.items():
        rows.append((f"{kind} cores", format_cpu_list(cpus)))
    rows += [
        ("affinity", f"{format_cpu_list(m.affinity)} ({plural(len(m.affinity), 'CPU')})"),
        ("cpuset", "none" if m.cpuset is None else format_cpu_list(m.cpuset)),
        ("cgroup CPU quota", quota_text(m)),
    ]
    if m.quota is not None or m.quota_rounding_source.kind is not Kind.PARINFO_DEFAULT:
        rows.append(("quota rounding", f"{m.quota_rounding} ({m.quota_rounding_source})"))
    if m.quota is not None and m.usable_by_rule:
        rows.append(("by runtime", ", ".join(f"{k} {v}" for k, v in m.usable_by_rule.items())))
    if m.quota is not None:
        rows.append(("by library", library_defaults(m)))
    if m.allocation is not None:
        rows.append(("Slurm allocation", f"{plural(m.allocation, 'CPU')} ({m.allocation_source})"))
    usable = Row(("usable CPUs", f"{m.usable_cpus} ({plural(m.usable_physical_cores, 'physical core')})"), "strong")
    notes = [Note(f"usable = {m.usable_rule}"),
             *(Note(f"invalid: {name}: {why}", "warning") for name, why in m.invalid.items()),
             *(Note(f"note: {n}") for n in m.notes)]
    return Section("machine", "Machine", (*_pairs(rows), usable), notes=tuple(notes))


def library_defaults(m: MachineFacts) -> str:
    """The count each library with pools of its own (a Python module or a framework) takes by
    itself on machine ``m``, whether or not the process loaded it: beside the runtimes' rounding,
    which of them follow the quota. A library whose count is its OpenMP runtime's is that runtime's."""
    from parinfo.process import libraries as reg
    from parinfo.process.defaults import NO_FACTS

    out = []
    for rec in (*reg.of_kind(reg.LibraryKind.FRAMEWORK), *reg.python_libraries()):
        if rec.follows is None and rec.has_default:
            n, _ = rec.default(m, NO_FACTS)
            if n is not None:
                out.append(f"{rec.name} {n}")
    return ", ".join(out) or "none"


def memory(r: Report) -> Section | None:
    """The process's NUMA memory policy and the nodes it may use (none when not gathered)."""
    m = r.memory
    if m is None:
        return None
    policy = m.text if m.policy is None else f"{m.text} ({m.source})"
    allowed = str(m.allowed_source) if m.allowed is None else f"{format_cpu_list(m.allowed)} ({m.allowed_source})"
    notes = (Note(f"note: {m.note}"),) if m.note else ()
    return Section("memory", "Memory policy", _pairs([("policy", policy), ("allowed nodes", allowed)]), notes=notes)


def cpu(r: Report) -> Section:
    c = r.cpu
    rows = [("brand", show_value(c.brand, c.unknown, "brand")),
            ("arch", show_value(c.arch, c.unknown, "arch")),
            ("ISA for kernels", ", ".join(c.isa) if c.isa else "none of note")]
    if c.caches:
        rows.append(("caches", ", ".join(f"{k} {human_bytes(v)}" for k, v in c.caches.items())))
    return Section("cpu", "CPU", _pairs(rows))


def backend(r: Report) -> Section:
    b, rt = r.backend, r.runtime
    started = "running" if b.runtime_started else "not started (pools start on first use)"
    rows = [("parinfo runtime", f"{b.runtime} ({rt.backend_source or 'default'}), {started}" if rt.unknown is None
             else rt.unknown)]
    layers = b.layers
    for label, value in (("OpenMP", layers.openmp), ("MKL layer", layers.mkl),
                         ("OpenBLAS layer", layers.openblas), ("BLIS layer", layers.blis),
                         ("TBB", layers.tbb), ("torch ATen", b.torch)):
        if value is None or value == "":
            continue
        rows.append((label, show_value(value)))
    outer = r.outer
    if outer is not None and outer.threads is not None:  # a Dask, Ray or loky worker, or inspect(outer_threads=N)
        rows.append(("outer threads", f"{outer.threads} ({outer.source})"))
    if b.python is not None:
        rows.append(("Python", python_text(b.python)))
    details: list[Row] = []
    for label, served in (("allocator", b.allocator), ("OpenMP calls", b.openmp)):
        if served is not None:
            details.append(_served_row(label, served))
    follow = rt.follow
    if follow is not None:
        what = "on" if follow.enabled else f"off ({follow.enabled_source or 'default'})"
        if follow.enabled and follow.changes:
            last = follow.changes[-1]
            cpus = last.usable_cpus if len(last.usable_cpus) == 2 else ["?", "?"]
            what += f"; usable CPUs {cpus[0]} -> {cpus[1]} at {last.at}"
            if last.resized:
                what += f" ({'; '.join(last.resized)})"
        rows.append(("follows quota", what))
    return Section("backend", "Backend", (*_pairs(rows), *details))


def _served_row(label: str, served: Served) -> Row:
    """The library that serves a family of calls: its name and who chose it, with its file, its
    variables and what else is loaded under it."""
    if served.unknown is not None:
        return Row((label, f"unknown ({served.unknown})"))
    value = served.label or served.name or "unknown"
    if served.source is not None:
        value += f" ({served.source})"
    lines = [served.path or ""] if served.path else []
    lines += [f"{s.name}={s.value} ({s.source})" for s in served.settings]
    if served.note:
        lines.append(served.note)
    return Row((label, value), details=tuple(lines))


def pools(r: Report) -> Section:
    if not r.pools:
        unreadable = (r.process.unreadable or {}).get("pools")
        return Section("pools", "Native pools", notes=(Note(unreadable or "none loaded"),))
    rows = tuple(Row((pool_title(p), *pool_count(p)), details=tuple(d for d in (p.filepath, p.note) if d))
                 for p in r.pools)
    return Section("pools", "Native pools", rows)


def frameworks(r: Report) -> Section | None:
    torch = r.frameworks.torch
    if torch is None:
        return None
    keys = ("version", "intra_op", "inter_op", "aten_backend", "openmp", "mkl_version", "mkldnn_version",
            "interop_started", "hardware_concurrency")
    rows = [(k.replace("_", " "), show_value(getattr(torch, k))) for k in keys if getattr(torch, k) is not None]
    return Section("torch", "torch", _pairs(rows))


def settings(r: Report) -> Section:
    libs = Counter(row.library for row in r.settings)
    rows = tuple(Row((row.library + (f" [{row.owner}]" if libs[row.library] > 1 and row.owner else ""),
                      show_value(row.count) + (f" ({row.capped_to} run)" if row.capped_to else ""),
                      str(row.source))) for row in r.settings)
    if not rows:  # a process attached to that runs no pool, no framework and no parinfo runtime
        return Section("settings", "Thread counts in force", notes=(Note("none: no thread pool is loaded"),))
    return Section("settings", "Thread counts in force", rows, columns=("who", "count", "decided by"))


def _readers_text(row: EnvRow) -> str:
    """Who reads a variable, from the library registry; a variable the registry does not know is
    not claimed to be read by nothing, only unknown to parinfo."""
    if row.readers:
        return "read by " + ", ".join(row.readers)
    if not row.known:
        return "reader unknown to parinfo: " + str(row.summary)
    return "read by nothing here: " + str(row.summary)


def environment(r: Report) -> Section:
    rows, unset = [], []
    for row in r.environment:
        value = row.value
        if value is None and not row.changed_after_launch:
            unset.append(row.name)
            continue
        shown = "(unset now)" if value is None else repr(value) if value.strip() != value or not value else value
        state = "" if value is None else ("valid" if row.valid else
                                          f"INVALID: {row.problem}" if row.valid is False else "")
        if row.capped_to is not None:
            state += f", capped: {plural(row.capped_to, 'thread')} run"
        if row.changed_after_launch:
            was = "not set at launch" if row.launch_value is None else f"was {row.launch_value!r}"
            state += f"; changed after launch ({was})"
        who = _readers_text(row)
        wrong = (value is not None and row.valid is False) or row.changed_after_launch
        rows.append(Row((f"{row.name}={shown}", state.strip("; "), who), "warning" if wrong else ""))
    notes = []
    if not rows:
        unreadable = (r.process.unreadable or {}).get("environment")
        notes.append(Note(unreadable or "no thread variable is set"))
    if unset:
        notes.append(Note(f"not set: {', '.join(unset)}"))
    return Section("environment", "Thread variables", tuple(rows), notes=tuple(notes))


def threads(r: Report) -> Section:
    t = r.threads
    names = Counter(thread_group(th.name or "?") for th in t.threads)
    listing = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in names.most_common())
    notes: tuple[Note, ...] = ()
    if t.states:
        states = ", ".join(f"{n} {THREAD_STATES.get(s, s)}" for s, n in sorted(t.states.items()))
        notes = (Note(f"now: {states}"),)
    python = Counter(thread_group(th.python_name) for th in t.threads if th.python_name is not None)
    if python:  # a process attached to: the names its Python threads have
        named = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in python.most_common())
        notes += (Note(f"Python threads: {named}"),)
    if t.owners:  # who started them: by name, else by the code their stacks start in
        notes += (Note("by owner: " + ", ".join(f"{owner} {n}" for owner, n in t.owners.items())),)
    return Section("threads", "Live OS threads", (Row((show_value(t.count), listing)),), notes=notes)


def teams(r: Report) -> Section | None:
    """The team each thread gets from each pool whose scope is measured, or None when not gathered."""
    from parinfo.process.thread_teams import LEGEND

    if r.teams is None or not r.teams.columns:
        return None
    head, rows = r.teams.matrix()
    return Section("teams", "Thread teams (threads x pools)", tuple(Row(cells) for cells in rows), columns=head,
                   notes=(Note(LEGEND),))


def live(r: Report) -> Section | None:
    """The live evidence (throttling, pressure, memory, stack budget), or None when not gathered."""
    ev = r.live
    if ev is None:
        return None
    rows: list[tuple[str, str]] = [("throttling", throttling_text(ev.throttling))]
    rows.append(("CPU pressure, machine", pressure_text(ev.pressure.system)))
    rows.append(("CPU pressure, cgroup", pressure_text(ev.pressure.cgroup)))
    mem = ev.memory
    why = mem.unknown.get("limit")
    rows.append(("memory limit", f"{human_bytes(mem.limit)} ({mem.limit_source})" if mem.limit is not None
                 else f"unknown ({why})" if why else "none"))
    for i, text in enumerate(stack_text(ev.stack_budget)):
        rows.append(("thread stacks" if i == 0 else "", text))
    tree = ev.tree
    if tree is not None and tree.runnable is not None:
        wanting = (f"{plural(tree.runnable, 'thread', '.1f')} on average over {tree.seconds:g} s "
                   f"({plural(tree.processes, 'process')}, {plural(tree.threads, 'thread')})")
        rows.append(("wanting a CPU", wanting))
        if tree.processes > 1:
            for m in tree.members:
                rows.append(("", f"pid {m.pid} {m.name}: {plural(m.threads, 'thread')}, {m.running_now} running now"))
    return Section("live", "Live evidence", _pairs(rows))


def outside(r: Report) -> Section:
    """For a process read from outside: which counts could be read, which not, and how to get the rest."""
    p = r.process
    read = [pool for pool in r.pools if pool.num_threads is not None]
    if p.tree_reads is not None:  # a tree read with attach: how each process was read, in the tree's order
        inside = {x.pid for x in p.tree_reads if x.attached}
        notes = [Note(f"in force: {len(read)} of {plural(len(r.pools), 'pool')} (above), {len(inside)} of "
                      f"{plural(len(p.tree_reads), 'process')} read inside", "")]
        notes += [Note(f"pid {x.pid}: read inside ({x.how})" if x.attached else f"pid {x.pid}: read from outside; "
                       f"{x.how}", "" if x.attached else "dim") for x in p.tree_reads]
        if len(inside) < len(p.tree_reads):
            notes.append(Note(str(p.counts)))
        return Section("outside", "Thread counts in force", notes=tuple(notes))
    notes = ([Note(f"read from the process's memory: {len(read)} of {plural(len(r.pools), 'pool')} (above)", "")]
             if read else [])
    notes += [Note(str(p.counts)), Note(str(p.hint))]
    rows = tuple(Row((row.library, show_value(row.count), str(row.source))) for row in r.settings)
    return Section("outside", "Thread counts in force", rows, columns=("who", "count", "decided by") if rows else (),
                   notes=tuple(notes))


def pod(r: Report) -> Section | None:
    """The Kubernetes pod the process runs in, or None outside one."""
    if r.pod is None:
        return None
    from parinfo.diagnostics.pod_section import pod_rows

    return Section("pod", "Kubernetes pod", _pairs(pod_rows(r.pod)),
                   notes=tuple(Note(escape_controls(n), "warning") for n in r.pod.notes))


_OWN: tuple[Callable[[Report], Section | None], ...] = (
    machine, pod, memory, cpu, backend, pools, frameworks, settings, environment, threads, teams, live)
_FROM_OUTSIDE: tuple[Callable[[Report], Section | None], ...] = (
    machine, pod, memory, cpu, pools, outside, environment, threads, live)


def sections(report: Report) -> list[Section]:
    """The report's sections in the order people read them, findings aside."""
    outside = report.process.inspected_from is not None and report.process.attached is None
    parts = _FROM_OUTSIDE if outside else _OWN
    return [s for s in (part(report) for part in parts) if s is not None]


def title(report: Report) -> list[Span]:
    """The report's first line as (text, tone) spans: which process, and what was imported to see it."""
    p = report.process
    if p.attached is not None:  # another process, read from inside
        return [("parinfo", "strong"), (f" report for pid {p.pid} (Python {p.python}), attached: ", ""),
                (p.attached, "dim")]
    if p.inspected_from is not None:  # another process, read from /proc
        cmd = " ".join(p.cmdline or ()) or p.name or "?"
        if len(cmd) > 100:
            cmd = cmd[:97] + "..."
        spans: list[Span] = [("parinfo", "strong"), (f" report for pid {p.pid} ({p.name}), read from outside ", ""),
                             (cmd, "dim")]
        return [*spans, (f" ({p.note})", "warning")] if p.note else spans
    return [("parinfo", "strong"), (f" report for pid {p.pid} (Python {p.python}) ", ""),
            (probes_text(report.probes), "dim")]


def findings_by_severity(findings: list[Finding]) -> list[tuple[Severity, list[Finding]]]:
    """(severity, its findings in report order) for each severity present, worst first."""
    return [(s, group) for s in WORST_FIRST if (group := [f for f in findings if f.severity is s])]
