"""The OS threads of a process now, by name where the kernel gives one."""
from __future__ import annotations

import re
from dataclasses import field
from typing import TYPE_CHECKING

from parinfo.records.convert import LOCAL, OMIT_NONE, REQUIRED
from parinfo.records.record import record
from parinfo.records.source import Kind, Source, file, unknown
from parinfo.records.unknown import Unknown, because, describe

if TYPE_CHECKING:
    from parinfo.machine.procfs import Proc

#: What a report read from elsewhere says of a thread fact it does not carry.
NOT_IN_REPORT = "unknown (not in the report)"
NOT_READ = unknown("not in the report")

#: A trailing worker number: separators, then digits, possibly repeated ("-3", " #2", "-0_1").
_WORKER_NUMBER = re.compile(r"([-_.:/# ]+)\d+(?:[-_.:/# ]+\d+)*$")


def thread_group(name: str) -> str:
    """The group a thread name is shown in: names that differ only by a trailing worker number are
    one group, written with a ``*`` for the number, so the group reads as a glob of its members
    ("pool-3" -> "pool-*", "ThreadPoolExecutor-0_1" -> "ThreadPoolExecutor-*", "OMP worker #2" ->
    "OMP worker #*"). Other names are their own group: "python3" (no separator before the digits),
    "1234" (nothing but a number). ``show``, ``host``, ``watch`` and the HTML report all group by it."""
    m = _WORKER_NUMBER.search(name)
    if m is None or m.start() == 0:
        return name
    return f"{name[:m.start()]}{m.group(1)}*"


@record
class OsThread:
    """One OS thread: its id and the kernel's name for it (at most 15 characters, e.g. "python",
    "PTThreadPool"), or "unknown (reason)"; ``python_name``: the name of the Python thread it runs,
    when that was read (a process attached to), else None (and then not in the payload);
    ``owner``: the library that started it (:mod:`parinfo.process.thread_owners`: "pyarrow",
    "openblas (numpy)", "python", "main thread", "unknown (why)"), None when not read; ``started``:
    its start time after boot in clock ticks (with the tid, the thread's identity: a tid is given
    again once its thread ends), None when not read; it stays in the process (no JSON)."""

    tid: int = field(metadata=REQUIRED)
    name: str = field(metadata={"missing": NOT_IN_REPORT})
    python_name: str | None = field(default=None, metadata=OMIT_NONE)
    owner: str | None = field(default=None, metadata=OMIT_NONE)
    started: int | None = field(default=None, compare=False, metadata=LOCAL)


@record
class ThreadList:
    """The OS threads of a process: the report's ``threads`` section (its JSON).

    - ``count``: the number of threads (int), or "unknown (reason)".
    - ``threads``: sorted by tid.
    - ``source``: "/proc/<pid>/task", "psutil", or "unknown (reason)".
    - ``states``: for a process read from outside, how many threads are in each scheduler state
      ({"R": 2, "S": 5}); None otherwise (and then not in its JSON).
    - ``owners``: how many threads each library owns (the threads' ``owner``s counted, most first),
      None when owners were not read (and then not in its JSON).
    """

    count: int | str = NOT_IN_REPORT
    threads: list[OsThread] = field(default_factory=list)
    source: Source = NOT_READ
    states: dict[str, int] | None = field(default=None, metadata=OMIT_NONE)
    owners: dict[str, int] | None = field(default=None, metadata=OMIT_NONE)

    def not_counted(self) -> Unknown:
        """Why ``count`` is no number, as a value: the reason of its unknown ``source`` (the two
        are made together, so its words are ``count``'s)."""
        if self.source.kind is Kind.UNKNOWN and self.source.detail:
            return Unknown(self.source.detail)
        return Unknown("the threads were not counted")


def live_threads(handle: Proc | None = None) -> ThreadList:
    """The OS threads of process ``handle`` (default: this one).

    Read from ``/proc/<pid>/task/*/stat`` (one read a thread gives its name and its start time);
    when that directory cannot be listed, psutil's thread list (ids only) is used.
    """
    from parinfo.errors import UsageError
    from parinfo.machine.procfs import this_or

    proc = this_or(handle)
    try:
        tids = proc.thread_ids()
    except UsageError as exc:
        return _from_psutil(proc.pid, f"unknown ({exc})")
    threads = []
    for tid in tids:
        st = proc.thread_stat(tid)
        if st is not None:  # None: ended while listed
            threads.append(OsThread(tid, st.name, started=st.start))
    return ThreadList(len(threads), threads, file(proc.shown("task")))


def _from_psutil(pid: int | None, proc_reason: str) -> ThreadList:
    try:
        import psutil

        tids = sorted(t.id for t in psutil.Process(pid).threads())
    except Exception as exc:  # NoSuchProcess, AccessDenied, no procfs
        why = because(exc)
        return ThreadList(why, [], unknown(describe(exc), why))
    name = f"unknown (thread names not readable: {proc_reason})"
    return ThreadList(len(tids), [OsThread(t, name) for t in tids], Source(Kind.GETTER, "psutil", "psutil"))
