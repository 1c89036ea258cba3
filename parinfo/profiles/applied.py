"""What ``parinfo.apply()`` did, as records: each setting made (:class:`Done`), each one left out
and why (:class:`Skipped`, with a :class:`Reason`), each count read back that is not what the plan
asked for (:class:`Drift`, :class:`Gap`), which threads a per-thread limit reached (:class:`Reach`)
and what waits for a framework's import (:class:`AtImport`), gathered in :class:`Applied`.

No sentence is stored: ``str()`` of a record makes its line when it is shown (the lines apply()
returned before it returned records; tests and docs quote them), and :meth:`Applied.lines` gives
every list as lines (the edge a fleet sends its workers' results through).
"""
from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING

from parinfo.machine.cpulist import format_cpu_list
from parinfo.records.record import record
from parinfo.safe_text import plural

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
    AT_USE = "at use"  # a variable a library reads when its pool or object is made (ONNX Runtime's sessions)
    FRAMEWORK = "framework"  # a framework's setters (torch.set_num_threads, ...)
    AFFINITY = "affinity"  # the CPUs of every thread of the process
    MEMORY = "memory"  # the calling thread's memory policy
    PRELOAD = "preload"  # a library preloaded at start-up (allocator, OpenMP runtime)
    NEW_THREADS = "new threads"  # every thread the program starts from now on (threads: every)


