"""Proof that each launched instance got what its plan says, read from outside after it started.

Each instance's expectations are a list of checks built from the Plan (:func:`checks_for`); each
check reads one thing through /proc (parinfo.machine.procfs, the one front for another process's
files) and returns a :class:`Reading`: what to show in its column, and one line when it is not what
the plan asked. :func:`table` prints one row per instance; :func:`problems` one line per instance
whose readings disagree. What an instance says about itself is hostile input: bounded reads,
"unknown (why)" on any failure, values escaped.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from parinfo.machine.cpulist import format_cpu_list, parse_cpu_list
from parinfo.machine.procfs import Proc
from parinfo.records.record import record
from parinfo.safe_text import plural, shorten

if TYPE_CHECKING:  # pragma: no cover
    from parinfo.launch.child import ChildEnv
    from parinfo.profiles.memory import Binding
    from parinfo.profiles.plan import InstancePlan, Plan

#: Seconds after an instance starts when it is read: long enough for a program to load its
#: libraries (numpy's take about 0.15 s), short enough to report while the job starts up.
CHECK_AFTER_S = 1.0
#: Exit status of ``parinfo apply --check`` when every instance succeeded but one did not get its plan.
EXIT_CHECK_FAILED = 3


@record(frozen=True)
class Reading:
    """What one check read: ``shown`` in its column, ``problem`` (one line) when it differs from the plan."""

    shown: str
    problem: str | None = None


class Check(Protocol):
    """One expectation of an instance, read from outside."""

    @property
    def column(self) -> str: ...

    def read(self, proc: Proc) -> Reading: ...


def _why(exc: Exception) -> Reading:
    return Reading(shorten(f"unknown ({exc})", 60))


@record(frozen=True)
class AffinityCheck:
    """The CPUs it may run on (Cpus_allowed_list of /proc/PID/status) are the plan's."""

    cpus: tuple[int, ...]
    column: str = "cpus"

    def read(self, proc: Proc) -> Reading:
        from parinfo.errors import UsageError

        try:
            got = tuple(parse_cpu_list(proc.status().get("Cpus_allowed_list", "")))
        except (UsageError, ValueError) as exc:
            return _why(exc)
        shown = format_cpu_list(got)
        if got != tuple(sorted(self.cpus)):
            return Reading(shown, f"CPUs {shown}, not {format_cpu_list(self.cpus)}")
        return Reading(shown)


@record(frozen=True)
class MemoryCheck:
    """The memory policy its mappings show (/proc/PID/numa_maps) is the one its binding set."""

    binding: Binding
    column: str = "memory"

    def read(self, proc: Proc) -> Reading:
        from parinfo.errors import UsageError
        from parinfo.machine.mempolicy import memory_policy

        try:
            got = memory_policy(proc, proc.root)
        except UsageError as exc:
            return _why(exc)
        shown = shorten(got.text, 60)
        if got.policy is None:
            return Reading(shown, f"memory policy {shown}, not {self.binding.expected}")
        if got.text != self.binding.expected:
            return Reading(shown, f"memory {shown}, not {self.binding.expected}")
        return Reading(shown)


@record(frozen=True)
class VariablesCheck:
    """Its launch environment (/proc/PID/environ) holds the variables the launcher gave it."""

    want: Mapping[str, str]
    column: str = "variables"

    def read(self, proc: Proc) -> Reading:
        from parinfo.errors import UsageError

        try:
            env = proc.environ()
        except UsageError as exc:
            return _why(exc)
        wrong = [name for name, value in self.want.items() if env.get(name) != value]
        if not wrong:
            return Reading(f"{len(self.want)} as set")
        said = ", ".join(f"{name}={shorten(repr(env[name]), 24) if name in env else 'unset'} (not "
                         f"{shorten(repr(self.want[name]), 24)})" for name in wrong[:3])
        more = f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""
        return Reading(f"{len(wrong)} of {len(self.want)} differ", f"variables {said}{more}")


@record(frozen=True)
class CountsCheck:
    """The counts of the thread pools it has loaded, read in its memory as ``parinfo show --pid``
    does, are those its variables ask for (pools not loaded yet are not counted)."""

    env: Mapping[str, str]
    column: str = "counts"

    def read(self, proc: Proc) -> Reading:
        from parinfo.errors import UsageError
        from parinfo.machine.topology import machine_facts
        from parinfo.outside import remote
        from parinfo.process import libraries as reg
        from parinfo.process.variables import count_from_env

        try:
            maps = remote.maps_text(proc)
            rows = remote.loaded_runtimes(proc, maps)
            remote.read_counts(proc, rows, maps, dict(self.env), machine_facts(proc.root, proc))
        except UsageError as exc:
            return _why(exc)
        shown, wrong = [], []
        for row in rows:
            if row.num_threads is None or row.duplicate_of is not None:
                continue
            rec = reg.find(row.library)
            var = None if rec is None else (rec.profile_var or (rec.precedence[0] if rec.precedence else None))
            want = count_from_env(var, self.env) if var else None
            shown.append(f"{row.library} {row.num_threads}")
            if want is not None and row.num_threads != want:
                wrong.append(f"{row.library} runs {plural(row.num_threads, 'thread')}, not {want} ({var})")
        if not shown:
            return Reading("none read yet" if not rows else "not readable")
        return Reading(", ".join(shown), "; ".join(wrong) or None)


