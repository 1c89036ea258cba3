"""What ``parinfo.apply()`` did, as records: each setting made (:class:`Done`), each one left out
and why (:class:`Skipped`, with a :class:`Reason`), each count read back that is not what the plan
asked for (:class:`Drift`, :class:`Gap`), which threads a per-thread limit reached (:class:`Reach`)
and what waits for a framework's import (:class:`AtImport`), gathered in :class:`Applied`.

No sentence is stored here: ``str()`` of a record gives its line, made by
:mod:`parinfo.profiles.applied_words`, and :meth:`Applied.lines` gives every list as lines (the edge
a fleet sends its workers' results through).
"""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from parinfo.records.record import record

if TYPE_CHECKING:
    from parinfo.profiles.plan import Plan
    from parinfo.records.source import Source

#: A value a profile sets: a count, a variable's text, or CPUs.
Value = int | str | tuple[int, ...]


class Where(enum.Enum):
    """Where a setting of the profile is put (or would have been)."""

    VARIABLE = "variable"  # os.environ: libraries loaded later and child processes read it
    RUNTIME = "runtime"  # parinfo's own intra-op or inter-op pool
    POOL = "pool"  # a native pool already loaded (through threadpoolctl)
    MODULE = "module"  # a Python module's setter (numexpr.set_num_threads)
    FRAMEWORK = "framework"  # a framework's setters (torch.set_num_threads, ...)
    AFFINITY = "affinity"  # the CPUs of every thread of the process
    MEMORY = "memory"  # the calling thread's memory policy
    PRELOAD = "preload"  # a library preloaded at start-up (allocator, OpenMP runtime)


class Reason(enum.Enum):
    """Why a setting of the profile was not made."""

    USER_SET = "user set"  # a variable the user set stays in force (force=True overrides)
    USER_VALUE_INVALID = "user value invalid"  # the user's variable holds no valid count: left as it is
    NOT_PRELOADABLE = "not preloadable"  # a running process cannot change what it preloaded
    REFUSED = "refused"  # the library or the kernel refused; ``error`` is what it said
    NUMA_UNKNOWN = "numa unknown"  # this machine's NUMA nodes are unknown

    @property
    def users(self) -> bool:
        """Whether the user's own setting decided it."""
        return self in (Reason.USER_SET, Reason.USER_VALUE_INVALID)


@record(frozen=True)
class Done:
    """One setting made: ``what`` (a variable's name, ``intra_op``/``inter_op``, a pool's name, a
    library's), ``value``, ``where``; ``library`` and ``via`` (the setter called) where a library's
    setter did it; ``source`` what the count in force now comes from. ``per_thread``: the limit
    holds in the calling thread only; ``overrode``: the user's value replaced (force=True);
    ``already``: it was in force before; ``threads``: how many threads it reached (affinity) or
    the other running threads it did not (memory)."""

    what: str
    value: Value
    where: Where
    source: Source | None = None
    library: str = ""
    via: str = ""
    per_thread: bool = False
    overrode: str | None = None
    already: bool = False
    threads: int = 0

    def __str__(self) -> str:
        from parinfo.profiles.applied_words import done_line

        return done_line(self)


@record(frozen=True)
class Skipped:
    """One setting left out: ``what`` and ``where`` as in :class:`Done`, the ``reason``, the
    profile's ``value``; ``variable`` and ``user_value``: the user's variable that decided it;
    ``now``: the count that stays; ``error``: what the library or the kernel said; ``at_import``:
    it concerns a framework's import still to come; ``via``: the framework's setter, when it
    follows the user's variable; ``path``, ``variables`` and ``launch``: for a
    preload, its file, the variables that come with it and the command that launches with it."""

    what: str
    where: Where
    reason: Reason
    value: Value | None = None
    library: str = ""
    via: str = ""
    variable: str | None = None
    user_value: str | None = None
    now: int | None = None
    error: str | None = None
    at_import: bool = False
    path: str | None = None
    variables: tuple[str, ...] = ()
    launch: str | None = None

    def __str__(self) -> str:
        from parinfo.profiles.applied_words import skipped_line

        return skipped_line(self)


@record(frozen=True)
class Drift:
    """A count read back that is not what the plan asked for: ``want`` and ``got`` (None: not
    readable), with ``source`` where the runtime says what set it."""

    what: str
    where: Where
    want: Value
    got: Value | None
    library: str = ""
    source: Source | None = None

    def __str__(self) -> str:
        from parinfo.profiles.applied_words import drift_line

        return drift_line(self)


@record(frozen=True)
class Reach:
    """Where a limit that holds per thread reached: ``count`` for ``pool`` in ``thread`` (name, tid);
    parinfo's own pool threads that set it themselves (``pool_threads``), live threads the caller
    limited (``caller``), the other live threads that keep their own (``others``, with
    ``busy`` those of them that are parinfo's pool workers). ``start``: the count a thread
    started now begins at (None: the probe did not answer); ``framework``: the framework that
    passes its count on to each thread (torch), when the line is about it."""

    pool: str
    count: int
    thread: tuple[str, int | None]
    pool_threads: tuple[str, ...] = ()
    caller: tuple[str, ...] = ()
    others: tuple[str, ...] = ()
    busy: tuple[str, ...] = ()
    start: int | None = None
    framework: str = ""

    @property
    def new_threads_follow(self) -> bool:
        """Whether a thread started now runs the limit too."""
        return self.start == self.count

    def __str__(self) -> str:
        from parinfo.profiles.applied_words import reach_line

        return reach_line(self)


@record(frozen=True)
class Gap:
    """A per-thread limit that does not reach every thread (``reach`` says which it did)."""

    reach: Reach

    def __str__(self) -> str:
        from parinfo.profiles.applied_words import gap_line

        return gap_line(self.reach)


@record(frozen=True)
class AtImport:
    """Counts set the moment ``library`` is imported: ``inter`` through ``interop_setter`` and
    ``intra`` (None: left to its variables) through ``setter``."""

    library: str
    inter: int
    interop_setter: str
    intra: int | None
    setter: str

    def __str__(self) -> str:
        from parinfo.profiles.applied_words import at_import_line

        return at_import_line(self)


@record(frozen=True)
class Applied:
    """What ``parinfo.apply()`` did: the ``plan`` it put in force, each setting made (``applied``)
    or left out (``skipped``), each count read back not in force (``not_in_force``: empty when
    every count took effect), where per-thread limits reached (``threads``) and what is set at a
    framework's import (``at_import``)."""

    plan: Plan
    applied: tuple[Done, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    not_in_force: tuple[Drift | Gap, ...] = ()
    threads: tuple[Reach, ...] = ()
    at_import: tuple[AtImport, ...] = ()

    def lines(self) -> dict[str, list[str]]:
        """Each list as its lines, by the names above (the plan left out)."""
        return {"applied": [str(d) for d in self.applied], "skipped": [str(s) for s in self.skipped],
                "not_in_force": [str(n) for n in self.not_in_force], "threads": [str(t) for t in self.threads],
                "at_import": [str(a) for a in self.at_import]}

    def __str__(self) -> str:
        from parinfo.profiles.applied_words import applied_text

        return applied_text(self)
