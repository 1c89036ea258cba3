"""The report's own sections: those only the report assembles, whose facts no lower layer owns (the
process, parinfo's runtime as ``parinfo.runtime.info()`` gives it, the backends, the frameworks, the
live evidence). :mod:`parinfo.diagnostics.model` builds the :class:`~parinfo.diagnostics.model.Report`
from them; they live apart so that what renders a report (sections, wording) can name their types
without importing the model that renders through it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from parinfo.machine.memlimit import MemoryFacts
from parinfo.machine.pressure import CpuCounters, PressureFacts
from parinfo.payload import integer, number, rows, section, text, texts
from parinfo.process.frameworks import TorchInfo
from parinfo.process.interpreter import InterpreterFacts
from parinfo.process.pools import ThreadingLayers
from parinfo.process.remote import Limits
from parinfo.process.serving import Served
from parinfo.record import record
from parinfo.source import Source

# platform.python_implementation()'s names, without importing platform (1 ms of every start-up)
IMPLEMENTATIONS = {"cpython": "CPython", "pypy": "PyPy", "ironpython": "IronPython", "jython": "Jython"}


@record(frozen=True)
class ProcessRead:
    """How the counts of one process of a tree were read (``show --pid P --children --attach``):
    inside it (``attached``: through sys.remote_exec) or not, and ``how``, in words: the means and
    the round trip, or why not (the attach's one line, or the time for the tree's attaches spent)."""

    pid: int
    attached: bool
    how: str

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessRead:
        d = section(data)
        return cls(integer(d.get("pid")) or 0, d.get("attached") is True, text(d.get("how")) or "")

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "attached": self.attached, "how": self.how}


@record
class ProcessInfo:
    """Which process the report is about (``process``). ``pid``, ``python`` and ``executable`` are
    always in ``to_dict``; the rest only when known: ``implementation`` and ``platform`` for this
    process, ``name``, ``ppid``, ``cmdline``, ``inspected_from`` (the pid that read it), ``hint`` (how
    to get the full report), ``counts`` (which counts are read and which are unknown),
    ``unreadable`` (section -> "unknown (why)": what this user may not read) and ``note`` (a main
    thread that exited while the others run on) for one read from outside; ``attached`` (how it was
    read from inside, and how long that took) for one attached to; ``tree_reads`` (how each process
    of the tree was read, inside or from outside) for a tree read with attach."""

    pid: int | None = None
    python: str | None = None
    executable: str | None = None
    implementation: str | None = None
    platform: str | None = None
    name: str | None = None
    ppid: int | None = None
    cmdline: list[str] | None = None
    inspected_from: int | None = None
    hint: str | None = None
    counts: str | None = None
    unreadable: dict[str, str] | None = None
    note: str | None = None  # what is odd about the process read from outside (its main thread exited)
    attached: str | None = None
    tree_reads: list[ProcessRead] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessInfo:
        d = section(data)
        cmdline = d.get("cmdline")
        unreadable = d.get("unreadable")
        reads = d.get("tree_reads")
        return cls(integer(d.get("pid")), text(d.get("python")), text(d.get("executable")),
                   text(d.get("implementation")), text(d.get("platform")), text(d.get("name")),
                   integer(d.get("ppid")), None if cmdline is None else texts(cmdline),
                   integer(d.get("inspected_from")), text(d.get("hint")), text(d.get("counts")),
                   {str(k): str(v) for k, v in unreadable.items()} if isinstance(unreadable, dict) else None,
                   text(d.get("note")), text(d.get("attached")),
                   [ProcessRead.from_dict(r) for r in rows(reads)] if isinstance(reads, list) else None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pid": self.pid}
        for key in ("name", "ppid", "cmdline", "python", "implementation", "executable", "platform",
                    "inspected_from", "attached", "hint", "counts", "unreadable", "note"):
            value = getattr(self, key)
            if value is not None or key in ("python", "executable"):
                out[key] = list(value) if key == "cmdline" else dict(value) if key == "unreadable" else value
        if self.tree_reads is not None:
            out["tree_reads"] = [r.to_dict() for r in self.tree_reads]
        return out


@record
class Backend:
    """Who runs the threads (``backend``): parinfo's runtime backend and whether its pools started,
    the threading layer of each native library family, torch's ATen backend, and the interpreter
    (``python``: the build, the GIL, Python threads x per-thread pools; None when not read), the
    malloc that serves the process (``allocator``) and the OpenMP runtime that serves its omp_*
    calls (``openmp``), each with who chose it (None when not read, or no OpenMP runtime is loaded)."""

    runtime: str | None = None
    runtime_started: bool = False
    layers: ThreadingLayers = field(default_factory=ThreadingLayers)
    torch: str | None = None
    python: InterpreterFacts | None = None
    allocator: Served | None = None
    openmp: Served | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Backend:
        d = section(data)
        python, allocator, openmp = d.get("python"), d.get("allocator"), d.get("openmp_runtime")
        return cls(text(d.get("runtime")), d.get("runtime_started") is True, ThreadingLayers.from_dict(d),
                   text(d.get("torch")), InterpreterFacts.from_dict(python) if isinstance(python, Mapping) else None,
                   Served.from_dict(allocator) if isinstance(allocator, Mapping) else None,
                   Served.from_dict(openmp) if isinstance(openmp, Mapping) else None)

    def to_dict(self) -> dict[str, Any]:
        out = {"runtime": self.runtime, "runtime_started": self.runtime_started, **self.layers.to_dict(),
               "torch": self.torch}
        if self.python is not None:
            out["python"] = self.python.to_dict()
        if self.allocator is not None:
            out["allocator"] = self.allocator.to_dict()
        if self.openmp is not None:
            out["openmp_runtime"] = self.openmp.to_dict()
        return out


@record
class Frameworks:
    """Frameworks with pools of their own (``frameworks``): torch, or None when it is not imported."""

    torch: TorchInfo | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Frameworks:
        torch = section(data).get("torch")
        return cls(TorchInfo.from_dict(torch) if isinstance(torch, Mapping) and torch else None)

    def to_dict(self) -> dict[str, Any]:
        return {"torch": None if self.torch is None else self.torch.to_dict()}


@record
class StackLimit:
    """A memory limit that thread stacks count against: its ``name`` (RLIMIT_DATA, RLIMIT_AS, the
    cgroup memory limit), ``bytes``, the ``threads`` that share it and where each came from."""

    name: str
    bytes: int | None
    threads: int | None
    source: Source | None = None
    threads_source: Source | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StackLimit:
        d = section(data)
        return cls(text(d.get("name")) or "a memory limit", integer(d.get("bytes")), integer(d.get("threads")),
                   Source.from_json(d.get("source")), Source.from_json(d.get("threads_source")))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "bytes": self.bytes, "threads": self.threads,
                               "source": None if self.source is None else self.source.to_json()}
        if self.threads_source is not None:
            out["threads_source"] = self.threads_source.to_json()
        return out


@record
class StackBudget:
    """Thread stacks against memory limits (``live.stack_budget``): the soft resource limits, the
    stack a new thread gets (``thread_stack``), and each limit with the threads it bounds; or, when
    the limits could not be read, only ``unknown`` (why)."""

    rlimits: Limits | None = None
    thread_stack: int | None = None
    limits: list[StackLimit] = field(default_factory=list)
    unknown: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StackBudget:
        d = section(data)
        if text(d.get("unknown")) is not None:
            return cls(unknown=text(d.get("unknown")))
        rlimits = Limits(integer(d.get("stack")), integer(d.get("data")), integer(d.get("address_space")))
        return cls(rlimits, integer(d.get("thread_stack")), [StackLimit.from_dict(r) for r in rows(d.get("limits"))])

    def to_dict(self) -> dict[str, Any]:
        if self.unknown is not None:
            return {"unknown": self.unknown}
        rl = self.rlimits or Limits(None, None, None)
        return {"stack": rl.stack, "data": rl.data, "address_space": rl.address_space,
                "thread_stack": self.thread_stack, "limits": [row.to_dict() for row in self.limits]}


@record
class TreeMember:
    """One process of a tree read from outside: pid, name, threads, and how many run now."""

    pid: int | None
    name: str
    threads: int
    running_now: int

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "threads": self.threads, "running_now": self.running_now}


@record
class ProcessTree:
    """A process (tree) read from outside, sampled twice (``live.tree``): how many threads wanted a
    CPU on average over ``seconds`` (``runnable``: time on a CPU plus time waiting for one)."""

    processes: int = 1
    threads: int = 0
    runnable: float | None = None
    seconds: float = 0.0
    members: list[TreeMember] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessTree:
        d = section(data)
        members = [TreeMember(integer(m.get("pid")), text(m.get("name")) or "?", integer(m.get("threads")) or 0,
                              integer(m.get("running_now")) or 0) for m in rows(d.get("members"))]
        processes = integer(d.get("processes"))
        return cls(1 if processes is None else processes, integer(d.get("threads")) or 0, number(d.get("runnable")),
                   number(d.get("seconds")) or 0.0, members)

    def to_dict(self) -> dict[str, Any]:
        return {"processes": self.processes, "threads": self.threads, "runnable": self.runnable,
                "seconds": self.seconds, "members": [m.to_dict() for m in self.members]}


@record
class LiveSection:
    """The live evidence (``live``): the cgroup's cumulative throttling, CPU pressure, the memory
    limit, the thread-stack budget, and for a process read from outside its sampled ``tree``."""

    throttling: CpuCounters
    pressure: PressureFacts
    memory: MemoryFacts
    stack_budget: StackBudget
    tree: ProcessTree | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LiveSection:
        d = section(data)
        return cls(CpuCounters.from_dict(section(d.get("throttling"))),
                   PressureFacts.from_dict(section(d.get("pressure"))),
                   MemoryFacts.from_dict(section(d.get("memory"))),
                   StackBudget.from_dict(section(d.get("stack_budget"))),
                   ProcessTree.from_dict(d["tree"]) if isinstance(d.get("tree"), Mapping) else None)

    def to_dict(self) -> dict[str, Any]:
        out = {"throttling": self.throttling.to_dict(), "pressure": self.pressure.to_dict(),
               "memory": self.memory.to_dict(), "stack_budget": self.stack_budget.to_dict()}
        if self.tree is not None:
            out["tree"] = self.tree.to_dict()
        return out
