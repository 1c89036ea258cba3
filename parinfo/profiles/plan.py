"""A resolved profile: every setting with its value and why, ready to be put in force.

The profile loader (parinfo.profiles.loading) produces a Plan for one machine; parinfo.profiles.applying puts it in
force in this process, in a launched program, or across pinned instances.
"""
from __future__ import annotations

from dataclasses import field

from parinfo.records.convert import LOCAL, OMIT_NONE
from parinfo.records.record import record


@record(frozen=True)
class Setting:
    """One resolved count: ``value`` and ``why`` (the expression and the machine facts it used)."""

    key: str = field(metadata=LOCAL)  # the plan's JSON names it by where it sits
    value: int
    why: str


@record(frozen=True)
class InstancePlan:
    """One pinned instance of a multi-instance plan."""

    index: int
    cpus: tuple[int, ...]
    intra_op: int
    inter_op: int
    env: dict[str, str]
    nodes: tuple[int, ...] = ()  # the NUMA nodes of its CPUs (its memory's with ``memory``)


@record(frozen=True)
class Preload:
    """A library the plan preloads into a launched program: ``key`` (allocator | openmp), ``choice``
    (the record's name: jemalloc, intel...), ``path`` (the file; None when nothing is preloaded:
    ``default``, or ``auto`` with nothing installed), ``why`` (how it was chosen and where found),
    ``variables`` (the plan's variables that come with it: MALLOC_CONF, KMP_AFFINITY...)."""

    key: str
    choice: str
    path: str | None
    why: str
    variables: tuple[str, ...] = ()


@record(frozen=True)
class Plan:
    """What a profile means on this machine.

    ``libraries`` maps blas|openmp|mkl|numexpr|torch to its count; ``env`` is every environment
    variable the plan sets (derived counts plus the profile's extra variables), with ``env_why``.
    ``preload`` holds the allocator and OpenMP runtime the profile chose (launched programs only).
    """

    name: str
    description: str
    origin: str  # the profile's file, or "<profile>"
    intra_op: Setting
    inter_op: Setting
    libraries: dict[str, Setting] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    env_why: dict[str, str] = field(default_factory=dict)
    affinity: tuple[int, ...] | None = None
    affinity_why: str = "not set: inherited"
    instances: tuple[InstancePlan, ...] = ()
    notes: tuple[str, ...] = ()
    preload: tuple[Preload, ...] = ()
    memory: str = "none"  # local | interleave | none (grammar.MEMORY_WORDS)
    memory_nodes: tuple[int, ...] = ()  # the NUMA nodes of the program's CPUs (per instance: InstancePlan.nodes)
    memory_why: str = "not set: the kernel's default"
    threads: str | None = field(default=None, metadata=OMIT_NONE)  # every | caller; None: not written (caller)

    @property
    def every_thread(self) -> bool:
        """Whether per-thread limits go into every thread the program starts (``threads: every``)."""
        return self.threads == "every"

    @property
    def preload_variables(self) -> frozenset[str]:
        """The variables that come with a library the plan preloads (MALLOC_CONF, KMP_BLOCKTIME...)."""
        return frozenset(v for p in self.preload if p.path for v in p.variables)

    @property
    def env_without_preload(self) -> dict[str, str]:
        """The plan's variables less :attr:`preload_variables`: what a process gets that cannot
        preload (a running one, a fleet worker), so a library loaded there never reads settings
        meant for another."""
        skip = self.preload_variables
        return {k: v for k, v in self.env.items() if k not in skip}

    @property
    def preload_paths(self) -> list[str]:
        """The files to put first in a launched program's LD_PRELOAD, in order."""
        return [p.path for p in self.preload if p.path]
