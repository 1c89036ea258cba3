"""The live evidence of a report, and the report of another process read from outside.

:func:`live_section` gathers the cgroup's cumulative throttling, CPU pressure, the memory limits
and the thread-stack budget (for this process, or another one); :func:`inspect_pid` builds the
whole report of another process from /proc, without ptrace: the counts in force that a library
keeps in an exported variable are read from the process's memory; what cannot be known from outside
(the other counts, or what this user may not read) is said so, never guessed.
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from parinfo.diagnostics.model import LiveSection, ProcessTree, Report, StackBudget, StackLimit, TreeMember
from parinfo.diagnostics.parts import ProcessRead
from parinfo.records.source import Kind, Source

if TYPE_CHECKING:
    from parinfo.diagnostics.model import ProcessInfo
    from parinfo.machine.memlimit import MemoryFacts
    from parinfo.machine.topology import MachineFacts
    from parinfo.outside.remote import Identity
    from parinfo.process.pools import PoolRow

__all__ = ["inspect_pid", "live_section", "pid_is_self"]

#: How long ``show --pid`` watches the threads to tell how many want a CPU (seconds).
SAMPLE_SECONDS = 0.3

COUNTS_UNKNOWN = ("the thread counts in force live inside the process and cannot be read from outside: "
                  "its pools are listed from the files it has loaded, without counts")

SOFT_LIMIT = Source(Kind.FILE, "getrlimit", "soft limit")
THIS_PROCESS = Source(Kind.FILE, "/proc/PID/task", "this process")


def _counts_text(readable: tuple[str, ...]) -> str:
    """What ``process.counts`` says of a process read from outside."""
    who = " and ".join(readable)
    keeps = "keeps its count" if len(readable) == 1 else "keep their counts"
    return (f"{who} {keeps} in an exported variable, read from the process's "
            "memory; other counts live inside the process and cannot be read from outside (their pools show "
            "what the launch environment asked for, or unknown)")


def _stack_budget(pid: int | None, threads: int | None, memory: MemoryFacts) -> StackBudget:
    from parinfo.outside.remote import limits

    try:
        lim = limits(pid)
    except Exception as exc:  # a process that ends here has no budget to show
        return StackBudget(unknown=str(exc))
    rows = []
    for name, value in (("RLIMIT_DATA", lim.data), ("RLIMIT_AS", lim.address_space)):
        if value is not None and threads is not None:
            rows.append(StackLimit(name, value, threads, SOFT_LIMIT))
    if memory.limit is not None:
        tasks = memory.tasks
        cg_threads = max(tasks, threads or 0) if tasks is not None else threads
        if cg_threads is not None:
            rows.append(StackLimit("the cgroup memory limit", memory.limit, cg_threads, memory.limit_source,
                                   memory.tasks_source if tasks is not None else THIS_PROCESS))
    return StackBudget(lim, lim.thread_stack, rows)


def live_section(pid: int | None = None, root: str = "/", threads: int | None = None) -> LiveSection:
    """Throttling, pressure, memory limit and stack budget of process ``pid`` (default: this one).
    ``threads`` is the number of threads to budget for (default: the process's now)."""
    from parinfo.machine.memlimit import memory_facts
    from parinfo.machine.pressure import cpu_counters, cpu_pressure

    if threads is None:
        from parinfo.process.threads import live_threads

        count = live_threads(pid).count
        threads = count if isinstance(count, int) else None
    memory = memory_facts(root, pid)
    return LiveSection(cpu_counters(root, pid), cpu_pressure(root, pid), memory, _stack_budget(pid, threads, memory))


def _tree(pids: list[int], seconds: float) -> tuple[ProcessTree, dict[int, list[Any]]]:
    """Threads of every process in ``pids``, sampled twice ``seconds`` apart: how many wanted a CPU
    on average (time on a CPU plus time waiting for one, over the interval)."""
    from parinfo.process.tasks import NoAccess, ProcessGone, thread_stats

    def read() -> dict[int, list[Any]]:
        out = {}
        for p in pids:
            try:
                out[p] = thread_stats(p)
            except (ProcessGone, NoAccess):  # a child that ended; the root pid is checked by the caller
                pass
        return out

    t0, first = time.monotonic(), read()
    time.sleep(seconds)
    t1, second = time.monotonic(), read()
    before = {(p, t.tid): t for p, ts in first.items() for t in ts}
    busy = 0
    for p, ts in second.items():
        for t in ts:
            prev = before.get((p, t.tid))
            if prev is not None:
                busy += (t.cpu_ns - prev.cpu_ns) + ((t.wait_ns or 0) - (prev.wait_ns or 0))
    dt = max(t1 - t0, 1e-6)
    procs = [TreeMember(p, ts[0].name if ts else "?", len(ts), sum(t.state == "R" for t in ts))
             for p, ts in second.items()]
    return ProcessTree(len(second), sum(len(ts) for ts in second.values()), round(busy / 1e9 / dt, 2),
                       round(dt, 2), procs), second


def _hint(env: dict[str, str], names: list[str]) -> str:
    from parinfo.process import libraries as reg

    profile = env.get(reg.role_var("profile"))
    if profile:
        return (f"launched by parinfo apply (profile {profile}): the counts it set are in its launch "
                f"environment below; for the counts in force, call parinfo.inspect() inside it")
    if any(n.startswith("parinfo-") for n in names):
        return ("it runs parinfo's pools: call parinfo.inspect() (or parinfo.parallel_info()) inside it "
                "for the full report")
    return "for the full report, run parinfo show (or parinfo.inspect()) inside the process"


def inspect_pid(pid: int, *, children: bool = False, root: str = "/",
                sample_seconds: float = SAMPLE_SECONDS, members: list[int] | None = None,
                inside: Mapping[int, list[PoolRow]] | None = None, reads: list[ProcessRead] | None = None) -> Report:
    """The report of process ``pid`` (with ``children``: of its whole tree), read from /proc.

    A tree read with attach (:func:`parinfo.diagnostics.attached.inspect_tree`) gives its processes
    (``members``: ``pid`` first), the pool rows of those read inside (``inside``, by pid: their
    counts with the sources their own reports give), and how each process was read (``reads``, kept
    as ``process.tree_reads``); the others are read from outside.

    What this user may not read (another user's maps and environment) is "unknown (permission...)"
    in ``process.unreadable``. Raises ProcessGone for a pid that names no process or that exits
    while it is read, and NotAProcess for a kernel thread or a zombie: one-line usage errors.
    """
    from parinfo.diagnostics.model import Backend, Frameworks, RuntimeSection
    from parinfo.diagnostics.process_rules import diagnose
    from parinfo.machine.cpuid import cpu_identity
    from parinfo.machine.mempolicy import memory_policy
    from parinfo.machine.procfs import Proc
    from parinfo.machine.topology import machine_facts
    from parinfo.outside import remote
    from parinfo.process import environment as envmod, pools, threads as thr
    from parinfo.process.probing import Probes
    from parinfo.process.tasks import NoAccess, ProcessGone, exited_during_read
    from parinfo.records.unknown import unknown

    remote.check_pid(pid)
    unreadable: dict[str, str] = {}
    try:
        ident = remote.identity(pid)
        facts = machine_facts(root, pid)
        try:
            env: dict[str, str] | None = remote.environment(pid)
        except NoAccess:
            env, unreadable["environment"] = None, unknown(Proc(pid).permission_reason())
        if members is None:
            members = [pid, *(remote.children(pid) if children else [])]
        inside = inside or {}
        runtimes = inside[pid] if pid in inside else _own_pools(pid, env, facts, unreadable)
        descendants = _descendants_pools(members[1:], root, unreadable, inside) if children else []
        tree, stats = _tree(members, sample_seconds)
        if pid not in stats:
            raise exited_during_read(pid)
        live = live_section(pid, root, threads=len(stats[pid]))
        listing = thr.live_threads(pid)
        memory = memory_policy(pid, root)
    except ProcessGone:
        raise exited_during_read(pid) from None
    live.tree = tree
    states: dict[str, int] = {}
    for t in stats[pid]:
        states[t.state] = states.get(t.state, 0) + 1
    listing.states = states
    names = [t.name for t in stats[pid]]
    process = _process_info(ident, env, names, unreadable, reads)
    report = Report(
        machine=facts,
        process=process,
        probes=Probes(note="read from outside: nothing was imported into the process"),
        cpu=cpu_identity(root),
        runtime=RuntimeSection(unknown=COUNTS_UNKNOWN),
        backend=Backend(None, any(n.startswith("parinfo-") for n in names),
                        pools.threading_layers(runtimes)),
        pools=runtimes,
        frameworks=Frameworks(),
        environment=[] if env is None else envmod.environment_report(env, env),
        threads=listing,
        live=live,
        memory=memory,
    )
    report.findings = diagnose(report)  # the process's own pools: a rule over pools is per process
    if children:
        for row in report.pools:
            row.pid = pid
        report.pools += descendants
    return report


def _own_pools(pid: int, env: dict[str, str] | None, facts: MachineFacts,
               unreadable: dict[str, str]) -> list[PoolRow]:
    """The pools of ``pid`` read from outside, with their counts in force where they can be read;
    none, and why in ``unreadable``, when this user may not read its maps."""
    from parinfo.machine.procfs import Proc
    from parinfo.outside import remote
    from parinfo.process.tasks import NoAccess
    from parinfo.records.unknown import unknown

    try:
        maps = remote.maps_text(pid)
        runtimes = remote.loaded_runtimes(pid, maps)
        remote.read_counts(pid, runtimes, maps, env, facts)
    except NoAccess:
        runtimes, unreadable["pools"] = [], unknown(Proc(pid).permission_reason())
    return runtimes


def _process_info(ident: Identity, env: dict[str, str] | None, names: list[str], unreadable: dict[str, str],
                  reads: list[ProcessRead] | None) -> ProcessInfo:
    """The ``process`` section of a process read from outside: who it is, the hint for a full
    report, which counts can be read from outside, what could not be read, and how a tree was read."""
    from parinfo.diagnostics.model import ProcessInfo
    from parinfo.process import libraries as reg

    process = ProcessInfo(pid=ident.pid, name=ident.name, ppid=ident.ppid, cmdline=ident.cmdline,
                          python=ident.python, executable=ident.executable, inspected_from=ident.inspected_from,
                          note=ident.note)
    readable = tuple(r.label for r in reg.records() if r.count_symbol is not None)
    process.hint, process.counts = _hint(env or {}, names), _counts_text(readable)
    process.unreadable = unreadable or None
    process.tree_reads = None if reads is None else list(reads)
    return process


def _descendants_pools(pids: list[int], root: str, unreadable: dict[str, str],
                       inside: Mapping[int, list[PoolRow]]) -> list[PoolRow]:
    """The pool rows of each descendant (``pid`` set), read as the parent's are: from its maps, its
    memory and its launch environment, unless they were read inside it (``inside``, by pid). One
    that ends meanwhile is left out; one this user may not read is named in ``unreadable``."""
    from parinfo.machine.procfs import Proc
    from parinfo.machine.topology import machine_facts
    from parinfo.outside import remote
    from parinfo.process.tasks import NoAccess, ProcessGone
    from parinfo.records.unknown import unknown

    out: list[PoolRow] = []
    for child in pids:
        if child in inside:
            for row in inside[child]:
                row.pid = child
            out += inside[child]
            continue
        try:
            try:
                env: dict[str, str] | None = remote.environment(child)
            except NoAccess:
                env = None
            maps = remote.maps_text(child)
            rows = remote.loaded_runtimes(child, maps)
            remote.read_counts(child, rows, maps, env, machine_facts(root, child))
        except NoAccess:
            unreadable[f"pools of pid {child}"] = unknown(Proc(child).permission_reason())
            continue
        except ProcessGone:
            continue
        for row in rows:
            row.pid = child
        out += rows
    return out


def pid_is_self(pid: int | None) -> bool:
    return pid is None or pid == os.getpid()
