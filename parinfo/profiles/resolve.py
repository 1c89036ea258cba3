"""Resolve a validated profile on one machine's facts into a Plan.

Counts are evaluated with the machine's numbers (each Setting's ``why`` shows the expression and
the numbers it used), results below 1 are raised to 1 with a note, results too large for the
machine are an error, and instances and affinity become explicit CPU lists.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from parinfo.errors import UsageError
from parinfo.machine.cpulist import format_cpu_list
from parinfo.machine.rounding import ROUNDING_VAR
from parinfo.process import libraries as reg, preload as pre
from parinfo.profiles import expr
from parinfo.profiles.grammar import DERIVED_VARS, LIBRARIES, MAX_COUNT
from parinfo.profiles.model import Profile
from parinfo.profiles.plan import InstancePlan, Plan, Preload, Setting
from parinfo.records.source import profile as profile_source
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

COUNT_FACTOR = 64  # a count above 64 x logical CPUs is a mistake, not a plan


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
    }
    return values, notes


def instance_values(facts: MachineFacts, block: list[tuple[int, ...]], instances: int,
                    logical: bool = False) -> dict[str, int]:
    """The facts an expression sees inside one instance: the instance is its whole machine.

    An instance is pinned to one CPU of each core in ``block`` (every CPU of each with ``logical``),
    so its usable CPUs, physical cores and NUMA nodes are those of the block, exactly what a process
    pinned there would resolve to; ``instances`` and ``cores_per_instance`` describe the job.
    """
    node_of = _node_of(facts)
    cores = max(1, len(block))
    cpus = max(cores, sum(len(core) for core in block))
    nodes = max(1, len({node_of.get(core[0], 0) for core in block}))
    return {
        "usable_cpus": cpus if logical else cores,
        "usable_physical_cores": cores,
        "physical_cores": cores,
        "logical_cpus": cpus,
        "numa_nodes": nodes,
        "cores_per_numa_node": max(1, cores // nodes),
        "instances": instances,
        "cores_per_instance": cores,
    }


def _node_of(facts: MachineFacts) -> dict[int, int]:
    """CPU -> the number of its NUMA node."""
    return {cpu: nid for nid, node in zip(facts.node_ids, facts.numa_nodes or (), strict=False) for cpu in node}


def nodes_of(facts: MachineFacts, cpus: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The NUMA nodes of ``cpus`` (empty when the machine's nodes are unknown)."""
    node_of = _node_of(facts)
    return tuple(sorted({node_of[c] for c in cpus if c in node_of}))


def _fit_inside(groups: list[list[tuple[int, ...]]], n: int, most: int) -> int:
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
    node_of = _node_of(facts)
    cores.sort(key=lambda core: (node_of.get(core[0], 0), core[0]))
    limit = max(1, min(len(cores), facts.usable_physical_cores or len(cores), facts.usable_cpus or len(cores)))
    return cores[:limit]


def _by_node(cores: list[tuple[int, ...]], node_of: dict[int, int]) -> list[list[tuple[int, ...]]]:
    groups: dict[int, list[tuple[int, ...]]] = {}
    for core in cores:
        groups.setdefault(node_of.get(core[0], 0), []).append(core)
    return [groups[k] for k in sorted(groups)]


def _are(n: int) -> str:
    """The verb after a count: "1 is", "2 are"."""
    return "is" if n == 1 else "are"


def _skips(found: pre.Found) -> str:
    """The folders the search passed over (as root, another user's), for the plan's 'why'."""
    return f" ({found.skipped_note()})" if found.skipped else ""


