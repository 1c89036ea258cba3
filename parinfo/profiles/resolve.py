"""Resolve a validated profile on one machine's facts into a Plan.

Counts are evaluated with the machine's numbers (each Setting's ``why`` shows the expression and
the numbers it used), results below 1 are raised to 1 with a note, results too large for the
machine are an error, and instances and affinity become explicit CPU lists
(:mod:`parinfo.profiles.layout`); the machine's numbers are :mod:`parinfo.profiles.machine_values`'s,
the preloaded libraries :mod:`parinfo.profiles.preloads`'s.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from parinfo.machine.cpulist import format_cpu_list
from parinfo.machine.pod_cpus import of_facts
from parinfo.machine.rounding import ROUNDING_VAR
from parinfo.process import libraries as reg
from parinfo.profiles import expr
from parinfo.profiles.grammar import DERIVED_VARS, LIBRARIES, MAX_COUNT
from parinfo.profiles.layout import Layout
from parinfo.profiles.machine_values import fact_values, instance_values, nodes_of
from parinfo.profiles.model import Profile, Written
from parinfo.profiles.plan import InstancePlan, Plan, Setting
from parinfo.profiles.preloads import Preloads
from parinfo.records.source import profile as profile_source
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

COUNT_FACTOR = 64  # a count above 64 x logical CPUs is a mistake, not a plan


class _Resolver:
    """One profile resolved on one machine: the counts here, the preloads and the layout beside."""

    def __init__(self, prof: Profile, facts: MachineFacts, instances: int | None) -> None:
        self.prof = prof
        rule = prof.quota_rounding
        if rule is not None and rule != facts.quota_rounding:
            facts = facts.rounded(rule, profile_source(prof.name or "profile", "quota_rounding"))
        self.facts = facts
        self.override = instances
        self.values, notes = fact_values(facts)
        self.pod_why = str(of_facts(facts)[1])
        self.notes: list[str] = list(notes)
        self.limit = min(MAX_COUNT, COUNT_FACTOR * self.values["logical_cpus"])
        self.preloads = Preloads(prof, self.notes)
        self.layout = Layout(prof, facts, instances, self.limit, self.values, self.notes, self.count)

    # -- counts ---------------------------------------------------------------------------------

    def count(self, keypath: tuple[str, ...], raw: Written | None, names: dict[str, int], *,
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
                if isinstance(exc, expr.ZeroDivisor):
                    fix = "wrap the divisor in max(1, ...) so that it is at least 1 on every machine"
                raise self.prof.error(keypath, f"'{label}': {shown} on this machine: {exc.message} at column "
                                      f"{exc.column}", fix, exc.column) from None
            value = res.value
            steps = [raw] + [t for t in (res.substituted, str(value)) if t != raw]
            why = " = ".join(dict.fromkeys(steps)) if len(steps) > 1 else f"{raw} = {value}"
            if "pod_cpus" in res.used:  # the one fact whose rule has three cases: say which
                why += f" ({self.pod_why})"
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

    # -- the plan -------------------------------------------------------------------------------

    def counts(self, names: dict[str, int], default: str, quiet: bool) -> dict[str, Setting]:
        prof = self.prof
        out = {
            "intra_op": self.count(("intra_op",), prof.intra_op, names, default=default, quiet=quiet),
            "inter_op": self.count(("inter_op",), prof.inter_op, names, default=default, quiet=quiet),
        }
        libs = prof.libraries
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
        rule = self.prof.quota_rounding
        if rule is not None:  # the launched program, and parinfo in it, count usable CPUs the same way
            env[ROUNDING_VAR] = rule
            why[ROUNDING_VAR] = f"quota_rounding: {rule}"
        policy = self.prof.wait_policy
        for var, value in reg.wait_settings(policy or "default").items():
            env[var] = value
            why[var] = f"wait_policy: {policy}"
        for var, value in self.prof.env.items():
            env[var] = value
            mark = self.prof.mark("env", var)
            why[var] = "set in the profile" + (f" ({mark.path}:{mark.line})" if mark else "")
        self.preloads.env(env, why)
        return env, why

    def plan(self) -> Plan:
        prof = self.prof
        spec = self.layout.instance_spec()
        preloads = self.preloads.choose()
        instances: list[InstancePlan] = []
        if spec is None:
            names = {**self.values, "instances": 1, "cores_per_instance": self.values["usable_physical_cores"]}
            counts = self.counts(names, "usable_cpus", quiet=False)
            affinity, affinity_why = self.layout.affinity(counts["intra_op"].value * counts["inter_op"].value)
        else:
            blocks = self.layout.blocks(spec)
            n = len(blocks)
            logical = spec.logical
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
            mode = prof.affinity_word
            if mode in ("compact", "spread"):
                self.notes.append(f"affinity {mode} does not apply with instances: each instance is pinned "
                                  f"to {each} of each of its own cores")
            affinity = None
            affinity_why = (f"per instance: {plural(n, 'instance')}, each pinned to {each} of each of its "
                            f"{'/'.join(map(str, sizes))} {'core' if sizes == [1] else 'cores'}")
        pinned = bool(instances) or affinity is not None
        env, env_why = self.env(counts)
        self.library_notes(counts, env)
        preloads = [self.preloads.finish(p, env, pinned) for p in preloads]
        intra = counts["intra_op"]
        if intra.value > self.values["usable_cpus"] and not instances:
            usable = plural(self.values["usable_cpus"], "usable CPU")
            self.notes.append(f"intra_op {intra.value} is more than the {usable}: threads will share CPUs")
        memory, memory_nodes, memory_why = self.memory(affinity, instances)
        return Plan(
            name=prof.name or "profile",
            description=prof.description or "",
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
            threads=prof.threads,
        )

    def memory(self, affinity: tuple[int, ...] | None,
               instances: list[InstancePlan]) -> tuple[str, tuple[int, ...], str]:
        """``memory``: the policy, the nodes of the program's CPUs (each instance's are its own), and why."""
        mode = self.prof.memory_word
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
            note = rec.plan_note(by_key, self.values, env, self.facts, written=tuple(self.prof.libraries))
            if note is not None:
                self.notes.append(note)


def resolve(prof: Profile, facts: MachineFacts, *, instances: int | None = None) -> Plan:
    """Resolve a validated profile on ``facts``; raise ProfileError (or UsageError for --instances)."""
    return _Resolver(prof, facts, instances).plan()
