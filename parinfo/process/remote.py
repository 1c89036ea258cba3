"""Facts about another process, read from /proc without ptrace (same user, or root).

What can be known from outside: the runtimes it has loaded (``/proc/PID/maps``), the environment it
was launched with (``/proc/PID/environ``), its command line, resource limits and children, and the
count in force of a library that keeps it in an exported variable (read from its memory by
:mod:`parinfo.process.inforce`). The other counts live inside the process: a pool row shows the
count its launch environment asked for, marked as such, or says why it is unknown; never a guess.

Edges: a kernel thread and a zombie are named as such (:func:`check_pid`); another user's process
gives what /proc lets this user read, and "unknown (permission...)" for the rest.
"""
from __future__ import annotations

import os
import types
from dataclasses import asdict
from typing import TYPE_CHECKING

from parinfo.record import record

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

# glibc's default thread stack when RLIMIT_STACK is unlimited (x86-64 and most 64-bit targets).
GLIBC_UNLIMITED_STACK = 2 << 20



def _tasks() -> types.ModuleType:
    """parinfo.process.tasks, loaded only to raise its errors: ``parinfo show`` never needs it."""
    from parinfo.process import tasks

    return tasks


def _read(pid: int, name: str, limit: int = 1 << 24) -> bytes:
    """The bytes of /proc/PID/name; ProcessGone or NoAccess (one line) when they cannot be read."""
    from parinfo.machine.sysfs import read_bytes

    try:
        return read_bytes(f"/proc/{pid}/{name}", limit)
    except (FileNotFoundError, ProcessLookupError):
        raise _tasks().gone(pid) from None
    except OSError as exc:
        raise _tasks().no_access(pid, f"/proc/{pid}/{name}", exc) from None


# PF_KTHREAD in the flags field of /proc/PID/stat: the task is a kernel thread.
_PF_KTHREAD = 0x00200000


def _name_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm", "rb") as fh:
            return fh.read().decode("utf-8", "replace").rstrip("\n")
    except OSError:
        return None


def check_pid(pid: int) -> None:
    """Raise a one-line usage error when ``pid`` names nothing parinfo can report on: ProcessGone
    when no process has it, NotAProcess for a kernel thread (no user-space pools) or a zombie (it
    has exited; its parent has not collected it yet)."""
    if pid <= 0 or not os.path.isdir(f"/proc/{pid}"):
        raise _tasks().gone(pid)
    from parinfo.process.tasks import parse_stat

    try:
        stat = _read(pid, "stat").decode("utf-8", "replace")
        name, state, _, _ = parse_stat(stat)
        rest = stat.rsplit(")", 1)[1].split()
        ppid, flags = int(rest[1]), int(rest[6])
    except (ValueError, IndexError):
        return
    if flags & _PF_KTHREAD:
        raise _tasks().kernel_thread(pid, name)
    if state in ("Z", "X"):
        raise _tasks().zombie(pid, name, ppid, _name_of(ppid))


def identity(pid: int) -> dict:
    """pid, name, command line, executable and parent of ``pid`` (the report's process section)."""
    from parinfo.process.tasks import parse_stat

    stat = _read(pid, "stat").decode("utf-8", "replace")
    name, _, _, _ = parse_stat(stat)
    stat_rest = stat.rsplit(")", 1)[1].split()
    cmdline = [a.decode("utf-8", "replace") for a in _read(pid, "cmdline").split(b"\0") if a]
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError as exc:
        exe = f"unknown (cannot read /proc/{pid}/exe: {exc.strerror or exc})"
    base = os.path.basename(cmdline[0]) if cmdline else name
    python = "unknown (read from outside; the interpreter is not asked)"
    if not (base.startswith("python") or name.startswith("python") or "python" in os.path.basename(exe)):
        python = "unknown (not a Python interpreter, or one renamed)"
    return {"pid": pid, "name": name, "ppid": int(stat_rest[1]), "cmdline": cmdline, "executable": exe,
            "python": python, "inspected_from": os.getpid()}


def maps_text(pid: int) -> str:
    """/proc/PID/maps (ProcessGone or NoAccess when it cannot be read)."""
    return _read(pid, "maps").decode("utf-8", "surrogateescape")


def loaded_runtimes(pid: int, maps: str | None = None) -> list[dict]:
    """One row per thread runtime file mapped into ``pid`` (the keys of the report's pool rows;
    ``num_threads`` is None until :func:`read_counts` fills what can be read). ``maps`` is its
    /proc/PID/maps when the caller has read it."""
    from parinfo.process.pools import PoolRow, classify, loaded_objects, mark_duplicates

    rows: list[dict] = []
    for path in loaded_objects(maps_text(pid) if maps is None else maps):
        family = classify(path)
        if family is not None:
            rows.append(PoolRow.of_file(path, family, seen_by=f"/proc/{pid}/maps", note=None).to_dict())
    mark_duplicates(rows)
    return rows


