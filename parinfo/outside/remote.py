"""Facts about another process, read from /proc without ptrace (same user, or root).

What can be known from outside: the runtimes it has loaded (``/proc/PID/maps``), the environment it
was launched with (``/proc/PID/environ``), its command line, resource limits and children, and the
count in force of a library that keeps it in an exported variable (read from its memory by
:mod:`parinfo.outside.inforce`). The other counts live inside the process: a pool row shows the
count its launch environment asked for, marked as such, or says why it is unknown; never a guess.

Edges: a kernel thread and a zombie are named as such (:func:`open_process`); another user's process
gives what /proc lets this user read, and "unknown (permission...)" for the rest.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from parinfo.errors import UsageError
from parinfo.machine.procfs import Proc, gone, pids, this_or
from parinfo.records.record import record
from parinfo.records.source import Kind, Source, unknown

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts
    from parinfo.process.library_base import Library
    from parinfo.process.pools import PoolRow

# glibc's default thread stack when RLIMIT_STACK is unlimited (x86-64 and most 64-bit targets).
GLIBC_UNLIMITED_STACK = 2 << 20


def open_process(pid: int) -> Proc:
    """The handle of process ``pid``, made once at the door and carried by every reader of the
    report: its first stat fixes the identity (pid and start time) the report is about.

    Raises a one-line usage error when ``pid`` names nothing parinfo can report on: ProcessGone
    when no process has it, NotAProcess for a kernel thread (no user-space pools) or a zombie (it
    has exited; its parent has not collected it yet). A process whose main thread exited while
    other threads run on is a process, read through those threads from here on."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise gone(pid)
    proc = Proc.of(pid)
    proc.check()
    return proc


@record(frozen=True)
class Identity:
    """Who a process read from outside is: pid, name, parent, command line, executable, what can be
    said of its interpreter (``python``), the pid that read it, and what is odd about it (``note``)."""

    pid: int
    name: str
    ppid: int
    cmdline: list[str]
    executable: str
    python: str
    inspected_from: int
    note: str | None = None


def identity(proc: Proc) -> Identity:
    """pid, name, command line, executable and parent of ``proc`` (the report's process section)."""
    st = proc.stat()
    cmdline = proc.cmdline()
    exe = str(proc.exe())
    base = os.path.basename(cmdline[0]) if cmdline else st.name
    python = "unknown (read from outside; the interpreter is not asked)"
    if not (base.startswith("python") or st.name.startswith("python") or "python" in os.path.basename(exe)):
        python = "unknown (not a Python interpreter, or one renamed)"
    note = "its main thread has exited; its other threads run on and are read here" if proc.leader_exited else None
    return Identity(st.pid, st.name, st.ppid, cmdline, exe, python, os.getpid(), note)


def maps_text(proc: Proc) -> str:
    """/proc/PID/maps (ProcessGone or NoAccess when it cannot be read)."""
    return proc.maps().decode("utf-8", "surrogateescape")


def loaded_runtimes(proc: Proc, maps: str | None = None) -> list[PoolRow]:
    """One pool row per thread runtime file mapped into ``proc`` (``num_threads`` is None until
    :func:`read_counts` fills what can be read). ``maps`` is its
    /proc/PID/maps when the caller has read it."""
    from parinfo.process.pools import runtimes_in_maps

    text = maps_text(proc) if maps is None else maps
    rows = runtimes_in_maps(text.encode("utf-8", "surrogateescape"), proc.shown("maps"))
    for row in rows:
        row.version = row.version or file_version(proc, row)
    return rows


def file_version(proc: Proc, row: PoolRow) -> str | None:
    """The version ``row``'s file states in its bytes (OpenBLAS: the text its config call returns),
    read through the process's own root (/proc/PID/root), so a file of another mount namespace is
    its own, not one of this path here; None where it cannot be read."""
    from parinfo.process.file_version import version_in_file

    if not row.filepath or row.note or proc.pid is None:  # a noted row: the file was deleted or replaced
        return None
    return version_in_file(os.path.join(proc.root, "proc", str(proc.pid), "root") + row.filepath, row.library)

def imported_libraries(maps: str) -> list[Library]:
    """The registry's Python-module libraries whose compiled files ``maps`` (a /proc/PID/maps) shows
    mapped: the modules the process imported, seen from outside. Libraries whose count is another
    runtime's (XGBoost's, its OpenMP runtime's) are that runtime's pool row."""
    from parinfo.process import libraries as reg
    from parinfo.process.stack_words import owner_of_file, parse_maps

    paths = {r.path for r in parse_maps(maps.encode("utf-8", "surrogateescape"))
             if r.executable and ("site-packages/" in r.path or "dist-packages/" in r.path)}
    owners = {owner_of_file(path) for path in paths}
    return [lib for lib in reg.python_libraries() if lib.name in owners and lib.follows is None]


