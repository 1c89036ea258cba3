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
from dataclasses import asdict

from parinfo.errors import UsageError
from parinfo.machine.sysfs import read_bytes
from parinfo.record import record

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ProcessGone(UsageError):
    """The process does not exist, or no longer does."""


class NoAccess(UsageError):
    """The process exists but its files cannot be read by this user."""


class NotAProcess(UsageError):
    """The pid names a task with nothing to report on: a kernel thread, or a zombie."""


def gone(pid: int) -> ProcessGone:
    return ProcessGone(f"no process with pid {pid} (it has exited, or never existed: check the pid with ps)")


def exited_during_read(pid: int) -> ProcessGone:
    return ProcessGone(f"pid {pid} exited while parinfo was reading it: nothing left to report")


def kernel_thread(pid: int, name: str) -> NotAProcess:
    return NotAProcess(f"pid {pid} is a kernel thread ({name}): it has no user-space pools")


def zombie(pid: int, name: str, ppid: int, parent: str | None) -> NotAProcess:
    return NotAProcess(f"pid {pid} ({name}) is a zombie: it has exited and its parent, pid {ppid}"
                       f"{f' ({parent})' if parent else ''}, has not collected it yet; it has no threads "
                       f"or pools left")


def no_access(pid: int, what: str, exc: OSError) -> NoAccess:
    return NoAccess(f"cannot read {what} of pid {pid}: {exc.strerror or exc} (run parinfo as the "
                    f"process's user or as root)")


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

    def to_dict(self) -> dict:
        return asdict(self)


def parse_stat(text: str) -> tuple[str, str, int, int | None]:
    """(name, state, utime+stime in ticks, last CPU) from a /proc stat line. The name sits between
    the first '(' and the last ')' because it may itself hold spaces and parentheses."""
    open_, close = text.index("("), text.rindex(")")
    name = text[open_ + 1:close]
    rest = text[close + 2:].split()
    cpu = int(rest[36]) if len(rest) > 36 else None
    return name, rest[0], int(rest[11]) + int(rest[12]), cpu


_NONVOLUNTARY = re.compile(rb"^nonvoluntary_ctxt_switches:\s*(\d+)", re.MULTILINE)


def _thread(task_dir: str, tid: int) -> ThreadStat | None:
    """One thread's facts; None when it ended while being read."""
    base = f"{task_dir}/{tid}"
    try:
        name, state, ticks, cpu = parse_stat(read_bytes(f"{base}/stat").decode("utf-8", "replace"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    except (OSError, ValueError, IndexError):
        return None  # a thread that is being torn down can give an empty or partial file
    cpu_ns, wait_ns = ticks * (1_000_000_000 // CLOCK_TICKS), None
    try:
        parts = read_bytes(f"{base}/schedstat").split()
        cpu_ns, wait_ns = int(parts[0]), int(parts[1])
    except (OSError, ValueError, IndexError):
        pass
    involuntary = None
    try:
        m = _NONVOLUNTARY.search(read_bytes(f"{base}/status"))
        involuntary = int(m.group(1)) if m else None
    except OSError:
        pass
    return ThreadStat(tid, name, state, cpu_ns, wait_ns, involuntary, cpu)


def thread_stats(pid: int) -> list[ThreadStat]:
    """The threads of process ``pid`` now, sorted by thread id. Raises ProcessGone or NoAccess."""
    task_dir = f"/proc/{int(pid)}/task"
    try:
        tids = sorted(int(t) for t in os.listdir(task_dir) if t.isdigit())
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        raise gone(pid) from None
    except OSError as exc:
        raise no_access(pid, "the threads", exc) from None
    out = [t for t in (_thread(task_dir, tid) for tid in tids) if t is not None]
    if all(t.state in ("Z", "X") for t in out):
        raise gone(pid)  # every thread ended (or is a zombie waiting for its parent): the process is gone
    return out


_NUMBERED = re.compile(r"(?:[-_.:/# ]+\d+)+$")


def thread_group(name: str) -> str:
    """The pool a thread name belongs to: the name without a trailing worker number
    ("parinfo-intraop-3" -> "parinfo-intraop", "pool-12" -> "pool"); names that are only a number
    stay as they are."""
    stripped = _NUMBERED.sub("", name)
    return stripped or name
