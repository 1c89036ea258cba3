"""The sampler: a process's (or a container's) CPU use over one interval, made from two readings
of cumulative counters.

A :class:`Reading` is one instant: every thread's CPU and wait time, the cgroup's throttling
counters, the pressure totals. A :class:`~parinfo.watching.model.Sample` is the difference of two
readings divided by the time between them: what happened during the interval. Reading costs only
file reads under /proc and the cgroup tree: the watched process is never stopped, traced or signalled.
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from parinfo.errors import UsageError
from parinfo.machine.cgroup_use import cgroup_use
from parinfo.machine.pressure import (
    CpuCounters,
    Pressure,
    PressureFacts,
    Throttling,
    cpu_counters,
    cpu_pressure,
)
from parinfo.machine.procfs import Proc
from parinfo.machine.topology import REREAD_S
from parinfo.process.tasks import (
    NoAccess,
    NotAProcess,
    ProcessGone,
    ThreadStat,
    gone,
    thread_stats,
)
from parinfo.process.threads import thread_group
from parinfo.records.record import record
from parinfo.records.source import unknown as unknown_source
from parinfo.records.unknown import Unknown, in_words
from parinfo.watching.model import GroupUse, InsideCount, ProcessCounts, Sample, ThrottleUse
from parinfo.watching.verdict import verdict

if TYPE_CHECKING:
    from parinfo.diagnostics.attached import Inside
    from parinfo.process.spin import SpinEvidence


@record(frozen=True)
class Reading:
    """Cumulative counters at one instant (monotonic ``clock`` in seconds). For the container view
    (pid None): ``usage_ns``, the cgroup's own CPU time (or why not), and ``observer_ns``, parinfo's
    own, which is in it but left out of the view; both None when a process is watched."""

    clock: float
    threads: dict[tuple[int, int], ThreadStat]  # (pid, tid) -> stat
    processes: int
    counters: CpuCounters
    pressure: PressureFacts
    usage_ns: int | Unknown | None = None
    observer_ns: int | None = None


def _cpu_ns(stats: list[ThreadStat]) -> int:
    return sum(t.cpu_ns for t in stats)


class Sampler:
    """Takes readings of ``pid`` (and with ``children`` its descendants) and turns two consecutive
    readings into a :class:`Sample`. ``pid`` None watches the container: the CPU cgroup parinfo runs
    in, its own CPU time and the threads of its processes (parinfo's own left out), never the machine's.

    With ``attach`` (seconds; ``pid`` needed), each sample also carries the counts in force of the
    process (with ``children``: of each CPython 3.14+ process of the tree, all within ``attach``
    seconds) read inside it through ``sys.remote_exec`` (:mod:`parinfo.outside.attach`), as its own
    report gives them. The first reading attaches too: a process that cannot be attached to (an
    older Python, remote debugging off, not permitted...) raises its one-line AttachError then,
    before any sample; a later attach that fails (its main thread in a long call into C) leaves that
    sample's counts unread and says why. A tree never raises: each process says how it was read."""

    def __init__(self, pid: int | None, *, children: bool = False, root: str = "/",
                 attach: float | None = None) -> None:
        if attach is not None:
            from parinfo.machine.checks import seconds
            from parinfo.outside.attach import MAX_TIMEOUT

            if pid is None:
                raise UsageError("attach needs the pid of the process to read from inside")
            attach = seconds(attach, "timeout", 0.1, MAX_TIMEOUT)
        self.attach = attach
        self.pid, self.children, self.root = pid, children, root
        # the watched process: its first stat is its identity, so a pid the kernel gives to a new
        # process once it has exited is never taken for it
        self.proc = None if pid is None else Proc.of(pid, root)
        if self.proc is not None:
            self.proc.check()
        self._facts_at = 0.0
        self.usable: int = 1
        self.quota: float | None = None
        self._follow_facts()
        self.last: Reading | None = None
        self.gone = False  # the watched process has exited: its pid is never read again

    def _follow_facts(self) -> None:
        """Read the usable CPUs and quota again once :data:`REREAD_S` old: a quota changed under a
        long watch shows in its next samples."""
        from parinfo.machine.topology import machine_facts

        now = time.monotonic()
        if now - self._facts_at >= REREAD_S:
            facts = machine_facts(self.root, self.proc)
            self.usable, self.quota, self._facts_at = facts.usable_cpus, facts.quota, now

    def exited(self) -> bool:
        """True once the watched process has exited (a zombie has too; a process whose main thread
        exited while its threads run on has not); False for the container view. Costs one read of
        its stat between samples; once true, stays true."""
        if self.proc is not None and not self.gone:
            try:
                self.proc.check()
            except (ProcessGone, NotAProcess):
                self.gone = True
        return self.gone

    def read(self) -> Reading:
        """One reading; ProcessGone when the watched process has ended."""
        if self.gone:
            raise gone(self.pid or 0)
        try:
            return self._read()
        except ProcessGone:
            self.gone = True
            raise

    def _read(self) -> Reading:
        threads: dict[tuple[int, int], ThreadStat] = {}
        if self.proc is not None:
            self.proc.stat()  # ProcessGone when the pid now names another process
        try:
            self._follow_facts()
        except UsageError:
            raise gone(self.pid or 0) from None
        usage: int | Unknown | None = None
        observer: int | None = None
        if self.proc is not None:
            members = [self.proc]
            if self.children:
                from parinfo.outside.remote import children

                members += children(self.proc)
        else:
            use = cgroup_use(self.root)
            usage, members = use.usage_ns, _members(use.pids, self.root)
            observer = _cpu_ns(thread_stats(Proc.of(None, self.root)))
        processes = self._add_threads(members, threads)
        counters = cpu_counters(self.root, self.proc)
        pressure = cpu_pressure(self.root, self.proc)
        if self.proc is not None and counters.unknown and not self.proc.exists():
            raise gone(self.proc.pid or 0)
        return Reading(time.monotonic(), threads, processes, counters, pressure, usage, observer)

    def _add_threads(self, members: list[Proc], threads: dict[tuple[int, int], ThreadStat]) -> int:
        """Put each member's threads in ``threads``; the number of members read. The watched process
        gone raises ProcessGone; any other member that ended or cannot be read is left out."""
        processes = 0
        for i, member in enumerate(members):
            try:
                stats = thread_stats(member)
            except (ProcessGone, NoAccess):
                if i == 0 and self.proc is not None:
                    raise
                continue
            processes += 1
            threads.update(((member.pid or 0, t.tid), t) for t in stats)
        return processes

    def sample(self) -> Sample | None:
        """A new reading turned into a Sample against the previous one (None on the first call)."""
        now = self.read()
        before, self.last = self.last, now
        inside = self.inside(first=before is None) if self.attach is not None else None
        if before is None:
            return None
        sample = self.between(before, now)
        return sample if inside is None else replace(sample, inside=inside)

    def inside(self, first: bool = False) -> tuple[ProcessCounts, ...]:
        """The counts in force of the watched process (with ``children``, of each process of its
        tree) read inside, within :attr:`attach` seconds in all. ``first``: a single process that
        cannot be attached to raises its AttachError (the watch cannot give what was asked)."""
        from parinfo.diagnostics.attached import read_process, read_tree

        assert self.pid is not None and self.proc is not None and self.attach is not None
        if self.children:
            from parinfo.outside.remote import children

            tree = read_tree([self.proc, *children(self.proc)], self.attach, self.root)
            return tuple(_counts(r.pid, r.attached, r.how, tree.inside.get(r.pid)) for r in tree.reads)
        try:
            read = read_process(self.proc, self.attach, self.root)
        except UsageError as exc:
            if first:
                raise
            return (_counts(self.pid, False, f"not attached: {exc}", None),)
        return (_counts(self.pid, True, read.read, read),)

    def between(self, a: Reading, b: Reading) -> Sample:
        dt = max(b.clock - a.clock, 1e-6)
        groups: dict[str, list[float]] = {}
        total_cpu = total_run = total_wait = 0.0
        total_inv = running = 0
        for key, t in b.threads.items():
            prev = a.threads.get(key)
            if prev is not None and t.cpu_ns < prev.cpu_ns:
                prev = None  # a pid and tid given to a new thread
            cpu = (t.cpu_ns - prev.cpu_ns) if prev else 0
            wait = (t.wait_ns - prev.wait_ns) if prev and t.wait_ns is not None and prev.wait_ns is not None else 0
            inv = (t.involuntary - prev.involuntary) if prev and t.involuntary is not None \
                and prev.involuntary is not None else 0
            run = (cpu + wait) / 1e9 / dt
            name = "main thread" if key[1] == key[0] and key[0] == self.pid else thread_group(t.name)
            g = groups.setdefault(name, [0, 0.0, 0.0, 0])
            g[0] += 1
            g[1] += cpu / 1e9 / dt * 100
            g[2] += run
            g[3] += inv
            total_cpu += cpu / 1e9 / dt * 100
            total_run += run
            total_wait += max(0, wait) / 1e9 / dt * 100
            total_inv += max(0, inv)
            running += t.state == "R"
        uses = tuple(sorted((GroupUse(n, int(v[0]), round(v[1], 1), round(v[2], 2), int(v[3]))
                             for n, v in groups.items()), key=lambda g: (-g.cpu_percent, -g.threads, g.name)))
        throttle, why = throttle_use(a.counters, b.counters, dt)
        notes = b.counters.notes
        if self.pid is None:
            total_cpu, note = _cgroup_cpu(a, b, dt, total_cpu)
            notes += (note,) if note else ()
        sample = Sample(
            time=time.time(), interval=round(dt, 3), pid=self.pid, processes=b.processes,
            threads=len(b.threads), usable_cpus=self.usable, quota=self.quota,
            cpu_percent=round(total_cpu, 1), runnable=round(total_run, 2), running_now=running,
            involuntary=total_inv, groups=uses, throttling=throttle, throttling_unknown=why,
            pressure_some=in_words(pressure_percent(a.pressure.system, b.pressure.system, dt)),
            pressure_cgroup_some=in_words(pressure_percent(a.pressure.cgroup, b.pressure.cgroup, dt)),
            notes=notes, throttling_since_start=_since_start(throttle, b.counters),
            run_queue_wait_percent=round(total_wait, 1), spin=self._spin(a, b, dt),
        )
        return _with_verdict(sample, verdict(sample))


    def _spin(self, a: Reading, b: Reading, dt: float) -> SpinEvidence | None:
        """The watched process's idle threads that spun over the interval (:func:`parinfo.process.spin.spin_in`)."""
        from parinfo.process.spin import spin_in

        pid, proc = self.pid, self.proc
        if pid is None or proc is None:
            return None
        before = [t for (p, _), t in a.threads.items() if p == pid]
        after = [t for (p, _), t in b.threads.items() if p == pid]
        return spin_in(proc, before, after, dt, (a.counters, b.counters))


def _members(pids: tuple[int, ...] | Unknown, root: str) -> list[Proc]:
    """The handles of a cgroup's processes but parinfo's own (it watches; it is not watched)."""
    if isinstance(pids, Unknown):
        return []
    me = os.getpid()
    return [Proc.of(p, root) for p in pids if p != me]


def _cgroup_cpu(a: Reading, b: Reading, dt: float, threads_cpu: float) -> tuple[float, str | None]:
    """The container view's CPU use over ``dt`` (percent of one CPU): the cgroup's own counter less
    parinfo's own CPU time; else the sum over the threads read, and a note that says why."""
    if isinstance(a.usage_ns, int) and isinstance(b.usage_ns, int):
        own = (b.observer_ns or 0) - (a.observer_ns or 0)
        return max(0.0, (b.usage_ns - a.usage_ns - max(0, own)) / 1e9 / dt * 100), None
    why = b.usage_ns if isinstance(b.usage_ns, Unknown) else a.usage_ns
    return threads_cpu, f"CPU use summed over the threads read (threads that ended are missed): the cgroup's " \
                        f"CPU time is {why}"


def _since_start(interval: ThrottleUse | None, counters: CpuCounters) -> Throttling | None:
    """The throttling counters since the cgroup began, when this interval has no figures of its own
    (a quota level not read at the interval's start, or no period ended in it): evidence at once."""
    if counters.unknown or not counters.levels or (interval is not None and interval.periods > 0):
        return None
    return counters.worst


def _counts(pid: int, attached: bool, how: str, inside: Inside | None) -> ProcessCounts:
    """One process's counts in a sample: the rows of its own report's "Thread counts in force"."""
    rows = inside.counts() if inside is not None else []
    return ProcessCounts(pid, attached, how, tuple(
        InsideCount(r.library, r.count, r.source if r.source is not None else unknown_source("not read"),
                    r.owner, r.filepath) for r in rows))


def _with_verdict(sample: Sample, text: str) -> Sample:
    return replace(sample, verdict=text)


def throttle_use(a: CpuCounters, b: CpuCounters, dt: float) -> tuple[ThrottleUse | None, str | None]:
    """The level of ``b`` that throttled most since reading ``a``, ``dt`` seconds before (None when no
    level has a quota), or (None, "unknown (why)")."""
    if b.unknown:
        return None, f"unknown ({b.unknown})"
    t = b.since(a)
    if t is None:
        return None, None
    return ThrottleUse(t.cgroup, t.quota, t.periods, t.throttled, t.throttled_usec,
                       round(100 * t.throttled / t.periods, 1) if t.periods > 0 else 0.0,
                       round(100 * t.throttled_usec / 1e6 / dt, 1)), None


def pressure_percent(a: Pressure | Unknown, b: Pressure | Unknown, dt: float) -> float | Unknown:
    """The percent of ``dt`` seconds in which some task waited for a CPU, from two pressure readings
    (Unknown when either is: the later one's reason first)."""
    if isinstance(b, Unknown):
        return b
    if isinstance(a, Unknown):
        return a
    return round(min(100.0, 100 * (b.some_total_usec - a.some_total_usec) / 1e6 / dt), 1)


#: The shortest and longest interval between samples, in seconds.
MIN_INTERVAL, MAX_INTERVAL = 0.05, 3600.0


def check_interval(interval: object, what: str = "interval") -> float:
    """``interval`` (a number, or decimal text as typed after the option ``what``) as seconds;
    UsageError unless it is a number from MIN_INTERVAL to MAX_INTERVAL."""
    from parinfo.machine.checks import seconds

    return seconds(interval, what, MIN_INTERVAL, MAX_INTERVAL)


def samples(sampler: Sampler, interval: float, count: int | None = None) -> Iterator[Sample]:
    """Yield ``count`` samples (None: without end) of ``sampler``, one every ``interval`` seconds;
    stop when the watched process ends."""
    sampler.sample()
    n = 0
    next_at = time.monotonic() + interval
    while count is None or n < count:
        time.sleep(max(0.0, next_at - time.monotonic()))
        next_at = max(next_at + interval, time.monotonic())
        try:
            sample = sampler.sample()
        except ProcessGone:
            return
        if sample is not None:
            n += 1
            yield sample


def watch(pid: int | None = None, interval: float = 1.0, *, children: bool = False,
          count: int | None = None, attach: bool = False, timeout: float | None = None) -> Iterator[Sample]:
    """Yield a :class:`Sample` every ``interval`` seconds for process ``pid`` (default: this one;
    with ``children``, its whole tree), ``count`` times (None: until the process ends or the caller
    stops iterating). Reads /proc and the cgroup files only; the process is never stopped or traced.

    With ``attach`` (another CPython 3.14+ process), each sample also carries its counts in force
    read inside it through ``sys.remote_exec`` (``Sample.inside``), within ``timeout`` seconds (5 by
    default; with ``children``, for all of the tree's processes together): see :class:`Sampler`.

    Raises UsageError for a bad interval and ProcessGone (a UsageError) for a pid that names no
    process, and with ``attach`` the one-line AttachError of a process that cannot be attached to;
    when the process ends while watched, the iteration simply stops.
    """
    interval = check_interval(interval)
    if timeout is not None and not attach:
        raise UsageError("timeout applies to attach only (attach=True)")
    budget = None
    if attach:
        from parinfo.outside.attach import DEFAULT_TIMEOUT

        if pid is None or pid == os.getpid():
            raise UsageError("attach reads another process (pid=PID): this one's counts need no attach")
        budget = DEFAULT_TIMEOUT if timeout is None else timeout
    sampler = Sampler(os.getpid() if pid is None else pid, children=children, attach=budget)
    yield from samples(sampler, interval, count)
