"""parinfo's runtime described as records: its two counts with their sources, its backend, its pools'
state, and what its push, budget, adaptive decisions and quota following did.

:meth:`parinfo.runtime.state.Runtime.snapshot` makes a :class:`RuntimeSection`; the report carries it
as its ``runtime`` section, and ``parinfo.runtime.info()`` is its JSON form. Importing this module
does not build the runtime (a report read from another process or a fleet worker uses it alone).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from parinfo.payload import flag, integer, plain_map, section, text, texts
from parinfo.record import record
from parinfo.source import Kind, Source

if TYPE_CHECKING:
    from parinfo.process.environment import EnvRow
    from parinfo.process.provenance import SettingRow


@record
class PoolCount:
    """One of parinfo's own counts as its runtime records it: ``count``, its ``source``, and when
    they apply: ``not_applied`` (profile requests an explicit call outranked), ``locked`` (inter-op:
    it can no longer change), ``capped_to`` (the pool ceiling, when the count is above it)."""

    count: int | None = None
    source: Source | None = None
    not_applied: list[str] | None = None
    locked: bool | None = None
    capped_to: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PoolCount:
        d = section(data)
        return cls(integer(d.get("count")), Source.from_json(d.get("source")),
                   None if d.get("not_applied") is None else texts(d.get("not_applied")),
                   flag(d.get("locked")), integer(d.get("capped_to")))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count, "source": None if self.source is None else self.source.to_json()}
        for key in ("not_applied", "locked", "capped_to"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@record
class RuntimeSection:
    """parinfo's own runtime (``runtime``), as ``parinfo.runtime.info()`` describes it; the runtime
    owns that description, so its nested records (``native_push``, ``budget``, ``adaptive``,
    ``torch_pool``, ``follow``) are kept as it gives them. For a process read from outside only ``unknown``
    (why the counts cannot be read) is set, and ``to_dict`` is that alone."""

    backend: str | None = None
    backend_source: Source | None = None
    intra_op: PoolCount | None = None
    inter_op: PoolCount | None = None
    pool_ceiling: int | None = None
    intra_pool_started: bool = False
    inter_pool_started: bool = False
    pool_threads: int | None = None
    native_push: dict[str, Any] | None = None
    budget: dict[str, Any] | None = None
    adaptive: dict[str, Any] | None = None
    torch_pool: dict[str, Any] | None = None
    unknown: str | None = None
    follow: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RuntimeSection:
        d = section(data)

        def record(key: str) -> dict[str, Any] | None:
            return None if d.get(key) is None else plain_map(d.get(key))

        return cls(text(d.get("backend")), Source.from_json(d.get("backend_source")),
                   PoolCount.from_dict(d["intra_op"]) if isinstance(d.get("intra_op"), Mapping) else None,
                   PoolCount.from_dict(d["inter_op"]) if isinstance(d.get("inter_op"), Mapping) else None,
                   integer(d.get("pool_ceiling")), d.get("intra_pool_started") is True,
                   d.get("inter_pool_started") is True, integer(d.get("pool_threads")), record("native_push"),
                   record("budget"), record("adaptive"), record("torch_pool"), text(d.get("unknown")),
                   record("follow"))

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
        changes = (self.follow or {}).get("changes")
        if isinstance(changes, list) and changes and isinstance(changes[-1], Mapping):
            return text(changes[-1].get("at"))
        return None

    def to_dict(self) -> dict[str, Any]:
        if self.unknown is not None:
            return {"unknown": self.unknown}
        return {"backend": self.backend,
                "backend_source": None if self.backend_source is None else self.backend_source.to_json(),
                "intra_op": None if self.intra_op is None else self.intra_op.to_dict(),
                "inter_op": None if self.inter_op is None else self.inter_op.to_dict(),
                "pool_ceiling": self.pool_ceiling, "intra_pool_started": self.intra_pool_started,
                "inter_pool_started": self.inter_pool_started, "pool_threads": self.pool_threads,
                "native_push": self.native_push, "budget": self.budget, "adaptive": self.adaptive,
                "torch_pool": self.torch_pool, **({} if self.follow is None else {"follow": self.follow})}
