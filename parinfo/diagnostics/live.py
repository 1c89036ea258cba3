"""The live evidence of a report: the cgroup's cumulative throttling, CPU pressure, the memory
limits and the thread-stack budget of a process (this one, or another one through its handle).

:func:`live_section` gathers them for the one assembler (:mod:`parinfo.diagnostics.assemble`),
whoever read the rest of the report.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from parinfo.diagnostics.model import LiveSection, StackBudget, StackLimit
from parinfo.records.source import Kind, Source

if TYPE_CHECKING:
    from parinfo.machine.memlimit import MemoryFacts
    from parinfo.machine.procfs import Proc

__all__ = ["live_section"]

SOFT_LIMIT = Source(Kind.FILE, "getrlimit", "soft limit")
THIS_PROCESS = Source(Kind.FILE, "/proc/PID/task", "this process")


def _stack_budget(proc: Proc | None, threads: int | None, memory: MemoryFacts) -> StackBudget:
    from parinfo.outside.remote import limits

    try:
        lim = limits(proc)
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


def live_section(proc: Proc | None = None, root: str = "/", threads: int | None = None) -> LiveSection:
    """Throttling, pressure, memory limit and stack budget of process ``proc`` (default: this one).
    ``threads`` is the number of threads to budget for (default: the process's now)."""
    from parinfo.machine.memlimit import memory_facts
    from parinfo.machine.pressure import cpu_counters, cpu_pressure

    if threads is None:
        from parinfo.process.threads import live_threads

        count = live_threads(proc).count
        threads = count if isinstance(count, int) else None
    memory = memory_facts(root, proc)
    return LiveSection(cpu_counters(root, proc), cpu_pressure(root, proc), memory,
                       _stack_budget(proc, threads, memory))
