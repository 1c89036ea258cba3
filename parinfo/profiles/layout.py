"""Where a plan's threads run: one block of whole cores per instance (:meth:`Layout.blocks`), or
the CPUs of one process's affinity (:meth:`Layout.affinity`); ProfileError (UsageError for
--instances) when the profile's layout does not fit this machine.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from parinfo.errors import UsageError
from parinfo.machine.cpulist import format_cpu_list
from parinfo.profiles.machine_values import by_node, cpu_nodes, fit_inside, usable_cores
from parinfo.profiles.model import InstanceSpec, Profile, Written
from parinfo.profiles.plan import Setting
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

#: How a count is evaluated: (key path, raw value, names) -> its Setting (the resolver's count).
Count = Callable[[tuple[str, ...], Written | None, dict[str, int]], Setting]


def _are(n: int) -> str:
    """The verb after a count: "1 is", "2 are"."""
    return "is" if n == 1 else "are"


class Layout:
    """The instances and affinity of one profile on ``facts``: ``override`` is --instances,
    ``limit`` the largest count allowed, ``values`` the machine's fact values; notes go to ``notes``."""

    def __init__(self, prof: Profile, facts: MachineFacts, override: int | None, limit: int,
                 values: dict[str, int], notes: list[str], count: Count) -> None:
        self.prof = prof
        self.facts = facts
        self.override = override
        self.limit = limit
        self.values = values
        self.notes = notes
        self.count = count

    def instance_spec(self) -> InstanceSpec | None:
        """The profile's ``instances``, with --instances (``override``) for its count."""
        spec = self.prof.instances
        if self.override is None:
            return spec
        if isinstance(self.override, bool) or not isinstance(self.override, int) or self.override < 1:
            raise UsageError(f"--instances {self.override!r}: must be a whole number of 1 or more")
        if self.override > self.limit:
            raise UsageError(f"--instances {self.override}: more than {self.limit}, the largest count allowed here")
        # the layout (cores_per_instance, cpus, cross_numa, nodes) stays the profile's
        return replace(spec, count=self.override, per_numa_node=None) if spec else InstanceSpec(count=self.override)

    def blocks(self, spec: InstanceSpec) -> list[list[tuple[int, ...]]]:
        """Split the usable cores into one block of whole cores per instance, none spanning two
        NUMA nodes unless ``cross_numa``."""
        explicit = self.prof.cpus
        restrict = set(explicit) if explicit is not None else None
        if explicit is not None:
            self.check_allowed(explicit)
        cores = usable_cores(self.facts, restrict)
        node_of = cpu_nodes(self.facts)
        if spec.nodes is not None:
            cores = self.on_nodes(spec.nodes, cores, node_of)
        groups = by_node(cores, node_of)
        cores_each = None
        if spec.cores_per_instance is not None:
            cores_each = self.count(("instances", "cores_per_instance"), spec.cores_per_instance, self.values).value
        if spec.per_numa_node:
            return self._per_numa_node(groups, cores_each, node_of)
        cross = bool(spec.cross_numa) or len(groups) < 2
        if spec.count is not None:
            n, cores_each = self._by_count(spec, cores_each, groups, len(cores), cross)
        else:
            assert cores_each is not None
            n = self._by_size(cores_each, groups, len(cores), cross)
        return self._cut(cores, groups, n, cores_each)

    def _per_numa_node(self, groups: list[list[tuple[int, ...]]], cores_each: int | None,
                       node_of: dict[int, int]) -> list[list[tuple[int, ...]]]:
        """One instance per NUMA node: its whole node, or its first ``cores_each`` cores."""
        if cores_each is None:
            return groups
        small = [i for i, g in enumerate(groups) if len(g) < cores_each]
        if small:
            raise self.prof.error(("instances", "cores_per_instance"),
                                  f"cores_per_instance is {cores_each} but NUMA node "
                                  f"{node_of.get(groups[small[0]][0][0], small[0])} has only "
                                  f"{plural(len(groups[small[0]]), 'usable physical core')}",
                                  "lower cores_per_instance, or leave it out to use whole nodes")
        return [g[:cores_each] for g in groups]

    def _by_count(self, spec: InstanceSpec, cores_each: int | None, groups: list[list[tuple[int, ...]]],
                  ncores: int, cross: bool) -> tuple[int, int]:
        """The instances the count asks for, and the cores each gets (all it can, without crossing a
        NUMA node unless ``cross``, when cores_per_instance is not given); an error when they do not fit."""
        overridden = self.override is not None
        where = "--instances" if overridden else "instances"
        sizes = ", ".join(str(len(g)) for g in groups)
        key_path = ("instances",)
        if overridden and isinstance(spec.count, int):
            n = spec.count
        else:
            count_path = (*key_path, "count") if self.prof.mark(*key_path, "count") else key_path
            n = self.count(count_path, spec.count, self.values).value
        if cores_each is None:
            if n > ncores:
                fix = (f"use --instances {ncores} or fewer" if overridden
                       else f"lower the count to at most {ncores}")
                self._too_many(overridden, f"{where}: {plural(n, 'instance')} need at least "
                               f"{plural(n, 'usable physical core')}; {ncores} {_are(ncores)} usable here", fix)
            cores_each = ncores // n
            if not cross:
                inside = fit_inside(groups, n, cores_each)
                if inside < cores_each:
                    self.notes.append(f"instances: {plural(inside, 'core')} each instead of {cores_each}, so that "
                                      f"no instance spans two NUMA nodes (usable cores per node: {sizes}; "
                                      "cross_numa: true lets them span)")
                    cores_each = inside
        elif n * cores_each > ncores:
            fits = ncores // cores_each
            if overridden:
                fix = (f"use --instances {fits} or fewer, or lower cores_per_instance" if fits
                       else f"lower cores_per_instance to at most {ncores}")
            else:
                fix = "lower the count or cores_per_instance"
            self._too_many(overridden, f"{where}: {plural(n, 'instance')} x {plural(cores_each, 'core')} need "
                           f"{plural(n * cores_each, 'usable physical core')}; {ncores} {_are(ncores)} usable here",
                           fix)
        elif not cross and sum(len(g) // cores_each for g in groups) < n:
            inside = fit_inside(groups, n, cores_each)
            fix = (f"lower cores_per_instance to {inside}" if inside else "lower the count") + \
                ", or set 'cross_numa: true' under instances to let an instance span two nodes"
            self._too_many(overridden, f"{where}: {plural(n, 'instance')} x {plural(cores_each, 'core')} do not "
                           f"fit inside the NUMA nodes (usable cores per node: {sizes}) without one spanning two",
                           fix)
        return n, cores_each

    def _by_size(self, cores_each: int, groups: list[list[tuple[int, ...]]], ncores: int, cross: bool) -> int:
        """As many instances of ``cores_each`` cores as fit (inside the NUMA nodes unless ``cross``);
        an error when not even one does."""
        n = ncores // cores_each if cross else sum(len(g) // cores_each for g in groups)
        if n == 0:
            sizes = ", ".join(str(len(g)) for g in groups)
            largest = max(len(g) for g in groups)
            if ncores >= cores_each:
                message = (f"cores_per_instance is {cores_each} but no NUMA node has that many usable physical "
                           f"cores (usable cores per node: {sizes})")
                fix = f"use at most {largest}, or set 'cross_numa: true' under instances"
            else:
                message = (f"cores_per_instance is {cores_each} but only {plural(ncores, 'physical core')} "
                           f"{_are(ncores)} usable here")
                fix = f"use at most {ncores}, or an expression such as usable_physical_cores // 2"
            raise self.prof.error(("instances", "cores_per_instance"), message, fix)
        return n

    def _cut(self, cores: list[tuple[int, ...]], groups: list[list[tuple[int, ...]]], n: int,
             cores_each: int) -> list[list[tuple[int, ...]]]:
        """``n`` blocks of ``cores_each`` cores, NUMA nodes taken in turn; notes on cores left idle."""
        ncores = len(cores)
        left = ncores - n * cores_each
        if left:
            self.notes.append(f"instances: {plural(left, 'usable physical core')} left idle "
                              f"({n} x {cores_each} of {ncores})")
        if len(groups) > 1:
            per_node = [[g[k * cores_each:(k + 1) * cores_each] for k in range(len(g) // cores_each)] for g in groups]
            interleaved = [blk for i in range(max(map(len, per_node))) for blks in per_node
                           if i < len(blks) for blk in [blks[i]]]
            if len(interleaved) >= n:
                return interleaved[:n]
            self.notes.append("instances: some instances span two NUMA nodes (cross_numa: true, and the cores do "
                              "not divide evenly)")
        return [cores[i * cores_each:(i + 1) * cores_each] for i in range(n)]

    def on_nodes(self, wanted: tuple[int, ...], cores: list[tuple[int, ...]],
                 node_of: dict[int, int]) -> list[tuple[int, ...]]:
        """The usable cores of NUMA nodes ``wanted`` (``instances.nodes``); a node that does not exist,
        or has no usable core, is an error at that key."""
        key = ("instances", "nodes")
        known = self.facts.node_ids if self.facts.numa_nodes else ()
        if not known:
            why = self.facts.unknown.get("numa_nodes", "sysfs lists none")
            raise self.prof.error(key, f"instances.nodes: this machine's NUMA nodes are unknown ({why})",
                                  "leave 'nodes' out, or run where /sys/devices/system/node is readable")
        missing = [n for n in wanted if n not in known]
        if missing:
            raise self.prof.error(key, f"instances.nodes: NUMA node {format_cpu_list(missing)} does not exist here "
                                  f"(nodes with CPUs: {format_cpu_list(known)})",
                                  f"list nodes from {format_cpu_list(known)}")
        kept = [core for core in cores if node_of.get(core[0]) in wanted]
        if not kept:
            raise self.prof.error(key, f"instances.nodes: no CPU of node {format_cpu_list(wanted)} is usable by "
                                  f"this process (usable CPUs: {format_cpu_list(self.facts.usable_cpu_list)})",
                                  "list nodes whose CPUs this process may use, or widen its affinity")
        return kept

    def _too_many(self, overridden: bool, message: str, fix: str) -> None:
        if overridden:
            raise UsageError(f"{message} ({fix})")
        raise self.prof.error(("instances",), message, fix)

    def check_allowed(self, cpus: tuple[int, ...]) -> None:
        allowed = set(self.facts.usable_cpu_list)
        bad = [c for c in cpus if c not in allowed]
        if bad:
            shown = format_cpu_list(sorted(allowed)) or "none"
            raise self.prof.error(("affinity",),
                                  f"affinity CPU {format_cpu_list(bad)} is outside the CPUs this process may use "
                                  f"({shown})", f"pick CPUs from {shown}, or write compact or spread")

    def affinity(self, want: int) -> tuple[tuple[int, ...] | None, str]:
        mode, listed = self.prof.affinity_word, self.prof.cpus
        if mode == "none":
            return None, f"not set: inherited ({format_cpu_list(self.facts.usable_cpu_list)})"
        if listed is not None:
            self.check_allowed(listed)
            return listed, f"listed in the profile: {format_cpu_list(listed)}"
        cores = usable_cores(self.facts)
        node_of = cpu_nodes(self.facts)
        per_node = []
        for group in by_node(cores, node_of):
            depth = max(len(c) for c in group)
            per_node.append([c[i] for i in range(depth) for c in group if i < len(c)])
        if mode == "compact":
            order = [cpu for node in per_node for cpu in node]
            how = "one CPU per core first, filling one NUMA node before the next"
        else:
            order = [node[i] for i in range(max(map(len, per_node))) for node in per_node if i < len(node)]
            how = "one CPU per core first, taking NUMA nodes in turn"
        k = max(1, min(want, len(order), self.values["usable_cpus"]))
        cpus = tuple(sorted(order[:k]))
        return cpus, f"{mode}: {plural(k, 'CPU')} for intra_op x inter_op = {want}, {how}: {format_cpu_list(cpus)}"
