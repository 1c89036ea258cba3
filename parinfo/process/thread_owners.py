"""Which library owns each OS thread of a process: by the code its stack starts in, else by the
name it was given.

Most native pools keep the name of the thread that started them ("python"), so a name says little.
A thread's outermost frames say more: glibc puts a thread's stack (an anonymous mapping) and its
control block at the top of one mapping, and the frames nearest that top are the start routine's:
the library's worker loop, reached from ``start_thread``. So, for a thread waiting in a system call
(pool workers wait so), its stack pointer (``/proc/PID/task/TID/syscall``) names its stack mapping
(``/proc/PID/maps``); a bounded window at the top of it, read through ``/proc/PID/mem``, is scanned
from the top down for words that point into an executable mapped file; the first such file that is
not the C runtime (libc, the loader, libstdc++, libgcc) is the thread's owner. A file of the
interpreter (the executable, libpython) makes it a Python thread. A thread that keeps running (a
pool worker spinning between regions) shows no stack pointer: it is found through its C library
thread block instead (:mod:`parinfo.process.thread_blocks`).

Reading another process's stacks needs the right to read its memory (same user with ptrace allowed,
or root): without it, a thread is placed by its name (the families' ``thread_names``: "polars" for
"polars-3", "polars or pyarrow" for a name both declare), else owned by "unknown (why)". The main
thread and, in this process or one attached to, the Python threads are known without a stack. Everything read
here is the process's own data (hostile): reads are bounded, nothing read is followed but addresses
that its own maps name, and every failure is an Unknown, never an exception but ProcessGone.
"""
from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping

from parinfo.machine.procfs import Memory, Proc, this_or
from parinfo.process import libraries as reg
from parinfo.process.mapped import MapsOnce
from parinfo.process.stack_words import (
    PYTHON,
    WINDOW,
    Maps,
    Running,
    owner_by_stack,
    parse_maps,
    stack_pointer,
    thread_block_end,
)
from parinfo.process.threads import OsThread, ThreadList, thread_group
from parinfo.records.unknown import Unknown

#: Owner of a process's first thread (the interpreter's threads are owned by :data:`PYTHON`).
MAIN = "main thread"

#: How often the threads found running are asked for their stack pointers, all together: a pass
#: over every thread, then one over those still running after 1 ms (at most 1 ms a report, however
#: many threads run: a worker that spins after its work, as OpenBLAS's do, spins longer than any wait
#: a report could afford).
RUNNING_TRIES = 2

def _name_owners() -> dict[str, tuple[str, ...]]:
    """Thread group -> the families that declare threads of that name."""
    out: dict[str, list[str]] = {}
    for lib in reg.records():
        for group, _ in lib.thread_names:
            out.setdefault(group, []).append(lib.name)
    return {group: tuple(dict.fromkeys(names)) for group, names in out.items()}


class Reader:
    """Reads the owners of one process's threads: its maps (``maps``: this report's read, shared with
    the pools) and memory, opened once. ``by_stack_found``: tid -> the owner its stack gave."""

    def __init__(self, proc: Proc, maps: MapsOnce | None = None) -> None:
        self.proc = proc
        self.names = _name_owners()
        self.refused: Unknown | None = None
        self.by_stack_found: dict[int, str] = {}
        self._maps_file = maps if maps is not None else MapsOnce(proc)
        self._maps: Maps | None = None
        exe = proc.exe()
        self.interpreter = None if isinstance(exe, Unknown) else exe

    def maps(self) -> Maps | Unknown:
        if self._maps is None:
            raw = self._maps_file.raw()
            if isinstance(raw, Unknown):
                return raw
            self._maps = Maps(parse_maps(raw))
        return self._maps

    def by_stack(self, tid: int, memory: Memory) -> str | Unknown:
        """The owner of thread ``tid`` by its stack (``memory``: the process's, open)."""
        if memory.refused is not None:
            return Unknown(f"its stack cannot be read: {memory.refused.why}")
        sp = stack_pointer(self.proc.thread_file(tid, "syscall", 512))
        if isinstance(sp, Unknown):
            return sp
        maps = self.maps()  # read once, and only when a stack is to be read
        if isinstance(maps, Unknown):
            return maps
        stack = maps.at(sp)
        if stack is None:
            return Unknown("its stack pointer is in no mapping")
        high = min(stack.end, sp + WINDOW)
        words = memory.read_upto(sp, high - sp)
        if isinstance(words, Unknown):
            return Unknown(f"its stack cannot be read: {words.why}")
        top = thread_block_end(words, sp, stack.end)
        if top is None and len(words) < high - sp:  # a guard region above it: its stack's top
            top = sp + len(words) // 8 * 8
        if top is None:  # no thread block above its frames within the window: the mapping's top
            low = max(sp, stack.end - WINDOW)
            words = memory.read(low, stack.end - low)
            if isinstance(words, Unknown):
                return Unknown(f"its stack cannot be read: {words.why}")
            return owner_by_stack(words, maps, self.interpreter)
        return owner_by_stack(words[:top - sp], maps, self.interpreter)

    def owner(self, thread: OsThread, python: Mapping[int, str], memory: Memory,
              again: bool = False) -> str | Unknown:
        """The owner of one thread: the main thread, a Python thread, the library its stack starts
        in, else the families that name their threads as it is named, else "unknown (why)". The
        stack comes before the name: it tells copies apart (Polars' jemalloc from Arrow's), and a
        name like "tokio-rt-worker" is any tokio user's. With ``again``, a thread found running is
        :class:`Running` (to be asked again) instead of placed by its name."""
        plain = without_stack(thread, self.proc, python)
        if plain is not None:
            return plain
        found = self.by_stack(thread.tid, memory)
        if not isinstance(found, Unknown):
            self.by_stack_found[thread.tid] = found
            return found
        if again and isinstance(found, Running):
            return found
        named = self.names.get(thread_group(thread.name), ())
        return " or ".join(named) if named else str(found)


