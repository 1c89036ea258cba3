"""What a tune found, as data: the measured curve, the winner, what was skipped and why, what disturbed it.

The writers (parinfo.tuning.writers: JSON, profile) and the plots (parinfo.tuning.plot) read a
:class:`TuneOutcome`; :class:`parinfo.tuning.result.TuneResult`, the public type, adds the methods
that call them.
"""
from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any

from parinfo.machine.cpulist import format_cpu_list
from parinfo.records.record import record
from parinfo.tuning.choices import ChoiceSearch
from parinfo.tuning.measure import Settings
from parinfo.tuning.search import Point, SearchResult, Stats
from parinfo.tuning.workloads import Workload

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

NOISY_SPREAD = 0.10  # a point whose relative spread exceeds this is called noisy


@record(frozen=True)
class MachineSummary:
    """The machine a tune ran on, as recorded in its JSON and profile comments."""

    cpu_model: str
    logical_cpus: int | None  # None: unknown (MachineFacts.unknown says why)
    physical_cores: int | None
    usable_cpus: int
    usable_physical_cores: int
    affinity: str

    @classmethod
    def of(cls, facts: MachineFacts) -> MachineSummary:
        """Summarise a ``MachineFacts``."""
        return cls(cpu_model=cpu_model(), logical_cpus=facts.logical_cpus,
                   physical_cores=facts.physical_cores, usable_cpus=facts.usable_cpus,
                   usable_physical_cores=facts.usable_physical_cores,
                   affinity=format_cpu_list(facts.affinity) if facts.affinity else "unknown")


def cpu_model() -> str:
    """The CPU's brand and kernel-relevant ISA, or "unknown (why)"."""
    from parinfo.machine.cpuid import cpu_identity

    try:
        ident = cpu_identity()
    except Exception as exc:  # a description, never a failure
        return f"unknown ({exc})"
    brand = ident.brand or f"unknown ({ident.unknown.get('brand', 'no brand')})"
    extra = [x for x in (ident.arch, " ".join(ident.isa)) if x]
    return brand + (f" ({', '.join(extra)})" if extra else "")


@record
class TuneOutcome:
    """The measured curve, the winner, what was skipped and why, and what may have disturbed it."""

    spec: Workload
    workload: str  # the workload described in one line
    objective: str
    mode: str  # "subprocess" | "in-process" | "command"
    pairs: bool  # points are inter x intra pairs (else intra-op counts, one request at a time)
    concurrent: bool  # inter = concurrent requests (throughput) rather than the workload's inter-op pool
    machine: MachineSummary
    search: SearchResult
    settings: Settings
    in_force: dict[Point, Any] = field(default_factory=dict)
    noise: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # counts asked for but not in force
    choices: list[ChoiceSearch] = field(default_factory=list)  # allocator / OpenMP runtime trials at the best counts
    started: str = ""
    total_time_s: float = 0.0

    @property
    def best(self) -> Point:
        assert self.search.best is not None
        return self.search.best

    @property
    def best_stats(self) -> Stats:
        return self.search.stats[self.best]

    @property
    def measured(self) -> list[tuple[Point, Stats]]:
        """Measured points in ascending order (inter-op, then intra-op)."""
        return sorted(self.search.stats.items(), key=lambda kv: (kv[0].inter, kv[0].intra))

    @property
    def skipped(self) -> list[tuple[Point, str]]:
        """Skipped points with their reasons, in ascending order (inter-op, then intra-op)."""
        return sorted(self.search.skipped.items(), key=lambda kv: (kv[0].inter, kv[0].intra))

    def label(self, p: Point) -> str:
        return p.label(self.pairs)

    @property
    def axis(self) -> str:
        if not self.pairs:
            return "intra-op threads"
        return "requests x intra-op threads" if self.concurrent else "inter-op x intra-op threads"

    @property
    def unit(self) -> str:
        return "s per request" if self.concurrent else "s per call"

    def is_noisy(self, s: Stats) -> bool:
        return s.spread > NOISY_SPREAD

    def counts(self) -> dict[str, int]:
        """The winning counts as profile keys. Without pairs requests come one at a time, so inter-op
        is 1: nothing for a second inter-op thread to run (as the shipped latency profile has it)."""
        return {"intra_op": self.best.intra, "inter_op": self.best.inter if self.pairs else 1}

    def preloads(self) -> dict[str, str]:
        """The ``allocator``/``openmp`` keys to write: the choices that beat the default beyond the noise."""
        return {cs.key: cs.kept for cs in self.choices if cs.written}

    def skipped_summary(self) -> str:
        """One line naming the skipped points compactly."""
        sk = self.search.skipped
        if not sk:
            return "none"
        if not self.pairs:
            return format_cpu_list([p.intra for p in sk])
        return ", ".join(self.label(p) for p, _ in self.skipped)
