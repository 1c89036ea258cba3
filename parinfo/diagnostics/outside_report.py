"""The report of another process read from outside: ``parinfo show --pid PID`` (``--children``: its tree).

:func:`read_outside` reads it from /proc, without ptrace: the counts in force that a library keeps
in an exported variable are read from the process's memory; what cannot be known from outside (the
other counts, or what this user may not read) is said so, never guessed. :func:`inspect_pid` hands
what it read to the one assembler (:mod:`parinfo.diagnostics.assemble`).
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from parinfo.diagnostics.model import ProcessTree, Report, TreeMember
from parinfo.diagnostics.parts import ProcessRead

if TYPE_CHECKING:
    from parinfo.diagnostics.assemble import Filled
    from parinfo.diagnostics.model import ProcessInfo
    from parinfo.machine.procfs import Proc
    from parinfo.machine.topology import MachineFacts
    from parinfo.outside.remote import Identity
    from parinfo.process.pools import PoolRow
    from parinfo.process.provenance import SettingRow

__all__ = ["inspect_pid", "pid_is_self", "read_outside"]

#: How long ``show --pid`` watches the threads to tell how many want a CPU (seconds).
SAMPLE_SECONDS = 0.3

COUNTS_UNKNOWN = ("the thread counts in force live inside the process and cannot be read from outside: "
                  "its pools are listed from the files it has loaded, without counts")

def _counts_text(readable: tuple[str, ...]) -> str:
    """What ``process.counts`` says of a process read from outside."""
    who = " and ".join(readable)
    keeps = "keeps its count" if len(readable) == 1 else "keep their counts"
    return (f"{who} {keeps} in an exported variable, read from the process's "
            "memory; other counts live inside the process and cannot be read from outside (their pools show "
            "what the launch environment asked for, or unknown)")


def _tree(members: list[Proc], seconds: float, root: str) -> tuple[ProcessTree, dict[int, list[Any]]]:
    """Threads of every process in ``members``, sampled twice ``seconds`` apart: how many wanted a
    CPU on average (time on a CPU plus time waiting for one, over the interval), and the first
    member's idle threads that spun meanwhile, with its cgroup's throttling over the same window."""
    from parinfo.machine.pressure import cpu_counters
    from parinfo.process.spin import spin_in
    from parinfo.process.tasks import NoAccess, ProcessGone, thread_stats

    def read() -> dict[int, list[Any]]:
        out = {}
        for member in members:
            try:
                out[member.pid or 0] = thread_stats(member)
            except (ProcessGone, NoAccess):  # a child that ended; the root pid is checked by the caller
                pass
        return out

    c0, (t0, first) = cpu_counters(root, members[0]), (time.monotonic(), read())
    time.sleep(seconds)
    t1, second = time.monotonic(), read()
    c1 = cpu_counters(root, members[0])
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
    pid = members[0].pid or 0
    spin = (spin_in(members[0], first[pid], second[pid], dt, (c0, c1))
            if pid in first and pid in second else None)
    return ProcessTree(len(second), sum(len(ts) for ts in second.values()), round(busy / 1e9 / dt, 2),
                       round(dt, 2), procs, spin), second


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


def inspect_pid(proc: Proc, *, children: bool = False, root: str = "/",
                sample_seconds: float = SAMPLE_SECONDS, members: list[Proc] | None = None,
                inside: Mapping[int, list[PoolRow]] | None = None, reads: list[ProcessRead] | None = None) -> Report:
    """The report of process ``proc`` (its handle; with ``children``: of its whole tree), read from
    /proc: :func:`read_outside` and :func:`parinfo.diagnostics.assemble.assemble`.

    A tree read with attach (:func:`parinfo.diagnostics.attached.inspect_tree`) gives its processes
    (``members``: ``proc`` first), the pool rows of those read inside (``inside``, by pid: their
    counts with the sources their own reports give), and how each process was read (``reads``, kept
    as ``process.tree_reads``); the others are read from outside.

    What this user may not read (another user's maps and environment) is "unknown (permission...)"
    in ``process.unreadable``. Raises ProcessGone for a process that exits while it is read (or
    whose pid is given to another), and NotAProcess for a kernel thread or a zombie: one-line
    usage errors.
    """
    from parinfo.diagnostics.assemble import assemble

    filled = read_outside(proc, children=children, root=root, sample_seconds=sample_seconds, members=members,
                          inside=inside, reads=reads)
    return assemble(filled, proc, root)


def read_outside(proc: Proc, *, children: bool = False, root: str = "/",
                 sample_seconds: float = SAMPLE_SECONDS, members: list[Proc] | None = None,
                 inside: Mapping[int, list[PoolRow]] | None = None,
                 reads: list[ProcessRead] | None = None) -> Filled:
    """What can be read of process ``proc`` from outside (see :func:`inspect_pid`): its pools with
    their counts by the one precedence rule (:func:`parinfo.outside.remote.read_counts`), its launch
    environment, its threads sampled twice, the live evidence of its tree."""
    from parinfo.diagnostics.assemble import Filled
    from parinfo.diagnostics.live import live_section
    from parinfo.diagnostics.model import Backend, Frameworks, RuntimeSection
    from parinfo.machine.mempolicy import memory_policy
    from parinfo.machine.topology import machine_facts
    from parinfo.outside import remote
    from parinfo.process import environment as envmod, pools, thread_owners, threads as thr
    from parinfo.process.probing import Probes
    from parinfo.process.tasks import NoAccess, ProcessGone, exited_during_read
    from parinfo.records.unknown import unknown

    pid = proc.pid or 0
    proc.check()
    unreadable: dict[str, str] = {}
    try:
        ident = remote.identity(proc)
        facts = machine_facts(root, proc)
        try:
            env: dict[str, str] | None = remote.environment(proc)
        except NoAccess:
            env, unreadable["environment"] = None, unknown(proc.permission_reason())
        if members is None:
            members = [proc, *(remote.children(proc) if children else [])]
        inside = inside or {}
        settings: list[SettingRow] = []
        if pid in inside:
            runtimes = inside[pid]
        else:
            runtimes, settings = _own_pools(proc, env, facts, unreadable)
        descendants = _descendants_pools(members[1:], root, unreadable, inside) if children else None
        tree, stats = _tree(members, sample_seconds, root)
        if pid not in stats:
            raise exited_during_read(pid)
        live = live_section(proc, root, threads=len(stats[pid]))
        listing = thread_owners.attribute(thr.live_threads(proc), proc, {})
        memory = memory_policy(proc, root)
    except ProcessGone:
        raise exited_during_read(pid) from None
    live.tree = tree
    states: dict[str, int] = {}
    for t in stats[pid]:
        states[t.state] = states.get(t.state, 0) + 1
    listing.states = states
    names = [t.name for t in stats[pid]]
    return Filled(
        machine=facts, process=_process_info(ident, env, names, unreadable, reads),
        probes=Probes(note="read from outside: nothing was imported into the process"),
        runtime=RuntimeSection(unknown=COUNTS_UNKNOWN),
        backend=Backend(None, any(n.startswith("parinfo-") for n in names), pools.threading_layers(runtimes)),
        pools=runtimes, frameworks=Frameworks(), threads=listing, settings=settings,
        environment=[] if env is None else envmod.environment_report(env, env),
        live=live, memory=memory, descendants=descendants)


def _own_pools(proc: Proc, env: dict[str, str] | None, facts: MachineFacts,
               unreadable: dict[str, str]) -> tuple[list[PoolRow], list[SettingRow]]:
    """The pools of ``proc`` read from outside, with their counts in force where they can be read,
    and the rows of the Python-module libraries it loaded (their counts live inside it: what its
    launch environment predicts, said as a prediction); none, and why in ``unreadable``, when this
    user may not read its maps."""
    from parinfo.outside import remote
    from parinfo.process.provenance import predicted_rows
    from parinfo.process.tasks import NoAccess
    from parinfo.records.unknown import unknown

    try:
        maps = remote.maps_text(proc)
        runtimes = remote.loaded_runtimes(proc, maps)
        remote.read_counts(proc, runtimes, maps, env, facts)
    except NoAccess:
        runtimes, unreadable["pools"] = [], unknown(proc.permission_reason())
        return runtimes, []
    libs = remote.imported_libraries(maps)
    why = "inside the process: --attach reads it"
    return runtimes, predicted_rows(libs, env or {}, facts, why) if env is not None else []


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


def _descendants_pools(members: list[Proc], root: str, unreadable: dict[str, str],
                       inside: Mapping[int, list[PoolRow]]) -> list[PoolRow]:
    """The pool rows of each descendant (``members``, their handles), read as the parent's are: from
    its maps, its memory and its launch environment, unless they were read inside it (``inside``,
    by pid). One that ends meanwhile is left out; one this user may not read is named in
    ``unreadable``."""
    from parinfo.machine.topology import machine_facts
    from parinfo.outside import remote
    from parinfo.process.tasks import NoAccess, ProcessGone
    from parinfo.records.unknown import unknown

    out: list[PoolRow] = []
    for member in members:
        child = member.pid or 0
        if child in inside:
            for row in inside[child]:
                row.pid = child
            out += inside[child]
            continue
        try:
            try:
                env: dict[str, str] | None = remote.environment(member)
            except NoAccess:
                env = None
            maps = remote.maps_text(member)
            rows = remote.loaded_runtimes(member, maps)
            remote.read_counts(member, rows, maps, env, machine_facts(root, member))
        except NoAccess:
            unreadable[f"pools of pid {child}"] = unknown(member.permission_reason())
            continue
        except ProcessGone:
            continue
        for row in rows:
            row.pid = child
        out += rows
    return out


def pid_is_self(pid: int | None) -> bool:
    return pid is None or pid == os.getpid()
