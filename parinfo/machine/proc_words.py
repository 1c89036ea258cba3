"""What a process's /proc files say, as parinfo's own words: the errors a read ends in
(:class:`ProcessGone`, :class:`NoAccess`, :class:`NotAProcess`) and a refusal's reason
(:class:`Denied`), a stat line (:class:`Stat`, :func:`parse_stat`) and an environment block
(:func:`parse_environ`). Parsing only: :mod:`parinfo.machine.procfs` reads the files.
"""
from __future__ import annotations

from parinfo.errors import UsageError
from parinfo.records.record import record

#: The task flag of a kernel thread (include/linux/sched.h).
PF_KTHREAD = 0x00200000
#: Why another user's process cannot be read.
PERMISSION = "permission: run as the process's user or root"


class Denied(str):
    """A reason that is a refusal by the kernel's permission rules (the words say which rule):
    callers tell it from other reasons by its type, never by its words."""

    __slots__ = ()


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
    return NotAProcess(f"pid {pid} is a kernel thread ({_shown(name)}): it has no user-space pools")


def zombie(pid: int, name: str, ppid: int, parent: str | None) -> NotAProcess:
    return NotAProcess(f"pid {pid} ({_shown(name)}) is a zombie: it has exited and its parent, pid {ppid}"
                       f"{f' ({_shown(parent)})' if parent else ''}, has not collected it yet; it has no "
                       f"threads or pools left")


def no_access(pid: int, what: str, exc: OSError) -> NoAccess:
    return NoAccess(f"cannot read {what} of pid {pid}: {exc.strerror or exc} (run parinfo as the "
                    f"process's user or as root)")


def _shown(text: str) -> str:
    from parinfo.safe_text import escape_controls

    return escape_controls(text)


@record(frozen=True)
class Stat:
    """One task's /proc stat line. ``name`` is decoded with surrogateescape (exact bytes kept);
    escape it where it is shown."""

    pid: int
    name: str
    state: str  # R running or runnable, S sleeping, D uninterruptible, T stopped, Z zombie, X dead
    ppid: int
    flags: int
    ticks: int  # utime + stime, in clock ticks
    start: int  # start time after boot, in clock ticks: with the pid, the process's identity
    cpu: int | None  # the CPU it last ran on
    pgrp: int = 0  # its process group: a worker keeps its starter's group when it is orphaned

    @property
    def kernel_thread(self) -> bool:
        return bool(self.flags & PF_KTHREAD) or self.pid == 2

    @property
    def dead(self) -> bool:
        return self.state in ("Z", "X")


def parse_stat(data: bytes, pid: int = 0) -> Stat:
    """The fields of a /proc stat line. The name sits between the first '(' and the last ')': it may
    itself hold spaces and parentheses. ValueError when the line is not one."""
    try:
        close = data.rindex(b")")
        rest = data[close + 2:].split()
        return Stat(pid or int(data[:data.index(b" ")]), data[data.index(b"(") + 1:close].decode(
            "utf-8", "surrogateescape"), rest[0].decode("ascii"), int(rest[1]), int(rest[6]),
            int(rest[11]) + int(rest[12]), int(rest[19]), int(rest[36]) if len(rest) > 36 else None,
            int(rest[2]))
    except (IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a stat line: {exc}") from None


def parse_environ(raw: bytes) -> dict[str, str]:
    """An environment block (NUL-separated NAME=value) as a dict; the first of a repeated name wins."""
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            env.setdefault(name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
    return env
