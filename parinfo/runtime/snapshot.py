"""parinfo's runtime described as records: its two counts with their sources, its backend, its pools'
state, and what its push, budget, adaptive decisions and quota following did.

:meth:`parinfo.runtime.state.Runtime.snapshot` makes a :class:`RuntimeSection`; the report carries it
as its ``runtime`` section, and ``parinfo.runtime.info()`` is its JSON form. Importing this module
does not build the runtime (a report read from another process or a fleet worker uses it alone).
"""
from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Annotated

from parinfo.records.convert import ALONE, MAX_COUNT, OMIT_NONE, Count, among, at_most, between
from parinfo.records.record import record
from parinfo.records.source import Kind, Source, run_time

if TYPE_CHECKING:
    from parinfo.process.environment import EnvRow
    from parinfo.process.provenance import SettingRow

# Read from another process (attach), this section is hostile input: its counts are believed from
# 1 to MAX_COUNT, its other numbers from 0, its lists and texts are cut.
#: A number of threads or CPUs that may be 0; a short text; a long one (a path, a why).
Amount = Annotated[int, between(0, MAX_COUNT)]
Text = Annotated[str, at_most(400)]
Long = Annotated[str, at_most(4096)]


@record
class PoolCount:
    """One of parinfo's own counts as its runtime records it: ``count``, its ``source``, and when
    they apply: ``not_applied`` (profile requests an explicit call outranked), ``locked`` (inter-op:
    it can no longer change), ``capped_to`` (the pool ceiling, when the count is above it)."""

    count: Count | None = None
    source: Source | None = None
    not_applied: Annotated[list[Text], at_most(64)] | None = field(default=None, metadata=OMIT_NONE)
    locked: bool | None = field(default=None, metadata=OMIT_NONE)
    capped_to: Count | None = field(default=None, metadata=OMIT_NONE)


@record
class PushedPool:
    """One loaded pool the last push set: which (``library``, ``filepath``, threadpoolctl's
    ``user_api``, ``internal_api`` and ``prefix``), the count it asked (``num_threads``), why the
    library refused it (``error``), and ``scope`` for a pool whose limit holds per calling thread."""

    library: Text = "unknown"
    filepath: Long | None = None
    num_threads: Count | None = None
    user_api: Text | None = None
    internal_api: Text | None = None
    prefix: Text | None = None
    error: Text | None = field(default=None, metadata=OMIT_NONE)
    scope: Text | None = field(default=None, metadata=OMIT_NONE)


@record
class Reached:
    """The pool workers that took a push in their own thread (``ran``) and those that take it before
    their next job (``pending``), by thread name."""

    ran: Annotated[list[Text], at_most(4096)] = field(default_factory=list)
    pending: Annotated[list[Text], at_most(4096)] = field(default_factory=list)


@record
class Push:
    """What the runtime's last push did (``native_push``): the ``count``, who asked (``source``),
    each pool it set, torch's setter call, and which workers took it."""

    count: Count | None = None
    source: Source | None = None
    pools: Annotated[list[PushedPool], at_most(4096)] = field(default_factory=list)
    torch: Text | None = None
    workers: Reached | None = field(default=None, metadata=OMIT_NONE)

    def by_file(self) -> dict[str, tuple[int, Source]]:
        """{library file: (count, source)} for the pools this push set: the source says who pushed,
        from its kind: ``parinfo.apply`` (a profile), ``parinfo.set_num_threads`` (an explicit call),
        ``parinfo.runtime.configure``, or the defaults that followed a change of the usable CPUs
        (that source is then the pool's own)."""
        said = self.source
        if said is None:
            return {}
        if said.kind.default:  # defaults that followed the usable CPUs: nobody chose them
            source = said
        elif said.kind is Kind.PROFILE:
            source = Source(Kind.PROFILE, said.detail, f"set at run time by parinfo.apply ({said.text})")
        elif said.kind is Kind.EXPLICIT:
            call = f"parinfo.set_num_threads({self.count})"
            source = Source(Kind.EXPLICIT, call, f"set at run time by {call}")
        else:
            source = run_time("parinfo's runtime", f"set at run time by parinfo's runtime ({said.text})")
        return {pool.filepath: (pool.num_threads, source) for pool in self.pools
                if pool.filepath and pool.num_threads is not None}


@record
class Budget:
    """The CPU budget now (``budget``): lanes running, the native cap per lane (None: not capped),
    the usable CPUs it divides, and how many native limit changes it made."""

    lanes: Amount = 0
    cap_per_lane: Count | None = None
    usable_cpus: Count | None = None
    native_changes: Annotated[int, between(0)] = 0


