"""The words of what ``parinfo.apply()`` did: one line for each record of
:mod:`parinfo.profiles.applied` (its ``str()``), and the text of a whole :class:`Applied`.

These are the lines ``apply()`` returned before it returned records; tests and docs quote them.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from parinfo.machine.cpulist import format_cpu_list
from parinfo.profiles.applied import Reason, Where
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.profiles.applied import Applied, AtImport, Done, Drift, Reach, Skipped, Value

# What a user does for the threads a per-thread limit does not reach.
_FIX_OPENMP = ("call parinfo.apply() or threadpoolctl.threadpool_limits({n}, user_api='openmp') at the "
               "start of each thread that runs OpenMP work (e.g. as a thread pool's initializer), or set "
               "{var} before the process starts (parinfo apply PROFILE -- COMMAND): every thread reads it")


def _count_name(what: str) -> str:
    """``intra_op`` -> ``intra-op``."""
    return what.replace("_", "-")


def _cpus(value: Value | None) -> str:
    return format_cpu_list(value) if isinstance(value, tuple) else str(value)


def done_line(d: Done) -> str:
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
    if d.where is Where.AFFINITY:
        return f"affinity {_cpus(d.value)} for {plural(d.threads, 'thread')}"
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
    if s.where is Where.AFFINITY:
        return f"affinity {_cpus(s.value)} not set: {s.error}"
    return f"memory {s.value} not set: {s.error}"


def _numa_unknown(s: Skipped) -> str:
    return f"memory {s.value}: this machine's NUMA nodes are unknown; the policy is left as it is"


_SKIPPED: dict[Reason, Callable[[Skipped], str]] = {
    Reason.NOT_PRELOADABLE: _preload, Reason.USER_SET: _user_set, Reason.USER_VALUE_INVALID: _invalid,
    Reason.REFUSED: _refused, Reason.NUMA_UNKNOWN: _numa_unknown,
}


def skipped_line(s: Skipped) -> str:
    """One line for a setting left out, and why."""
    return _SKIPPED[s.reason](s)


def drift_line(d: Drift) -> str:
    """One line for a count read back that is not what the plan asked for."""
    if d.where is Where.RUNTIME:
        return f"runtime {_count_name(d.what)} count is {d.got} (from {d.source}), not {d.want}"
    if d.where is Where.POOL:
        return f"{d.what} runs {plural(d.got, 'thread')}, not {d.want}"
    if d.where is Where.FRAMEWORK:
        once = f" (set once, before {d.library}'s inter-op pool starts)" if d.what == "inter_op" else ""
        return f"{d.library} {_count_name(d.what)} count is {d.got}, not {d.want}{once}"
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


def reach_line(r: Reach) -> str:
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


def gap_line(r: Reach) -> str:
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


def at_import_line(a: AtImport) -> str:
    """What is set when the framework is imported."""
    calls = [f"{a.interop_setter}({a.inter})"] + ([f"{a.setter}({a.intra})"] if a.intra is not None else [])
    return (f"{a.library} is not imported yet: {' and '.join(calls)} when `import {a.library}` finishes, before "
            f"any op runs (a count {a.library} refuses then is a 'parinfo: not in force' line on stderr)")


def applied_text(a: Applied) -> str:
    """The whole result, one section per non-empty list."""
    out = [f"profile {a.plan.name} applied"]
    for name, lines in a.lines().items():
        if lines:
            out.append(f"{name.replace('_', ' ')}:")
            out += [f"  {line}" for line in lines]
    return "\n".join(out)