class Reason(enum.Enum):
    """Why a setting of the profile was not made."""

    USER_SET = "user set"  # a variable the user set stays in force (force=True overrides)
    USER_VALUE_INVALID = "user value invalid"  # the user's variable holds no valid count: left as it is
    NOT_PRELOADABLE = "not preloadable"  # a running process cannot change what it preloaded
    REFUSED = "refused"  # the library or the kernel refused; ``error`` is what it said
    NUMA_UNKNOWN = "numa unknown"  # this machine's NUMA nodes are unknown
    STARTED = "started"  # the library's pool started already and keeps its count; ``code`` says what would do it
    IN_CODE = "in code"  # only the program's own code sets it; ``code`` is the line

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
    the other running threads it did not (memory); ``when``: when a library reads the variable
    ``via`` names (AT_USE)."""

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
    when: str = ""

    def __str__(self) -> str:
        return _done_line(self)


@record(frozen=True)
class Skipped:
    """One setting left out: ``what`` and ``where`` as in :class:`Done`, the ``reason``, the
    profile's ``value``; ``variable`` and ``user_value``: the user's variable that decided it;
    ``now``: the count that stays; ``error``: what the library or the kernel said; ``at_import``:
    it concerns a framework's import still to come; ``via``: the framework's setter, when it
    follows the user's variable; ``path``, ``variables`` and ``launch``: for a
    preload, its file, the variables that come with it and the command that launches with it;
    ``code``: the line that sets it, for a count only code sets (or a pool that keeps its own)."""

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
    code: str | None = None

    def __str__(self) -> str:
        return _skipped_line(self)


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
        return _drift_line(self)


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
        return _reach_line(self)


@record(frozen=True)
class Gap:
    """A per-thread limit that does not reach every thread (``reach`` says which it did)."""

    reach: Reach

    def __str__(self) -> str:
        return _gap_line(self.reach)


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
        return _at_import_line(self)


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
        return _applied_text(self)


# -- the words, made when a record is shown -----------------------------------------------------

# What a user does for the threads a per-thread limit does not reach.
_FIX_OPENMP = ("put 'threads: every' in the profile (every thread started from then on gets it), give each "
               "thread pool initializer=parinfo.worker_initializer({n}), or set {var} before the process starts "
               "(parinfo apply PROFILE -- COMMAND): every thread reads it")


def _count_name(what: str) -> str:
    """``intra_op`` -> ``intra-op``."""
    return what.replace("_", "-")


def _cpus(value: Value | None) -> str:
    return format_cpu_list(value) if isinstance(value, tuple) else str(value)


def _done_line(d: Done) -> str:
    """One line for a setting made."""
    if d.where is Where.VARIABLE:
        forced = f" (overrode the user's {d.overrode!r}, force=True)" if d.overrode is not None else ""
        return f"{d.what}={d.value}{forced}"
    if d.where is Where.RUNTIME:
        if d.already:
            return f"runtime {_count_name(d.what)} count {d.value} (already in force, from {d.source})"
        return f"runtime {_count_name(d.what)} count {d.value}"
    if d.where is Where.POOL:
        return f"{d.what} limited to {d.value}" + (" in this thread" if d.per_thread else "")
    if d.where in (Where.MODULE, Where.FRAMEWORK):
        return f"{d.via}({d.value})"
    if d.where is Where.AT_USE:
        return f"{d.library}: {d.via}={d.value}, read {d.when}"
    if d.where is Where.AFFINITY:
        return f"affinity {_cpus(d.value)} for {plural(d.threads, 'thread')}"
    if d.where is Where.NEW_THREADS:
        return (f"limits ({d.what}) put into every thread started from now on, once at its start ({d.via}), "
                "for the libraries that keep them per thread")
    keep = "keeps its" if d.threads == 1 else "keep their"
    reach = (f"; {plural(d.threads, 'other thread')} already running {keep} own policy (the kernel sets it per "
             "thread: apply() before starting threads, or launch with parinfo apply P -- COMMAND)"
             if d.threads > 0 else "")
    return (f"memory {d.value} ({d.via}) for the calling thread and the threads and processes it starts from "
            f"now on{reach}")


def _preload(s: Skipped) -> str:
    also = f" (nor {', '.join(s.variables)})" if s.variables else ""
    kind = "malloc" if s.what == "allocator" else "OpenMP runtime"
    return (f"{s.what} {s.value} not preloaded{also}: a running process cannot change its {kind}; launch the "
            f"program with `{s.launch}` to preload {s.path}")


def _user_set(s: Skipped) -> str:
    if s.where is Where.VARIABLE:
        return f"{s.what}: kept {s.user_value!r} set by the user over the profile's {s.value!r} (force=True overrides)"
    if s.where is Where.RUNTIME:
        return f"runtime {_count_name(s.what)}: {s.variable} set by the user stays in force"
    if s.where is Where.POOL:
        return f"{s.what}: kept at {s.value} from {s.variable} set by the user"
    if s.at_import:
        return (f"{s.library} {_count_name(s.what)}: at import {s.library} follows {s.variable}={s.user_value!r} "
                "set by the user")
    return f"{s.via}({s.value}) from {s.variable} set by the user"


def _invalid(s: Skipped) -> str:
    if s.where is Where.POOL:
        return f"{s.what}: left at {s.now} ({s.variable}={s.user_value!r} set by the user is not a valid count)"
    return (f"{s.library} {_count_name(s.what)}: {s.variable}={s.user_value!r} set by the user is not a valid "
            f"count; {s.library}'s count left as it is")


def _refused(s: Skipped) -> str:
    if s.where is Where.POOL:
        return f"{s.what}: could not set {plural(s.value, 'thread')} ({s.error})"
    if s.where is Where.FRAMEWORK:
        return f"{s.library} {_count_name(s.what)} stays {s.now}: {s.error}"
    if s.where is Where.MODULE:
        return f"{s.via}({s.value}) refused, {s.library} stays {s.now}: {s.error}"
    if s.where is Where.AFFINITY:
        return f"affinity {_cpus(s.value)} not set: {s.error}"
    return f"memory {s.value} not set: {s.error}"


def _numa_unknown(s: Skipped) -> str:
    return f"memory {s.value}: this machine's NUMA nodes are unknown; the policy is left as it is"


def _started(s: Skipped) -> str:
    now = f" ({plural(s.now, 'thread')})" if s.now is not None else ""
    return f"{s.library}: its pool's count is fixed already{now}; for {s.value}: {s.code}"


def _in_code(s: Skipped) -> str:
    return f"{s.library}: no process-wide setting reaches it here; for {s.value}, in the program: {s.code}"


_SKIPPED: dict[Reason, Callable[[Skipped], str]] = {
    Reason.NOT_PRELOADABLE: _preload, Reason.USER_SET: _user_set, Reason.USER_VALUE_INVALID: _invalid,
    Reason.REFUSED: _refused, Reason.NUMA_UNKNOWN: _numa_unknown, Reason.STARTED: _started,
    Reason.IN_CODE: _in_code,
}


def _skipped_line(s: Skipped) -> str:
    """One line for a setting left out, and why."""
    return _SKIPPED[s.reason](s)


def _drift_line(d: Drift) -> str:
    """One line for a count read back that is not what the plan asked for."""
    if d.where is Where.RUNTIME:
        return f"runtime {_count_name(d.what)} count is {d.got} (from {d.source}), not {d.want}"
    if d.where is Where.POOL:
        return f"{d.what} runs {plural(d.got, 'thread')}, not {d.want}"
    if d.where is Where.FRAMEWORK:
        once = f" (set once, before {d.library}'s inter-op pool starts)" if d.what == "inter_op" else ""
        return f"{d.library} {_count_name(d.what)} count is {d.got}, not {d.want}{once}"
    if d.where is Where.MODULE:
        return f"{d.library} count is {d.got}, not {d.want}"
    return f"affinity is {_listed(d.got)}, not {_listed(d.want)}"


def _listed(cpus: Value | None) -> str:
    """CPUs as the list they are read back as (``[0, 1]``)."""
    return str(list(cpus)) if isinstance(cpus, tuple) else str(cpus)


def _threads(names: tuple[str, ...], what: str = "other live thread") -> str:
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f"{plural(len(names), what)} ({shown})"


def _here(r: Reach) -> str:
    name, tid = r.thread
    here = f"this thread ({name}, tid {tid})"
    if r.pool_threads:
        here += f" and parinfo's own pool threads ({', '.join(r.pool_threads)}), each set in its own thread"
    if r.caller:
        here += f" and the {_threads(r.caller)} the caller limited"
    return here


def _reach_line(r: Reach) -> str:
    """Which threads a per-thread limit reached."""
    here = _here(r)
    if r.framework:
        line = (f"{r.framework} intra-op {r.count}: {here}, and every thread at its first parallel "
                f"{r.framework} op from now on ({r.framework} passes its count on)")
        if r.others:
            line += (f"; of the {_threads(r.others)}, any that already ran a parallel {r.framework} op (or read "
                     f"{r.framework}.get_num_threads()) keeps the count it had then: call "
                     f"{r.framework}.set_num_threads({r.count}) in it")
        return line
    start = "an unknown count" if r.start is None else str(r.start)
    line = (f"{r.pool}: {r.count} in {here} only (OpenMP limits are per thread); threads started from now on "
            f"start at {start}")
    return line + (f"; the {_threads(r.others)} keep their own count" if r.others else "")


def _gap_line(r: Reach) -> str:
    """What a per-thread limit does not reach, and what to do there."""
    from parinfo.process.libraries import LIBRARY_VARS

    start = "an unknown count" if r.start is None else str(r.start)
    gap = f"{r.pool} is limited to {r.count} in {_here(r)} only: threads started from now on run {start}"
    if r.others:
        gap += f", and the {_threads(r.others)} keep theirs ({start} unless they set one)"
    gap += "; " + _FIX_OPENMP.format(n=r.count, var=LIBRARY_VARS["openmp"][0])
    if r.busy:
        gap += (f"; parinfo's own pool threads ({', '.join(r.busy)}) were busy: each sets the limit in its own "
                "thread before its next job")
    return gap


def _at_import_line(a: AtImport) -> str:
    """What is set when the framework is imported."""
    calls = [f"{a.interop_setter}({a.inter})"] + ([f"{a.setter}({a.intra})"] if a.intra is not None else [])
    return (f"{a.library} is not imported yet: {' and '.join(calls)} when `import {a.library}` finishes, before "
            f"any op runs (a count {a.library} refuses then is a 'parinfo: not in force' line on stderr)")


def _applied_text(a: Applied) -> str:
    """The whole result, one section per non-empty list."""
    out = [f"profile {a.plan.name} applied"]
    for name, lines in a.lines().items():
        if lines:
            out.append(f"{name.replace('_', ' ')}:")
            out += [f"  {line}" for line in lines]
    return "\n".join(out)
