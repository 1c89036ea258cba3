"""Fake machines (MachineFacts built directly) for the profile tests."""
from __future__ import annotations

import math

from parinfo.machine.topology import MachineFacts
from parinfo.records.source import NO_LIMIT, file


def machine(cores: int, *, smt: int = 1, numa: int = 1, affinity: list[int] | None = None,
            quota: float | None = None) -> MachineFacts:
    """``cores`` physical cores with ``smt`` CPUs each (siblings numbered core, core + cores, ...),
    split evenly over ``numa`` nodes; optional affinity subset and CPU quota."""
    logical = cores * smt
    siblings = tuple(tuple(c + k * cores for k in range(smt)) for c in range(cores))
    per_node = cores // numa
    nodes = tuple(tuple(sorted(cpu for core in siblings[n * per_node:(n + 1) * per_node] for cpu in core))
                  for n in range(numa))
    aff = tuple(sorted(affinity)) if affinity is not None else tuple(range(logical))
    usable = len(aff)
    if quota is not None:
        usable = min(usable, max(1, math.floor(quota)))
    usable_cores = sum(1 for core in siblings if set(core) & set(aff))
    return MachineFacts(
        logical_cpus=logical, physical_cores=cores, sockets=numa, numa_nodes=nodes, smt=smt > 1,
        core_siblings=siblings, core_types={}, affinity=aff, cpuset=None, quota=quota,
        quota_source=file("/sys/fs/cgroup/app.slice/cpu.max") if quota else NO_LIMIT, usable_cpus=usable,
        usable_physical_cores=max(1, min(usable, usable_cores)),
    )


MACHINES = {
    "1cpu": machine(1),
    "2cpus": machine(2),
    "16cores_smt": machine(16, smt=2),
    "2numa_x28": machine(56, smt=2, numa=2),
    "quota_0.5": machine(2, quota=0.5),
    "affinity_subset": machine(16, smt=2, affinity=[0, 1, 2, 3, 16, 17]),
}

# The machine the malformed-profile corpus is resolved on: 4 cores x 2 SMT, CPUs 0-7.
CORPUS_MACHINE = machine(4, smt=2)