def without_stack(thread: OsThread, proc: Proc, python: Mapping[int, str]) -> str | None:
    """The owner of the process's main thread and of its Python threads (``python``: their native
    ids), which no stack need tell; None for the others."""
    if thread.tid == (proc.pid or os.getpid()):
        return MAIN
    return PYTHON if thread.tid in python else None


#: Owners found by their stacks in this process, by (pid, tid, start time): a thread's start routine
#: is fixed for its life, and a tid given again goes with another start time. A stack that showed
#: only the interpreter is read again (a thread caught before its start routine shows no more than
#: its starter's words). Only this process's threads are kept (another's may be read under another
#: root, or by a caller allowed less), and only those listed at the last report (the rest ended).
_KNOWN: dict[tuple[int, int, int], str] = {}


def _is_this_process(proc: Proc) -> bool:
    return proc.pid in (None, os.getpid()) and proc.root == "/"


def _known_owners(listing: ThreadList, proc: Proc, python: Mapping[int, str]) -> list[OsThread]:
    """The threads of ``listing`` whose owner is known without reading a stack (their owner set): the
    main thread, the Python threads, and in this process those found at an earlier report; returns
    the others. Entries of threads no longer listed are dropped."""
    mine = _is_this_process(proc)
    pid = os.getpid()
    if mine:
        keys = {(pid, t.tid, t.started) for t in listing.threads if t.started is not None}
        for key in [k for k in _KNOWN if k not in keys]:
            del _KNOWN[key]
    left = []
    for thread in listing.threads:
        owner = without_stack(thread, proc, python)
        if owner is None and mine and thread.started is not None:
            owner = _KNOWN.get((pid, thread.tid, thread.started))
        if owner is None:
            left.append(thread)
        else:
            thread.owner = owner
    return left


def _remember(listing: ThreadList, proc: Proc, found: Mapping[int, str]) -> None:
    if _is_this_process(proc):
        pid = os.getpid()
        _KNOWN.update({(pid, t.tid, t.started): found[t.tid] for t in listing.threads
                       if t.started is not None and found.get(t.tid, PYTHON) != PYTHON})


def attribute(listing: ThreadList, proc: Proc | None = None, python: Mapping[int, str] | None = None,
              maps: MapsOnce | None = None) -> ThreadList:
    """``listing`` (the threads of ``proc``, default this process) with each thread's owner set and
    ``owners`` counted; ``python`` maps the native ids of the process's Python threads to their
    names (this process's are read here when it is None); ``maps``: this report's read of the
    process's maps, when it has one. In this process, a thread whose owner its stack gave at an
    earlier report (the same tid and start time) is not read again."""
    proc = this_or(proc)
    if python is None:
        python = _own_python_threads() if proc.pid in (None, os.getpid()) else {}
    left = _known_owners(listing, proc, python)
    if not left:
        listing.owners = count_owners(listing.threads)
        return listing
    reader = Reader(proc, maps)
    with proc.memory() as memory:
        memory.read(0, 0)  # opens it: a refusal is known before the first stack is asked for
        for attempt in range(RUNNING_TRIES):  # a worker found running waits again soon
            if attempt:
                time.sleep(0.001 * attempt)
            running = []
            for thread in left:
                found = reader.owner(thread, python, memory, again=True)
                if isinstance(found, Running):
                    running.append(thread)
                else:
                    thread.owner = str(found)
            left = running
            if not running:
                break
        if left:  # still running (a spinning worker never waits): found by its thread block instead
            _running_owners(left, listing, proc, reader, python, memory)
    _remember(listing, proc, reader.by_stack_found)
    listing.owners = count_owners(listing.threads)
    return listing


def _running_owners(running: list[OsThread], listing: ThreadList, proc: Proc, reader: Reader,
                    python: Mapping[int, str], memory: Memory) -> None:
    """Owners of threads that kept running, from their C library thread blocks
    (:mod:`parinfo.process.thread_blocks`); those it cannot place are placed by their names."""
    from parinfo.process.thread_blocks import owners_of_running

    tids = [t.tid for t in listing.threads]
    found = owners_of_running(proc, [t.tid for t in running], tids, reader.interpreter)
    for thread in running:
        owner = found.get(thread.tid)
        if isinstance(owner, str):
            reader.by_stack_found[thread.tid] = owner
            thread.owner = owner
        else:
            thread.owner = str(reader.owner(thread, python, memory))


def owners_of(proc: Proc) -> dict[str, int]:
    """Owner -> threads of process ``proc`` read from outside (``host``); ProcessGone when it ends."""
    from parinfo.process.threads import live_threads

    return attribute(live_threads(proc), proc, {}).owners or {}


def count_owners(threads: Iterable[OsThread]) -> dict[str, int]:
    """Owner -> threads, most first (ties by name)."""
    counts = Counter(t.owner for t in threads if t.owner is not None)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _own_python_threads() -> dict[int, str]:
    import threading

    return {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
