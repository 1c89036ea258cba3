"""What a tune is asked to do (:class:`TuneOptions`), checked and resolved on a machine (:class:`Plan`).

``parinfo.tune(...)`` keyword arguments and ``parinfo tune`` options map one to one onto
:class:`TuneOptions`; :func:`resolve` checks every value against the machine and returns the
:class:`Plan` the sweep runs: the workload, the ranges searched, and how each point is timed.
Every bad value is a UsageError with one line naming the option.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from parinfo.errors import UsageError
from parinfo.machine.checks import shown
from parinfo.records.record import record
from parinfo.tuning import choices, search, workloads
from parinfo.tuning.checks import check_int
from parinfo.tuning.measure import Settings
from parinfo.tuning.workloads import Workload

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

OBJECTIVES = ("latency", "throughput")
MAX_COUNT_FACTOR = 64  # counts above 64 x logical CPUs are refused as a typo


@record(frozen=True)
class TuneOptions:
    """Everything a tune can be asked; the defaults are ``parinfo tune``'s."""

    workload: str | None = None  # a name in workloads.BUILTIN; None: workloads.DEFAULT
    objective: str = "latency"
    framework: str = "numpy"
    size: int = 1024
    stmt: str | None = None
    setup: str | None = None
    module: str | None = None
    command: Sequence[str] | None = None
    min_threads: int = 1
    max_threads: int | None = None  # default: the usable CPUs
    min_inter: int = 1
    max_inter: int | None = None
    repeats: int = 5
    warmup: int = 1
    min_time: float = 0.05
    timeout: float = 600.0
    in_process: bool = False
    exhaustive: bool = False
    confirm: bool = True
    margin: float = search.DEFAULT_MARGIN
    check_noise: bool = True
    allocator: str | Sequence[str] | None = None  # choices to measure at the best counts: "default,jemalloc"
    openmp: str | Sequence[str] | None = None  # likewise: "default,intel"


@record(frozen=True)
class Plan:
    """A checked tune: the workload, the ranges to search, and how each point is timed."""

    options: TuneOptions
    workload: Workload
    settings: Settings
    mode: str  # "subprocess" | "in-process" | "command"
    pairs: bool  # points are inter x intra pairs (else intra-op counts, inter-op 1)
    concurrent: bool  # inter = concurrent requests (throughput) rather than the workload's inter-op pool
    intra: tuple[int, int]
    inter: tuple[int, int]
    max_product: int  # the most threads one point may use (inter x intra)
    usable_cpus: int
    choices: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (allocator|openmp, words with default first)

    def candidate_count(self) -> int:
        """How many points the search could measure."""
        if self.pairs and self.concurrent:
            return len(search.pair_candidates(self.max_product, self.intra, self.inter))
        return (self.intra[1] - self.intra[0] + 1) * (self.inter[1] - self.inter[0] + 1 if self.pairs else 1)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _settings(o: TuneOptions) -> Settings:
    repeats = check_int("--repeats", o.repeats)
    warmup = check_int("--warmup", o.warmup, 0)
    if not _finite(o.min_time) or o.min_time < 0:
        raise UsageError(f"--min-time must be a finite number of seconds >= 0, got {o.min_time!r}")
    if not _finite(o.timeout) or o.timeout <= 0:
        raise UsageError(f"--timeout must be a finite number of seconds > 0, got {o.timeout!r}")
    return Settings(warmup=warmup, repeats=repeats, min_time=float(o.min_time), timeout=float(o.timeout))


def _ranges(o: TuneOptions, facts: MachineFacts, w: Workload) -> tuple[tuple[int, int], tuple[int, int]]:
    usable = facts.usable_cpus
    cap = MAX_COUNT_FACTOR * (facts.logical_cpus or usable)
    min_threads = check_int("--min", o.min_threads)
    max_threads = usable if o.max_threads is None else check_int("--max", o.max_threads)
    if max_threads > cap:
        raise UsageError(f"--max {max_threads} is more than {MAX_COUNT_FACTOR} x the {facts.logical_cpus} "
                         f"logical CPUs; use at most {cap}")
    if min_threads > max_threads:
        raise UsageError(f"--min {min_threads} is above --max {max_threads}: nothing to measure "
                         f"(this machine has {usable} usable CPUs)")
    min_inter = check_int("--min-inter", o.min_inter)
    max_inter = o.max_inter
    if max_inter is not None:
        max_inter = check_int("--max-inter", max_inter)
        if min_inter > max_inter:
            raise UsageError(f"--min-inter {min_inter} is above --max-inter {max_inter}: nothing to measure")
    if max_inter is None and o.objective == "latency" and (o.in_process or not w.may_fork()):
        max_inter = min_inter  # one request at a time whose work never forks: nothing for inter-op to run
    return (min_threads, max_threads), (min_inter, min(max_inter or max_threads, max_threads))


def _mode(o: TuneOptions, w: Workload) -> str:
    if w.whole_process:
        if o.in_process:
            raise UsageError("--in-process cannot time a command: it runs in its own process")
        return "command"
    if not o.in_process:
        return "subprocess"
    if w.uses_interop:
        raise UsageError("--in-process cannot sweep the ensemble workload: the inter-op count is set once "
                         "per process; drop --in-process")
    if o.framework == workloads.TORCH and w.kind in workloads.BUILTIN:
        import torch  # noqa: F401 - asked for: the in-process torch workload needs it
    return "in-process"


def resolve(o: TuneOptions, facts: MachineFacts) -> Plan:
    """Check ``o`` on the machine ``facts`` describes and return the plan; UsageError when it cannot run."""
    if o.objective not in OBJECTIVES:
        raise UsageError(f"--objective '{shown(o.objective)}': use latency or throughput")
    w = workloads.choose(o.workload, o.framework, o.size, o.stmt, o.setup, o.module, o.command)
    settings = _settings(o)
    intra, inter = _ranges(o, facts, w)
    concurrent = o.objective == "throughput"
    pairs = concurrent or w.uses_interop or inter != (1, 1)
    if concurrent and intra[0] * inter[0] > intra[1]:
        raise UsageError(f"--min {intra[0]} x --min-inter {inter[0]} does not fit --max {intra[1]} "
                         f"(the product of inter-op and intra-op threads must fit)")
    mode = _mode(o, w)
    if mode == "in-process" and pairs and not concurrent:
        raise UsageError("--in-process cannot vary the inter-op count: it is set once per process; drop "
                         "--in-process, or --min-inter/--max-inter")
    return Plan(options=o, workload=w, settings=settings, mode=mode, pairs=pairs, concurrent=concurrent,
                intra=intra, inter=inter, max_product=intra[1], usable_cpus=facts.usable_cpus,
                choices=_choices(o, mode))


def _choices(o: TuneOptions, mode: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The allocator and OpenMP runtime choices to measure, checked (known, installed)."""
    asked = [(key, given) for key, given in (("allocator", o.allocator), ("openmp", o.openmp)) if given is not None]
    if asked and mode == "in-process":
        raise UsageError(f"{choices.OPTIONS[asked[0][0]]} needs trials in fresh processes: a library is preloaded "
                         f"when a process starts; drop --in-process")
    return tuple((key, choices.check(key, given)) for key, given in asked)