#: The source of a count taken from the environment the process was launched with.
FROM_LAUNCH = "from its launch environment; the process may have changed it"


def read_counts(pid: int, rows: list[dict], maps: str, launch_env: dict[str, str] | None,
                facts: MachineFacts) -> None:
    """Fill the count of each pool row of ``pid`` (from :func:`loaded_runtimes`), in place:

    - ``num_threads``: the count in force, read from the process's memory where the library keeps
      it in an exported variable (``count_source`` then says "in force (...)");
    - else ``launch_count``: the count the launch environment asked for (``launch_from`` names the
      variable; ``count_source`` is :data:`FROM_LAUNCH`): the process may have changed it since, so
      it is never shown as in force;
    - else ``count_source`` says "unknown (why)".

    ``launch_env`` is None when the environment could not be read. Raises ProcessGone when the
    process ends during the read.
    """
    from parinfo.process import libraries as reg
    from parinfo.process.inforce import counts_in_force, reason, unknown
    from parinfo.process.provenance import model_of, predict

    read = {row.mapped_as: row for row in counts_in_force(pid, maps)}
    for row in rows:
        got = read.get(row.get("filepath") or "")
        if got is not None and got.count is not None:
            row.update(num_threads=got.count, count_source=got.source)
            continue
        why = reason(got.source) if got is not None else "kept inside the process: not readable from outside"
        rec = reg.find(row["library"])
        names = rec.count_vars if rec is not None else ()
        if launch_env is None:
            row["count_source"] = unknown(f"{why}; its launch environment cannot be read either")
            continue
        guess = predict(model_of(rec), launch_env, facts) if rec is not None and names else None
        if guess is not None and guess.kind == "env" and guess.count is not None:
            row.update(launch_count=guess.count, launch_from=guess.phrase, count_source=FROM_LAUNCH)
        elif names:
            row["count_source"] = unknown(f"{why}; none of {', '.join(names)} was set at launch")
        else:
            row["count_source"] = unknown(why)


def environment(pid: int) -> dict[str, str]:
    """The environment ``pid`` was launched with (its later edits are not visible from outside)."""
    env: dict[str, str] = {}
    for item in _read(pid, "environ").decode("utf-8", "surrogateescape").split("\0"):
        name, sep, value = item.partition("=")
        if sep and name:
            env.setdefault(name, value)
    return env


@record(frozen=True)
class Limits:
    """The soft resource limits that bound thread stacks, in bytes (None: unlimited)."""

    stack: int | None
    data: int | None
    address_space: int | None

    @property
    def thread_stack(self) -> int:
        """The stack glibc gives a new thread: RLIMIT_STACK, or 2 MiB when that is unlimited."""
        return self.stack if self.stack else GLIBC_UNLIMITED_STACK

    def to_dict(self) -> dict:
        return {**asdict(self), "thread_stack": self.thread_stack}


def parse_limits(text: str) -> Limits:
    """Parse /proc/PID/limits (a table: name, soft, hard, unit)."""
    found: dict[str, int | None] = {}
    for line in text.splitlines():
        for key, label in (("stack", "Max stack size"), ("data", "Max data size"),
                           ("address_space", "Max address space")):
            if line.startswith(label):
                soft = line[len(label):].split()[0]
                found[key] = None if soft == "unlimited" else int(soft)
    return Limits(found.get("stack"), found.get("data"), found.get("address_space"))


def limits(pid: int | None = None) -> Limits:
    """The soft limits of ``pid`` (default: this process)."""
    if pid is None:
        import resource

        def soft(which: int) -> int | None:
            value = resource.getrlimit(which)[0]
            return None if value == resource.RLIM_INFINITY else value

        return Limits(soft(resource.RLIMIT_STACK), soft(resource.RLIMIT_DATA), soft(resource.RLIMIT_AS))
    return parse_limits(_read(pid, "limits").decode("utf-8", "replace"))


def children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (children, their children...), found by the parent field of each
    process's stat; processes that end meanwhile are skipped."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                rest = fh.read().rsplit(b")", 1)[1].split()
            parents.setdefault(int(rest[1]), []).append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in sorted(parents.get(todo.pop(0), ())):
            if child not in out and child != pid:
                out.append(child)
                todo.append(child)
    return out
