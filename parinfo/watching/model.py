"""What one sample says: a process tree's (or a container's) CPU use over one interval, as typed data.

The sampler (:mod:`parinfo.watching.sample`) makes these from two readings; the verdict
(:mod:`parinfo.watching.verdict`) reads them. Both import them from here, so neither needs the other.
"""
from __future__ import annotations

from dataclasses import field

from parinfo.machine.pressure import Throttling
from parinfo.process.spin import SpinEvidence
from parinfo.records.convert import OMIT_NONE
from parinfo.records.record import record
from parinfo.records.source import Source


@record(frozen=True)
class GroupUse:
    """The threads of one group (same name but for a worker number) over the interval."""

    name: str
    threads: int
    cpu_percent: float  # 100 = one CPU busy for the whole interval
    runnable: float  # threads on a CPU or waiting for one, on average
    involuntary: int  # context switches the scheduler forced


@record(frozen=True)
class ThrottleUse:
    """Throttling of the cgroup level that throttled most during the interval."""

    cgroup: str
    quota: float
    periods: int
    throttled: int
    throttled_usec: int
    percent_periods: float  # throttled periods / periods, percent
    percent_time: float  # time held back / interval, percent (can pass 100: it sums over CPUs)


@record(frozen=True)
class InsideCount:
    """One count in force read inside a watched process (``watch --attach``) and the source that
    decided it, as the process's own report gives them; ``owner`` and ``filepath`` tell copies of
    one library apart (None for counts that are not a native pool's)."""

    library: str
    count: int | None
    source: Source
    owner: str | None = None
    filepath: str | None = None


@record(frozen=True)
class ProcessCounts:
    """The counts of one watched process at the end of the interval (``watch --attach``): read
    inside it (``attached``; ``how``: the means and the round trip) with ``counts``, or not, and
    ``how`` says why (its attach's one line, or the time for the tree's attaches spent)."""

    pid: int
    attached: bool
    how: str
    counts: tuple[InsideCount, ...] = ()


@record(frozen=True)
class Sample:
    """What one process tree (or, with ``pid`` None, the container parinfo runs in) did during
    ``interval`` seconds ending at ``time``. ``throttling`` is None when no quota applies, and the
    pressure fields hold "unknown (why)" when the kernel or the cgroup gives no figures. ``inside``
    (``watch --attach`` only, else None): the counts in force of each watched process, read inside
    it at the end of the interval."""

    time: float
    interval: float
    pid: int | None
    processes: int
    threads: int
    usable_cpus: int
    quota: float | None
    cpu_percent: float
    runnable: float
    running_now: int
    involuntary: int
    groups: tuple[GroupUse, ...]
    throttling: ThrottleUse | None
    throttling_unknown: str | None
    pressure_some: float | str  # percent of the interval some task waited for a CPU (the machine)
    pressure_cgroup_some: float | str
    verdict: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    inside: tuple[ProcessCounts, ...] | None = field(default=None, metadata=OMIT_NONE)  # watch --attach only
    #: the cumulative counters of the level that throttled most, when the interval has no figures of its own
    throttling_since_start: Throttling | None = field(default=None, metadata=OMIT_NONE)
    #: the threads' run-queue wait (schedstat's second field: runnable, not on a CPU) summed over them,
    #: percent of the interval; it holds time a quota held them back too: ``throttling.percent_time``
    #: tells that part apart (the rest is contention for CPUs)
    run_queue_wait_percent: float | None = field(default=None, metadata=OMIT_NONE)
    #: the watched process's pool threads that stayed runnable with no work to do (they spin between
    #: regions), whose runtime, and the throttling over the same interval (``watch --pid`` only)
    spin: SpinEvidence | None = field(default=None, metadata=OMIT_NONE)