@record
class AdaptiveState:
    """What the adaptive call sites chose (``adaptive``)."""

    enabled: bool | None = None
    region_sites: Annotated[int, between(0)] = 0
    fork_sites: Annotated[int, between(0)] = 0
    regions_inline: Annotated[int, between(0)] = 0
    forks_inline: Annotated[int, between(0)] = 0


@record
class TorchPool:
    """torch's inter-op pool as parinfo's first scripted fork found it (``torch_pool``): its
    ``threads``, the native threads each lane got, who sized it, and how many threads took their
    per-lane count (``pinned``)."""

    threads: Count | None = None
    native_per_lane: Count | None = None
    source: Source | None = None
    pinned: Amount | None = field(default=None, metadata=OMIT_NONE)


@record
class FollowChange:
    """One re-read that changed the usable CPUs or found a resize: when (HH:MM:SS), the usable CPUs
    [before, after], the counts that followed, and what the resize changed in the cgroup files
    (``resized``: "limit 2 CPUs -> 1 CPUs", "cpuset 0-1 -> 1", "request 500m -> 1000m (...)";
    absent where the re-read found only the usable CPUs changed, as by an affinity)."""

    at: Annotated[str, at_most(32)] | None = None
    usable_cpus: Annotated[list[Count], at_most(2)] = field(default_factory=list)
    counts: Annotated[list[Text], at_most(64)] = field(default_factory=list)
    resized: Annotated[list[Text], at_most(16)] | None = field(default=None, metadata=OMIT_NONE)


@record
class Follow:
    """Following a changing budget (``follow``): on or off and why, how often and how many re-reads,
    the usable CPUs last read, the re-reads that changed them (last 8), and the counts left alone
    ({pool file or torch: why})."""

    enabled: bool = True
    enabled_source: Source | None = None
    interval_s: Annotated[float, between(0, 1e9)] | None = None
    rereads: Annotated[int, between(0)] = 0
    usable_cpus: Count | None = None
    changes: Annotated[list[FollowChange], at_most(8)] = field(default_factory=list)
    not_followed: Annotated[dict[Long, Text], at_most(64)] = field(default_factory=dict)


@record
class RuntimeSection:
    """parinfo's own runtime (``runtime``), as :meth:`parinfo.runtime.state.Runtime.snapshot` gives it.
    For a process read from outside only ``unknown`` (why the counts cannot be read) is set, and its
    JSON is that alone."""

    backend: Annotated[Text, among("native", "sequential")] | None = None
    backend_source: Source | None = None
    intra_op: PoolCount | None = None
    inter_op: PoolCount | None = None
    pool_ceiling: Count | None = None
    intra_pool_started: bool = False
    inter_pool_started: bool = False
    pool_threads: Amount | None = None
    native_push: Push | None = None
    budget: Budget | None = None
    adaptive: AdaptiveState | None = None
    torch_pool: TorchPool | None = None
    unknown: Long | None = field(default=None, metadata=ALONE)
    follow: Follow | None = field(default=None, metadata=OMIT_NONE)

    @property
    def started(self) -> bool:
        """Whether either of parinfo's pools has started."""
        return self.intra_pool_started or self.inter_pool_started

    def setting_rows(self) -> list[SettingRow]:
        """The settings rows of parinfo's own pools: their counts and sources as the runtime records them."""
        from parinfo.process.provenance import SettingRow
        from parinfo.runtime.settings import EXPLICIT, INTER_VARS, INTRA_VARS

        rows = []
        for recorded, label, variables in ((self.intra_op, "parinfo intra-op", INTRA_VARS),
                                           (self.inter_op, "parinfo inter-op", INTER_VARS)):
            entry = recorded or PoolCount()
            rows.append(SettingRow(label, entry.count, entry.source, [EXPLICIT.text, "profile", *variables, "default"],
                                   own=True, capped_to=entry.capped_to))
        return rows

    def mark_capped(self, env_rows: list[EnvRow]) -> None:
        """A valid variable whose count parinfo's runtime caps at its pool ceiling says what runs."""
        for entry in (self.intra_op, self.inter_op):
            if entry is None or entry.capped_to is None:
                continue
            said = entry.source
            for row in env_rows:
                if said is not None and said.kind is Kind.VARIABLE and said.detail == row.name:
                    row.capped_to = entry.capped_to

    @property
    def followed_at(self) -> str | None:
        """When the runtime last saw the usable CPUs change (HH:MM:SS), or None."""
        changes = self.follow.changes if self.follow is not None else []
        return changes[-1].at if changes else None