class _Resolver:
    def __init__(self, prof: Profile, facts: MachineFacts, instances: int | None) -> None:
        self.prof = prof
        rule = prof.get("quota_rounding")
        if rule is not None and rule != facts.quota_rounding:
            facts = facts.rounded(rule, profile_source(str(prof.get("name", "profile")), "quota_rounding"))
        self.facts = facts
        self.override = instances
        self.values, notes = fact_values(facts)
        self.notes: list[str] = list(notes)
        self.limit = min(MAX_COUNT, COUNT_FACTOR * self.values["logical_cpus"])
        # chosen by choose_preloads()
        self.allocator: pre.Allocator | None = None
        self.allocator_conf: str | None = None
        self.runtime: pre.OpenMPRuntime | None = None

    # -- preloaded libraries --------------------------------------------------------------------

    def _where(self, key: str) -> tuple[str, ...]:
        """The key path of a preload choice's word (``allocator.name`` in the mapping form)."""
        return (key, "name") if self.prof.mark(key, "name") else (key,)

    def _not_installed(self, key: str, label: str, files: tuple[str, ...], install: str,
                       found: pre.Found) -> Exception:
        others = "; ".join([*(f"{path} is {what}" for path, what in found.rejected),
                            *([found.skipped_note()] if found.skipped else [])])
        return self.prof.error(self._where(key),
                               f"{key} {self.prof_word(key)}: {label} is not installed (no {' or '.join(files)} in "
                               f"the Python environment or the system's library paths"
                               + (f"; {others}" if others else "") + ")", f"install it: {install}")

    def prof_word(self, key: str) -> str:
        value = self.prof.get(key)
        return str(value.get("name") if isinstance(value, dict) else value)

    def choose_preloads(self) -> list[Preload]:
        """Find the allocator and the OpenMP runtime the profile names (ProfileError when one is
        not installed); ``auto`` takes the first allocator installed, in the records' order."""
        out: list[Preload] = []
        spec = self.prof.get("allocator")
        if spec is not None:
            name, self.allocator_conf = spec["name"], spec.get("conf")
            if name == pre.DEFAULT:
                out.append(Preload("allocator", name, None, "default: the C library's malloc, nothing preloaded"))
            elif name == pre.AUTO:
                tried: list[str] = []
                for rec in pre.ALLOCATORS:
                    if not rec.preloadable:
                        continue
                    found = pre.locate_allocator(rec)
                    if found.path is not None:
                        self.allocator = rec
                        earlier = f" ({', '.join(tried)} not installed)" if tried else ""
                        out.append(Preload("allocator", rec.name, found.path,
                                           f"auto: {rec.label}, the first installed of "
                                           f"{', '.join(a.name for a in pre.ALLOCATORS if a.preloadable)}{earlier} "
                                           f"({rec.name} {rec.auto_why}); found in {found.where}{_skips(found)}"))
                        break
                    tried.append(rec.name)
                else:
                    out.append(Preload("allocator", pre.DEFAULT, None,
                                       f"auto: none of {', '.join(tried)} is installed; the C library's malloc stays"))
                    self.notes.append(f"allocator auto: none of {', '.join(tried)} is installed, so nothing is "
                                      f"preloaded (install one: {pre.allocator(tried[0]).install})")
            else:
                rec = pre.allocator(name)
                found = pre.locate_allocator(rec)
                if found.path is None:
                    raise self._not_installed("allocator", rec.label, rec.files, rec.install, found)
                self.allocator = rec
                out.append(Preload("allocator", name, found.path,
                                   f"set in the profile; found in {found.where}{_skips(found)}"))
        word = self.prof.get("openmp")
        if word is not None:
            if word == pre.DEFAULT:
                out.append(Preload("openmp", word, None, "default: whichever runtime the program's libraries load"))
            else:
                rt = pre.openmp_runtime(word)
                found = pre.locate_runtime(rt)
                if found.path is None:
                    raise self._not_installed("openmp", rt.label, rt.files, rt.install, found)
                self.runtime = rt
                out.append(Preload("openmp", word, found.path, f"set in the profile; found in {found.where}: it "
                                   f"serves every omp_* and GOMP_* call of the program{_skips(found)}"))
        return out

    def preload_env(self, env: dict[str, str], why: dict[str, str]) -> None:
        """The variables that come with the preloaded libraries; a variable the profile's ``env``
        sets keeps the profile's value."""
        own = self.prof.get("env", {})
        wanted: list[tuple[str, str, str]] = []
        rec = self.allocator
        if rec is not None and rec.conf_var:
            if self.allocator_conf is not None:
                wanted.append((rec.conf_var, self.allocator_conf, f"allocator {rec.name}: conf in the profile"))
            elif rec.server_conf:
                wanted.append((rec.conf_var, rec.server_conf, f"allocator {rec.name}: parinfo's server settings: "
                               f"{rec.server_why}"))
        rt = self.runtime
        if rt is not None:
            passive = str(own.get(reg.role_var("wait_policy"), "")).strip().lower() == "passive"
            wanted += rt.settings(passive)
        for var, value, reason in wanted:
            if var not in own:
                env[var] = value
                why[var] = reason

    # -- counts ---------------------------------------------------------------------------------

    def count(self, keypath: tuple[str, ...], raw: Any, names: dict[str, int], *,
              default: str | None = None, quiet: bool = False) -> Setting:
        label = ".".join(keypath)
        if raw is None:
            if default is None:  # validation gives every count without a default a value
                raise ValueError(f"{label}: no value and no default")
            res = expr.evaluate(default, names)
            value = max(1, res.value)
            return Setting(label, value, f"{default} = {value} (default: the profile does not set {label})")
        if isinstance(raw, int):
            value, why = raw, f"{raw} (set in the profile)"
        else:
            try:
                res = expr.evaluate(raw, names)
            except expr.ExprError as exc:
                # Validation checked syntax and names; what is left depends on this machine's numbers.
                working = expr.substitute(raw, names)
                shown = f"{raw} = {working}" if working != raw.strip() else raw
                fix = exc.fix or "change the expression"
                if exc.message == "division by zero":
                    fix = "wrap the divisor in max(1, ...) so that it is at least 1 on every machine"
                raise self.prof.error(keypath, f"'{label}': {shown} on this machine: {exc.message} at column "
                                      f"{exc.column}", fix, exc.column) from None
            value = res.value
            steps = [raw] + [t for t in (res.substituted, str(value)) if t != raw]
            why = " = ".join(dict.fromkeys(steps)) if len(steps) > 1 else f"{raw} = {value}"
        if value > self.limit:
            raise self.prof.error(
                keypath, f"'{label}' is {why}, more than {self.limit}, the largest count allowed here "
                         f"(at most {MAX_COUNT} and {COUNT_FACTOR} x {self.values['logical_cpus']} logical CPUs)",
                "use an expression over machine facts, such as usable_cpus")
        if value < 1:
            if not quiet:
                self.notes.append(f"{label}: {why} is below 1; raised to 1")
            why = f"{why}, raised to 1"
            value = 1
        return Setting(label, value, why)

    # -- instances ------------------------------------------------------------------------------

    def instance_spec(self) -> dict[str, Any] | None:
        spec = self.prof.get("instances")
        if self.override is None:
            return spec
        if isinstance(self.override, bool) or not isinstance(self.override, int) or self.override < 1:
            raise UsageError(f"--instances {self.override!r}: must be a whole number of 1 or more")
        if self.override > self.limit:
            raise UsageError(f"--instances {self.override}: more than {self.limit}, the largest count allowed here")
        out: dict[str, Any] = {"count": self.override}
        for key in ("cores_per_instance", "cpus", "cross_numa", "nodes"):  # the layout stays the profile's
            if spec and key in spec:
                out[key] = spec[key]
        return out

    def blocks(self, spec: dict[str, Any]) -> list[list[tuple[int, ...]]]:
        """Split the usable cores into one block of whole cores per instance, none spanning two
        NUMA nodes unless ``cross_numa``."""
        explicit = self.prof.get("affinity")
        restrict = set(explicit) if isinstance(explicit, list) else None
        if isinstance(explicit, list):
            self.check_allowed(explicit)
        cores = usable_cores(self.facts, restrict)
        node_of = _node_of(self.facts)
        if "nodes" in spec:
            cores = self.on_nodes(spec["nodes"], cores, node_of)
        ncores = len(cores)
        groups = _by_node(cores, node_of)
        cross = bool(spec.get("cross_numa")) or len(groups) < 2
        key_path = ("instances",)
        cores_each = None
        if "cores_per_instance" in spec:
            cores_each = self.count((*key_path, "cores_per_instance"), spec["cores_per_instance"], self.values).value
        overridden = self.override is not None
        if spec.get("per_numa_node"):
            if cores_each is None:
                return groups
            small = [i for i, g in enumerate(groups) if len(g) < cores_each]
            if small:
                raise self.prof.error((*key_path, "cores_per_instance"),
                                      f"cores_per_instance is {cores_each} but NUMA node "
                                      f"{node_of.get(groups[small[0]][0][0], small[0])} has only "
                                      f"{plural(len(groups[small[0]]), 'usable physical core')}",
                                      "lower cores_per_instance, or leave it out to use whole nodes")
            return [g[:cores_each] for g in groups]
        where = "--instances" if overridden else "instances"
        sizes = ", ".join(str(len(g)) for g in groups)
        if "count" in spec:
            if overridden:
                n = spec["count"]
            else:
                count_path = (*key_path, "count") if self.prof.mark(*key_path, "count") else key_path
                n = self.count(count_path, spec["count"], self.values).value
            if cores_each is None:
                if n > ncores:
                    fix = (f"use --instances {ncores} or fewer" if overridden
                           else f"lower the count to at most {ncores}")
                    self._too_many(overridden, f"{where}: {plural(n, 'instance')} need at least "
                                   f"{plural(n, 'usable physical core')}; {ncores} {_are(ncores)} usable here", fix)
                cores_each = ncores // n
                if not cross:
                    inside = _fit_inside(groups, n, cores_each)
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
                inside = _fit_inside(groups, n, cores_each)
                fix = (f"lower cores_per_instance to {inside}" if inside else "lower the count") + \
                    ", or set 'cross_numa: true' under instances to let an instance span two nodes"
                self._too_many(overridden, f"{where}: {plural(n, 'instance')} x {plural(cores_each, 'core')} do not "
                               f"fit inside the NUMA nodes (usable cores per node: {sizes}) without one spanning two",
                               fix)
        else:
            assert cores_each is not None
            n = ncores // cores_each if cross else sum(len(g) // cores_each for g in groups)
            if n == 0:
                largest = max(len(g) for g in groups)
                if ncores >= cores_each:
                    message = (f"cores_per_instance is {cores_each} but no NUMA node has that many usable physical "
                               f"cores (usable cores per node: {sizes})")
                    fix = f"use at most {largest}, or set 'cross_numa: true' under instances"
                else:
                    message = (f"cores_per_instance is {cores_each} but only {plural(ncores, 'physical core')} "
                               f"{_are(ncores)} usable here")
                    fix = f"use at most {ncores}, or an expression such as usable_physical_cores // 2"
                raise self.prof.error((*key_path, "cores_per_instance"), message, fix)
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

    def on_nodes(self, wanted: list[int], cores: list[tuple[int, ...]],
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

    # -- affinity -------------------------------------------------------------------------------

    def check_allowed(self, cpus: list[int]) -> None:
        allowed = set(self.facts.usable_cpu_list)
        bad = [c for c in cpus if c not in allowed]
        if bad:
            shown = format_cpu_list(sorted(allowed)) or "none"
            raise self.prof.error(("affinity",),
                                  f"affinity CPU {format_cpu_list(bad)} is outside the CPUs this process may use "
                                  f"({shown})", f"pick CPUs from {shown}, or write compact or spread")

    def affinity(self, want: int) -> tuple[tuple[int, ...] | None, str]:
        mode = self.prof.get("affinity", "none")
        if mode == "none":
            return None, f"not set: inherited ({format_cpu_list(self.facts.usable_cpu_list)})"
        if isinstance(mode, list):
            self.check_allowed(mode)
            return tuple(mode), f"listed in the profile: {format_cpu_list(mode)}"
        cores = usable_cores(self.facts)
        node_of = _node_of(self.facts)
        per_node = []
        for group in _by_node(cores, node_of):
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

    # -- the plan -------------------------------------------------------------------------------

    def counts(self, names: dict[str, int], default: str, quiet: bool) -> dict[str, Setting]:
        prof = self.prof
        out = {
            "intra_op": self.count(("intra_op",), prof.get("intra_op"), names, default=default, quiet=quiet),
            "inter_op": self.count(("inter_op",), prof.get("inter_op"), names, default=default, quiet=quiet),
        }
        libs = prof.get("libraries", {})
        intra = out["intra_op"]
        for lib in LIBRARIES:
            if lib in libs:
                out[lib] = self.count(("libraries", lib), libs[lib], names, quiet=quiet)
            else:
                out[lib] = Setting(f"libraries.{lib}", intra.value, f"follows intra_op = {intra.value}")
        return out

    def env(self, counts: dict[str, Setting]) -> tuple[dict[str, str], dict[str, str]]:
        env: dict[str, str] = {}
        why: dict[str, str] = {}
        for var, owner in DERIVED_VARS.items():
            key = owner.split(".")[-1]
            env[var] = str(counts[key].value)
            why[var] = f"{owner} = {counts[key].value}"
        rule = self.prof.get("quota_rounding")
        if rule is not None:  # the launched program, and parinfo in it, count usable CPUs the same way
            env[ROUNDING_VAR] = rule
            why[ROUNDING_VAR] = f"quota_rounding: {rule}"
        for var, value in self.prof.get("env", {}).items():
            env[var] = value
            mark = self.prof.mark("env", var)
            why[var] = "set in the profile" + (f" ({mark.path}:{mark.line})" if mark else "")
        self.preload_env(env, why)
        return env, why

    def plan(self) -> Plan:
        prof = self.prof
        spec = self.instance_spec()
        preloads = self.choose_preloads()
        instances: list[InstancePlan] = []
        if spec is None:
            names = {**self.values, "instances": 1, "cores_per_instance": self.values["usable_physical_cores"]}
            counts = self.counts(names, "usable_cpus", quiet=False)
            affinity, affinity_why = self.affinity(counts["intra_op"].value * counts["inter_op"].value)
        else:
            blocks = self.blocks(spec)
            n = len(blocks)
            logical = spec.get("cpus") == "logical_cpus"
            counts = {}
            crowded: dict[tuple[str, int, int], list[int]] = {}
            for i, block in enumerate(blocks):
                names = instance_values(self.facts, block, n, logical)
                mine = self.counts(names, "cores_per_instance", quiet=i > 0)
                for key in ("intra_op", "inter_op"):
                    if mine[key].value > names["usable_cpus"]:
                        crowded.setdefault((key, mine[key].value, names["usable_cpus"]), []).append(i)
                env, _ = self.env(mine)
                own_cpus = tuple(sorted(c for core in block for c in core)) if logical else tuple(b[0] for b in block)
                instances.append(InstancePlan(i, own_cpus, mine["intra_op"].value, mine["inter_op"].value, env,
                                              nodes_of(self.facts, own_cpus)))
                counts = counts or mine
            for (key, value, cpus), which in crowded.items():
                self.notes.append(f"{key} {value} is more than the {plural(cpus, 'CPU')} of "
                                  f"{'instance' if len(which) == 1 else 'instances'} "
                                  f"{', '.join(map(str, which))}: threads will share CPUs")
            sizes = sorted({len(b) for b in blocks})
            if len(sizes) > 1:
                self.notes.append(f"instances have {'/'.join(map(str, sizes))} cores: counts are per instance")
            each = "every CPU" if logical else "one CPU"
            mode = prof.get("affinity", "none")
            if mode in ("compact", "spread"):
                self.notes.append(f"affinity {mode} does not apply with instances: each instance is pinned "
                                  f"to {each} of each of its own cores")
            affinity = None
            affinity_why = (f"per instance: {plural(n, 'instance')}, each pinned to {each} of each of its "
                            f"{'/'.join(map(str, sizes))} {'core' if sizes == [1] else 'cores'}")
        pinned = bool(instances) or affinity is not None
        env, env_why = self.env(counts)
        self.library_notes(counts, env)
        preloads = [self.finish_preload(p, env, pinned) for p in preloads]
        intra = counts["intra_op"]
        if intra.value > self.values["usable_cpus"] and not instances:
            usable = plural(self.values["usable_cpus"], "usable CPU")
            self.notes.append(f"intra_op {intra.value} is more than the {usable}: threads will share CPUs")
        memory, memory_nodes, memory_why = self.memory(affinity, instances)
        return Plan(
            name=prof.get("name", "profile"),
            description=prof.get("description", ""),
            origin=prof.origin,
            intra_op=counts["intra_op"],
            inter_op=counts["inter_op"],
            libraries={lib: counts[lib] for lib in LIBRARIES},
            env=env,
            env_why=env_why,
            affinity=affinity,
            affinity_why=affinity_why,
            instances=tuple(instances),
            notes=tuple(dict.fromkeys(self.notes)),
            preload=tuple(preloads),
            memory=memory,
            memory_nodes=memory_nodes,
            memory_why=memory_why,
        )

    def finish_preload(self, p: Preload, env: dict[str, str], pinned: bool) -> Preload:
        """``p`` with the variables it brought into ``env`` (not those the profile's env sets), and
        for an OpenMP runtime why its threads are left unbound, when they are."""
        own = self.prof.get("env", {})
        why = p.why
        may: tuple[str, ...] = ()
        if p.key == "allocator" and self.allocator is not None and self.allocator.conf_var:
            may = (self.allocator.conf_var,)
        if p.key == "openmp" and self.runtime is not None:
            may = self.runtime.variables
            unbound = self.runtime.unbound_why(pinned)
            why += f"; {unbound}" if unbound else ""
        return Preload(p.key, p.choice, p.path, why, tuple(v for v in may if v in env and v not in own))

    def memory(self, affinity: tuple[int, ...] | None,
               instances: list[InstancePlan]) -> tuple[str, tuple[int, ...], str]:
        """``memory``: the policy, the nodes of the program's CPUs (each instance's are its own), and why."""
        mode = self.prof.get("memory", "none")
        if mode == "none":
            return mode, (), "not set: the kernel's default"
        verb = "bound to" if mode == "local" else "interleaved over"
        if not self.facts.numa_nodes:
            why = self.facts.unknown.get("numa_nodes", "sysfs lists none")
            self.notes.append(f"memory {mode}: this machine's NUMA nodes are unknown ({why}): memory is left to "
                              "the kernel's default policy")
            return mode, (), f"{mode}: NUMA nodes unknown ({why}), so not set"
        if instances:
            return mode, (), f"{mode}: each instance's memory {verb} the NUMA node(s) of its CPUs"
        nodes = nodes_of(self.facts, affinity or self.facts.usable_cpu_list)
        if len(self.facts.numa_nodes) == 1:
            self.notes.append(f"memory {mode}: this machine has one NUMA node, so the policy changes nothing "
                              "here (it is still set, and shows in /proc/PID/numa_maps)")
        return mode, nodes, (f"{mode}: {verb} {'node' if len(nodes) == 1 else 'nodes'} {format_cpu_list(nodes)}, "
                             "those of its CPUs")

    def library_notes(self, counts: dict[str, Setting], env: dict[str, str]) -> None:
        """What each library's record says about the plan's counts (MKL's cap, torch's import)."""
        by_key = {key: counts[key].value for key in LIBRARIES}
        for rec in reg.records():
            note = rec.plan_note(by_key, self.values, env) if rec.plan_note is not None else None
            if note is not None:
                self.notes.append(note)


def resolve(prof: Profile, facts: MachineFacts, *, instances: int | None = None) -> Plan:
    """Resolve a validated profile on ``facts``; raise ProfileError (or UsageError for --instances)."""
    return _Resolver(prof, facts, instances).plan()
