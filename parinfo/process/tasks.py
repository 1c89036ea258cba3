"""Per-thread scheduler facts of any process, read from /proc without ptrace.

For each thread: its name and state (``/proc/PID/task/TID/stat``), CPU time and run-queue wait
(``schedstat``: nanoseconds on a CPU, nanoseconds runnable but waiting), and involuntary context
switches (``status``: the times the scheduler took the CPU away). These files are readable for
any process the caller can see, so watching another user's process needs no privilege.

A process that does not exist (or exits while it is read) raises :class:`ProcessGone`; one whose
threads cannot be listed raises :class:`NoAccess`. Both are one-line usage errors (exit 2).
"""
from __future__ import annotations

import os
import re

from parinfo.machine.procfs import (
    NoAccess,
    NotAProcess,
    Proc,
    ProcessGone,
    exited_during_read,
    gone,
    kernel_thread,
    no_access,
    parse_stat as _parse_stat,
    zombie,
)
from parinfo.records.record import record

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


__all__ = ["CLOCK_TICKS", "NoAccess", "NotAProcess", "ProcessGone", "ThreadStat", "exited_during_read", "gone",
           "kernel_thread", "no_access", "parse_stat", "run_delay_ns", "thread_stats", "zombie"]


@record(frozen=True)
class ThreadStat:
    """One thread at one instant. Times are cumulative since the thread started."""

    tid: int
    name: str
    state: str  # R running or runnable, S sleeping, D uninterruptible, T stopped, Z zombie...
    cpu_ns: int  # time on a CPU (schedstat; else utime+stime in clock ticks, as ns)
    wait_ns: int | None  # time runnable but waiting for a CPU (None: the kernel keeps no schedstat)
    involuntary: int | None  # context switches the scheduler forced (None: unreadable)
    cpu: int | None  # the CPU it last ran on


def parse_stat(text: str) -> tuple[str, str, int, int | None]:
    """(name, state, utime+stime in ticks, last CPU) from a /proc stat line (the front's parser)."""
    st = _parse_stat(text.encode("utf-8", "surrogateescape"))
    return st.name, st.state, st.ticks, st.cpu


_NONVOLUNTARY = re.compile(rb"^nonvoluntary_ctxt_switches:\s*(\d+)", re.MULTILINE)


def _thread(proc: Proc, tid: int) -> ThreadStat | None:
    """One thread's facts; None when it ended while being read."""
    st = proc.thread_stat(tid)
    if st is None:
        return None  # ended, or being torn down (an empty or partial file)
    cpu_ns, wait_ns = st.ticks * (1_000_000_000 // CLOCK_TICKS), None
    sched = proc.thread_file(tid, "schedstat", 256)
    if sched is not None:
        try:
            parts = sched.split()
            cpu_ns, wait_ns = int(parts[0]), int(parts[1])
        except (ValueError, IndexError):
            pass
    status = proc.thread_file(tid, "status")
    m = None if status is None else _NONVOLUNTARY.search(status)
    return ThreadStat(tid, st.name, st.state, cpu_ns, wait_ns, int(m.group(1)) if m else None, st.cpu)


def thread_stats(proc: Proc) -> list[ThreadStat]:
    """The threads of process ``proc`` now, sorted by thread id. Raises ProcessGone or NoAccess."""
    out = [t for t in (_thread(proc, tid) for tid in proc.thread_ids()) if t is not None]
    if all(t.state in ("Z", "X") for t in out):
        raise gone(proc.pid or 0)  # every thread ended (or is a zombie waiting for its parent): the process is gone
    return out



def run_delay_ns(proc: Proc) -> int | None:
    """The run-queue wait of all of ``proc``'s threads now (schedstat's second field, summed:
    nanoseconds runnable but not on a CPU, held back by a quota included); None when the threads
    cannot be listed or the kernel keeps no schedstat. A scan over every process reads this only."""
    try:
        tids = proc.thread_ids()
    except (ProcessGone, NoAccess, NotAProcess):
        return None
    total, read = 0, False
    for tid in tids:
        sched = proc.thread_file(tid, "schedstat", 256)
        try:
            total += int(sched.split()[1]) if sched is not None else 0
            read = read or sched is not None
        except (ValueError, IndexError):
            continue
    return total if read else None
