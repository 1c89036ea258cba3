"""The machine as a profile sees it: the facts a count expression may name (:func:`fact_values`,
and :func:`instance_values` inside one instance), and the usable physical cores, NUMA node by node,
that instances and affinity are cut from.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from parinfo.machine.pod_cpus import of_facts

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts


def fact_values(facts: MachineFacts) -> tuple[dict[str, int], list[str]]:
    """The machine facts that count expressions may name, and notes on any that were unknown."""
    notes: list[str] = []
    affinity = tuple(getattr(facts, "affinity", ()) or ())
    logical = facts.logical_cpus
    if not logical:
        logical = max(1, len(affinity), facts.usable_cpus or 1)
        notes.append(f"logical_cpus unknown: used {logical} (the CPUs this process may run on)")
    physical = facts.physical_cores
    if not physical:
        physical = logical
        notes.append(f"physical_cores unknown: used logical_cpus = {logical}")
    numa = max(1, len(facts.numa_nodes or ()))
    values = {
        "usable_cpus": max(1, int(facts.usable_cpus or 1)),
        "usable_physical_cores": max(1, int(facts.usable_physical_cores or 1)),
        "physical_cores": int(physical),
        "logical_cpus": int(logical),
        "numa_nodes": numa,
        "cores_per_numa_node": max(1, int(physical) // numa),
        "pod_cpus": of_facts(facts)[0],
    }
    return values, notes


def instance_values(facts: MachineFacts, block: list[tuple[int, ...]], instances: int,
                    logical: bool = False) -> dict[str, int]:
    """The facts an expression sees inside one instance: the instance is its whole machine.

    An instance is pinned to one CPU of each core in ``block`` (every CPU of each with ``logical``),
    so its usable CPUs, physical cores and NUMA nodes are those of the block, exactly what a process
    pinned there would resolve to; ``instances`` and ``cores_per_instance`` describe the job, and
    ``pod_cpus`` is the pod's bound (:mod:`parinfo.machine.pod_cpus`) within the instance's CPUs.
    """
    node_of = cpu_nodes(facts)
    cores = max(1, len(block))
    cpus = max(cores, sum(len(core) for core in block))
    nodes = max(1, len({node_of.get(core[0], 0) for core in block}))
    usable = cpus if logical else cores
    return {
        "usable_cpus": usable,
        "usable_physical_cores": cores,
        "physical_cores": cores,
        "logical_cpus": cpus,
        "numa_nodes": nodes,
        "cores_per_numa_node": max(1, cores // nodes),
        "instances": instances,
        "cores_per_instance": cores,
        "pod_cpus": min(usable, of_facts(facts)[0]),
    }


def cpu_nodes(facts: MachineFacts) -> dict[int, int]:
    """CPU -> the number of its NUMA node."""
    return {cpu: nid for nid, node in zip(facts.node_ids, facts.numa_nodes or (), strict=False) for cpu in node}


def nodes_of(facts: MachineFacts, cpus: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The NUMA nodes of ``cpus`` (empty when the machine's nodes are unknown)."""
    node_of = cpu_nodes(facts)
    return tuple(sorted({node_of[c] for c in cpus if c in node_of}))


def fit_inside(groups: list[list[tuple[int, ...]]], n: int, most: int) -> int:
    """The most cores (at most ``most``) each of ``n`` instances can have with none spanning two
    NUMA nodes; 0 when even one core each does not fit."""
    for size in range(most, 0, -1):
        if sum(len(g) // size for g in groups) >= n:
            return size
    return 0


def usable_cores(facts: MachineFacts, restrict: set[int] | None = None) -> list[tuple[int, ...]]:
    """The usable physical cores (each a tuple of its usable CPUs), NUMA node by node.

    A CPU quota smaller than the cores keeps only as many cores as it pays for.
    """
    usable = [c for c in facts.usable_cpu_list if restrict is None or c in restrict]
    if not usable:
        usable = list(range(max(1, facts.usable_cpus or 1)))
    allowed = set(usable)
    cores: list[tuple[int, ...]] = []
    seen: set[int] = set()
    for core in facts.core_siblings or ():
        cpus = tuple(sorted(c for c in core if c in allowed and c not in seen))
        if cpus:
            cores.append(cpus)
            seen.update(cpus)
    cores += [(c,) for c in usable if c not in seen]
    node_of = cpu_nodes(facts)
    cores.sort(key=lambda core: (node_of.get(core[0], 0), core[0]))
    limit = max(1, min(len(cores), facts.usable_physical_cores or len(cores), facts.usable_cpus or len(cores)))
    return cores[:limit]


def by_node(cores: list[tuple[int, ...]], node_of: dict[int, int]) -> list[list[tuple[int, ...]]]:
    groups: dict[int, list[tuple[int, ...]]] = {}
    for core in cores:
        groups.setdefault(node_of.get(core[0], 0), []).append(core)
    return [groups[k] for k in sorted(groups)]
