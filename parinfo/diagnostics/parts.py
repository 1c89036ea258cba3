"""The report's own sections: those only the report assembles, whose facts no lower layer owns (the
process, parinfo's runtime as ``parinfo.runtime.info()`` gives it, the backends, the frameworks, the
live evidence). :mod:`parinfo.diagnostics.model` builds the :class:`~parinfo.diagnostics.model.Report`
from them; they live apart so that what renders a report (sections, wording) can name their types
without importing the model that renders through it.
"""
from __future__ import annotations

from dataclasses import field

from parinfo.machine.memlimit import MemoryFacts
from parinfo.machine.pressure import CpuCounters, PressureFacts
from parinfo.outside.remote import Limits
from parinfo.process.frameworks import TorchInfo
from parinfo.process.interpreter import InterpreterFacts
from parinfo.process.pools import ThreadingLayers
from parinfo.process.serving import Served
from parinfo.process.spin import SpinEvidence
from parinfo.records.convert import ALONE, EMPTY_IS_NONE, FLATTEN, OMIT_NONE, doc, key
from parinfo.records.record import record
from parinfo.records.source import Source

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


@record
class ProcessInfo:
    """Which process the report is about (``process``). ``pid``, ``python`` and ``executable`` are
    always in its JSON; the rest only when known: ``implementation`` and ``platform`` for this
    process, ``name``, ``ppid``, ``cmdline``, ``inspected_from`` (the pid that read it), ``hint`` (how
    to get the full report), ``counts`` (which counts are read and which are unknown),
    ``unreadable`` (section -> "unknown (why)": what this user may not read) and ``note`` (a main
    thread that exited while the others run on) for one read from outside; ``attached`` (how it was
    read from inside, and how long that took) for one attached to; ``tree_reads`` (how each process
    of the tree was read, inside or from outside) for a tree read with attach."""

    pid: int | None = None
    name: str | None = field(default=None, metadata=OMIT_NONE)
    ppid: int | None = field(default=None, metadata=OMIT_NONE)
    cmdline: list[str] | None = field(default=None, metadata=OMIT_NONE)
    python: str | None = None
    implementation: str | None = field(default=None, metadata=OMIT_NONE)
    executable: str | None = None
    platform: str | None = field(default=None, metadata=OMIT_NONE)
    inspected_from: int | None = field(default=None, metadata=OMIT_NONE)
    attached: str | None = field(default=None, metadata=OMIT_NONE)
    hint: str | None = field(default=None, metadata=OMIT_NONE)
    counts: str | None = field(default=None, metadata=OMIT_NONE)
    unreadable: dict[str, str] | None = field(default=None, metadata={**OMIT_NONE, **doc(
        "a process read from outside only: section -> unknown (why) for what this user may not read")})
    note: str | None = field(default=None, metadata={**OMIT_NONE, **doc(
        "a process read from outside only: what is odd about it (its main thread has exited while its other "
        "threads run on)")})
    tree_reads: list[ProcessRead] | None = field(default=None, metadata={**OMIT_NONE, **doc(
        "show --pid P --children --attach only: how each process of the tree was read, in the tree's order "
        "(attached: read inside, how: the means and the round trip; else read from outside, how: why not attached)")})


@record
class Backend:
    """Who runs the threads (``backend``): parinfo's runtime backend and whether its pools started,
    the threading layer of each native library family, torch's ATen backend, and the interpreter
    (``python``: the build, the GIL, Python threads x per-thread pools; None when not read), the
    malloc that serves the process (``allocator``) and the OpenMP runtime that serves its omp_*
    calls (``openmp``), each with who chose it (None when not read, or no OpenMP runtime is loaded)."""

    runtime: str | None = None
    runtime_started: bool = False
    layers: ThreadingLayers = field(default_factory=ThreadingLayers, metadata=FLATTEN)
    torch: str | None = None
    python: InterpreterFacts | None = field(default=None, metadata=OMIT_NONE)
    allocator: Served | None = field(default=None, metadata={**OMIT_NONE, **doc(
        "the malloc that serves the process: the file its global scope resolves malloc to, who chose it, its "
        "variables, and every malloc library loaded")})
    openmp: Served | None = field(default=None, metadata={**OMIT_NONE, **key("openmp_runtime"), **doc(
        "the OpenMP runtime that serves omp_* and GOMP_* calls, who chose it, its variables, and every OpenMP "
        "runtime loaded")})


@record
class Frameworks:
    """Frameworks with pools of their own (``frameworks``): torch, or None when it is not imported."""

    torch: TorchInfo | None = field(default=None, metadata=EMPTY_IS_NONE)  # {}: torch not imported


@record
class StackLimit:
    """A memory limit that thread stacks count against: its ``name`` (RLIMIT_DATA, RLIMIT_AS, the
    cgroup memory limit), ``bytes``, the ``threads`` that share it and where each came from."""

    name: str = field(metadata={"missing": "a memory limit"})
    bytes: int | None
    threads: int | None
    source: Source | None = None
    threads_source: Source | None = field(default=None, metadata=OMIT_NONE)


@record
class StackBudget:
    """Thread stacks against memory limits (``live.stack_budget``): the soft resource limits
    (``rlimits``, unlimited when not read; their keys in its own object), the stack a new thread gets
    (``thread_stack``), and each limit with the threads it bounds; or, when the limits could not be
    read, only ``unknown`` (why)."""

    rlimits: Limits = field(default_factory=lambda: Limits(None, None, None), metadata=FLATTEN)
    thread_stack: int | None = None
    limits: list[StackLimit] = field(default_factory=list)
    unknown: str | None = field(default=None, metadata=ALONE)


@record
class TreeMember:
    """One process of a tree read from outside: pid, name, threads, and how many run now."""

    pid: int | None
    name: str = field(metadata={"missing": "?"})
    threads: int
    running_now: int


@record
class ProcessTree:
    """A process (tree) read from outside, sampled twice (``live.tree``): how many threads wanted a
    CPU on average over ``seconds`` (``runnable``: time on a CPU plus time waiting for one), and the
    root process's pool threads that spun with no work over the same window (``spin``)."""

    processes: int = 1
    threads: int = 0
    runnable: float | None = None
    seconds: float = 0.0
    members: list[TreeMember] = field(default_factory=list)
    spin: SpinEvidence | None = field(default=None, metadata=OMIT_NONE)


@record
class LiveSection:
    """The live evidence (``live``): the cgroup's cumulative throttling, CPU pressure, the memory
    limit, the thread-stack budget, and for a process read from outside its sampled ``tree``."""

    throttling: CpuCounters
    pressure: PressureFacts
    memory: MemoryFacts
    stack_budget: StackBudget
    tree: ProcessTree | None = field(default=None, metadata=OMIT_NONE)
