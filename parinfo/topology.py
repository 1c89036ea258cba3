"""Facts about the machine: CPUs, cores, sockets, NUMA nodes, affinity, cgroup quota, usable CPUs.

Public entry point: :func:`machine_facts`. Every field that cannot be read is None and its reason
is in ``MachineFacts.unknown`` so the report can say "unknown (reason)".
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

USABLE_RULE = "min(affinity CPUs, cpuset CPUs, floor(cgroup quota)), at least 1"


@dataclass(frozen=True)
class MachineFacts:
    """What the machine and this process's constraints allow. CPU lists are sorted tuples of ids."""

    logical_cpus: int | None
    physical_cores: int | None
    sockets: int | None
    numa_nodes: tuple[tuple[int, ...], ...]
    smt: bool | None
    core_siblings: tuple[tuple[int, ...], ...]
    core_types: dict[str, tuple[int, ...]]
    affinity: tuple[int, ...]
    cpuset: tuple[int, ...] | None
    quota: float | None
    quota_source: str
    usable_cpus: int
    usable_physical_cores: int
    usable_rule: str = USABLE_RULE
    unknown: dict[str, str] = field(default_factory=dict)

    @property
    def usable_cpu_list(self) -> tuple[int, ...]:
        """Affinity CPUs that are also in the cpuset (the CPUs threads may run on)."""
        if self.cpuset is None:
            return self.affinity
        allowed = set(self.cpuset)
        return tuple(c for c in self.affinity if c in allowed) or self.affinity

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["numa_nodes"] = [list(n) for n in self.numa_nodes]
        d["core_siblings"] = [list(c) for c in self.core_siblings]
        d["core_types"] = {k: list(v) for k, v in self.core_types.items()}
        d["affinity"] = list(self.affinity)
        d["cpuset"] = None if self.cpuset is None else list(self.cpuset)
        d["usable_cpu_list"] = list(self.usable_cpu_list)
        return d


def usable_from(affinity: int, cpuset: int | None, quota: float | None) -> int:
    """Apply USABLE_RULE."""
    n = affinity
    if cpuset is not None:
        n = min(n, cpuset)
    if quota is not None:
        n = min(n, max(1, math.floor(quota)))
    return max(1, n)


def machine_facts(root: str = "/", pid: int | None = None) -> MachineFacts:
    """Read the machine's facts (under ``root`` for tests) for process ``pid`` (default: this one)."""
    import psutil

    unknown: dict[str, str] = {}
    affinity = tuple(sorted(os.sched_getaffinity(pid or 0)))
    logical = os.cpu_count()
    physical = psutil.cpu_count(logical=False)
    if physical is None:
        unknown["physical_cores"] = "psutil could not count cores"
    usable = usable_from(len(affinity), None, None)
    return MachineFacts(
        logical_cpus=logical,
        physical_cores=physical,
        sockets=None,
        numa_nodes=(),
        smt=None if physical is None or logical is None else logical > physical,
        core_siblings=(),
        core_types={},
        affinity=affinity,
        cpuset=None,
        quota=None,
        quota_source="none",
        usable_cpus=usable,
        usable_physical_cores=min(usable, physical or usable),
        unknown=unknown,
    )