#: The source of a count taken from the environment the process was launched with.
FROM_LAUNCH = Source(Kind.LAUNCH_ENVIRONMENT, "", "from its launch environment; the process may have changed it")


def read_counts(proc: Proc, rows: list[PoolRow], maps: str, launch_env: dict[str, str] | None,
                facts: MachineFacts) -> None:
    """Fill the count of each pool row of ``proc`` (from :func:`loaded_runtimes`), in place, by the
    one precedence rule (:func:`parinfo.outside.standing.decide`):

    - ``num_threads``: the count in force, read from the process's memory where the library keeps
      it in an exported variable (``count_source`` then says "in force (...)");
    - else ``launch_count``: the count a variable of the launch environment asked for (``launch_from``
      names it; ``count_source`` is :data:`FROM_LAUNCH`): the process may have changed it since, so
      it is never shown as in force;
    - else ``count_source`` says "unknown (why)": a library default predicted from outside is not a
      count anybody asked for, and this report names the variables instead.

    ``launch_env`` is None when the environment could not be read. Raises ProcessGone when the
    process ends during the read.
    """
    from parinfo.outside.inforce import counts_in_force
    from parinfo.outside.standing import Standing, decide
    from parinfo.process import libraries as reg

    read = {row.path: row for row in counts_in_force(proc, maps)}
    for row in rows:
        memory = read.get(row.filepath or "")
        got = decide(row.library, memory, launch_env, facts)
        if got.standing is Standing.IN_FORCE:
            row.num_threads, row.count_source = got.count, got.source
        elif got.standing is Standing.PREDICTED and got.variable is not None:
            row.launch_count, row.launch_from, row.count_source = got.count, got.variable, FROM_LAUNCH
        elif launch_env is None or (memory is not None and memory.denied):
            row.count_source = got.source
        else:  # nothing set at launch: name the variables that would have said it
            rec = reg.find(row.library)
            names = ", ".join(rec.count_vars) if rec is not None else ""
            row.count_source = unknown(f"{got.unread}; none of {names} was set at launch" if names else got.unread)


def environment(proc: Proc) -> dict[str, str]:
    """The environment ``proc`` was launched with (its later edits are not visible from outside)."""
    return proc.environ()


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


def limits(proc: Proc | None = None) -> Limits:
    """The soft limits of ``proc`` (default: this process)."""
    if proc is None:
        import resource

        def soft(which: int) -> int | None:
            value = resource.getrlimit(which)[0]
            return None if value == resource.RLIM_INFINITY else value

        return Limits(soft(resource.RLIMIT_STACK), soft(resource.RLIMIT_DATA), soft(resource.RLIMIT_AS))
    return parse_limits(proc.limits())


def children(proc: Proc) -> list[Proc]:
    """The handle of every descendant of ``proc`` (children, their children...), found by the parent
    field of each process's stat, whose first reading fixes each handle's identity; processes that
    end meanwhile are skipped."""
    parents: dict[int, list[Proc]] = {}
    for pid in pids():
        child = Proc.of(pid)
        try:
            parents.setdefault(child.stat().ppid, []).append(child)
        except UsageError:
            continue  # it has gone
    out: list[Proc] = []
    seen = {proc.pid}
    todo = [proc.pid]
    while todo:
        for child in sorted(parents.get(todo.pop(0) or 0, ()), key=lambda h: h.pid or 0):
            if child.pid not in seen:
                seen.add(child.pid)
                out.append(child)
                todo.append(child.pid)
    return out


def ancestors(proc: Proc | None = None) -> list[int]:
    """The parent of ``proc`` (default: this process), its parent, and so on up to pid 1, nearest
    first, each found through the handle's own :meth:`~parinfo.machine.procfs.Proc.parent`; a
    process that ends meanwhile ends the list."""
    out: list[int] = []
    current = this_or(proc)
    while len(out) < 4096:
        try:
            parent = current.parent()  # UsageError for ppid 0 (no parent), or one that has gone
        except UsageError:
            break
        if parent.pid is None or parent.pid in out:
            break
        out.append(parent.pid)
        if parent.pid <= 1:
            break
        current = parent
    return out