@record(frozen=True)
class PreloadCheck:
    """Each library the plan preloads (allocator, OpenMP runtime) is mapped in it (/proc/PID/maps):
    the loader put it there before anything of the program, so a missing one was never loaded."""

    files: tuple[tuple[str, str], ...]  # (choice, path) per preloaded library, in LD_PRELOAD order
    column: str = "preloaded"

    def read(self, proc: Proc) -> Reading:
        import os

        from parinfo.errors import UsageError
        from parinfo.outside.remote import maps_text
        from parinfo.process.pools import DELETED, loaded_objects

        try:
            text = maps_text(proc)
        except UsageError as exc:
            return _why(exc)
        mapped = {path.removesuffix(DELETED) for path in loaded_objects(text)}
        missing = [choice for choice, path in self.files
                   if path not in mapped and os.path.realpath(path) not in mapped]
        shown = ", ".join(choice for choice, _ in self.files if choice not in missing) or "none"
        if missing:
            return Reading(shown, f"{', '.join(missing)} not loaded (LD_PRELOAD: "
                                  f"{shorten(', '.join(p for c, p in self.files if c in missing), 80)})")
        return Reading(shown)


def checks_for(plan: Plan, child: ChildEnv, memory: Binding | None,
               instance: InstancePlan | None = None) -> list[Check]:
    """What one launched program of ``plan`` (instance ``instance``, or the one program) should hold,
    as checks in column order.
    """
    import os

    from parinfo.process.libraries import role_var

    cpus = instance.cpus if instance is not None else child.cpus or tuple(sorted(os.sched_getaffinity(0)))
    checks: list[Check] = [AffinityCheck(tuple(cpus))]
    if memory is not None and memory.nodes:
        checks.append(MemoryCheck(memory))
    names = [*plan.env, *(instance.env if instance is not None else ()),
             *(role_var(role) for role in ("profile", "instance", "instances"))]
    checks.append(VariablesCheck({n: child.env[n] for n in dict.fromkeys(names) if n in child.env}))
    checks.append(CountsCheck(dict(child.env)))
    preloaded = tuple((p.choice, p.path) for p in plan.preload if p.path)
    if preloaded:
        checks.append(PreloadCheck(preloaded))
    return checks


@record(frozen=True)
class Row:
    """One instance's line of the table (``index`` None: the one program of a plan without
    instances): its readings in column order, or why it was not read."""

    index: int | None
    pid: int
    readings: tuple[Reading, ...] = ()
    ended: bool = False


def read_instance(index: int | None, pid: int, checks: Sequence[Check]) -> Row:
    """Every check of one instance, read now; ``ended`` when it has gone before or while it was read."""
    from parinfo.errors import UsageError

    proc = Proc.of(pid)  # the door: every check reads this one handle
    try:
        proc.check()
    except UsageError:
        return Row(index, pid, ended=True)
    readings = tuple(check.read(proc) for check in checks)
    if not proc.same():
        return Row(index, pid, ended=True)
    return Row(index, pid, readings)


def table(rows: Sequence[Row], columns: Sequence[str]) -> list[str]:
    """The table, one line per instance, each line starting ``parinfo: `` (stderr is shared with them)."""
    head = ["instance", "pid", *columns, "result"]
    body = []
    for row in rows:
        if row.ended:
            cells = [_label(row), str(row.pid), *("-" for _ in columns), "ended before it was read"]
        else:
            bad = any(r.problem for r in row.readings)
            cells = [_label(row), str(row.pid), *(r.shown for r in row.readings),
                     "MISMATCH" if bad else "as planned"]
        body.append(cells)
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    what = "the program" if len(rows) == 1 and rows[0].index is None else "each instance"
    title = f"parinfo: {what} read back {CHECK_AFTER_S:g} s after it started (from /proc):"
    return [title, *("parinfo:   " + "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
                     for line in [head, *body])]


def _label(row: Row) -> str:
    return "-" if row.index is None else str(row.index)


def report(rows: Sequence[Row], columns: Sequence[str]) -> list[str]:
    """The table and the lines of programs that did not get their plan; nothing when every one has
    ended (there was nothing left to read)."""
    if all(row.ended for row in rows):
        return []
    return [*table(rows, columns), *problems(rows)]


def problems(rows: Sequence[Row]) -> list[str]:
    """One line per instance whose readings are not what its plan says."""
    out = []
    for row in rows:
        found = [r.problem for r in row.readings if r.problem]
        if found:
            what = "the program" if row.index is None else f"instance {row.index}"
            out.append(f"parinfo: {what} (pid {row.pid}) did not get its plan: {'; '.join(found)}")
    return out
