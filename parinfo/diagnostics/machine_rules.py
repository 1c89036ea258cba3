"""The rules over the machine a process runs on: a fractional CPU quota and how it is rounded, a
scheduler that leaves threads unbound, invalid machine variables, a free-threaded Python whose GIL
came back. :data:`parinfo.diagnostics.process_rules.RULES` lists them with every other rule.
"""
from __future__ import annotations

from collections import Counter

from parinfo.diagnostics.findings import Finding, Severity
from parinfo.diagnostics.model import Report
from parinfo.machine import rounding, scheduler
from parinfo.safe_text import plural


def fractional_quota(r: Report) -> list[Finding]:
    """A fractional quota: runtimes round it differently, so the process's pools may disagree on how
    many CPUs there are. Says parinfo's rule, every runtime's answer, and the number each count in
    force uses."""
    m = r.machine
    quota, usable = m.quota, m.usable_cpus
    cpus = len(m.usable_cpu_list or m.affinity)
    if quota is None or quota == int(quota) or (cpus and rounding.round_quota(quota, "floor") >= cpus):
        return []  # a whole quota, or fewer CPUs than the quota: every rule gives the same number
    answers = m.usable_by_rule
    if answers and set(answers.values()) == {usable}:
        return []
    runtimes = ", ".join(f"{rounding.RUNTIMES[k]} {answers[k]}" for k in rounding.RUNTIMES if k in answers)
    groups: dict[int, list[str]] = {}
    owners = Counter(row.library for row in r.settings)
    for row in r.settings:
        if row.count is not None:
            name = row.library + (f" [{row.owner}]" if owners[row.library] > 1 and row.owner else "")
            groups.setdefault(row.count, []).append(name)
    here = "; ".join(f"{n} for {', '.join(names)}" for n, names in sorted(groups.items()))
    message = (f"the cgroup CPU quota is {plural(quota, 'CPU', 'g')}: parinfo counts "
               f"{plural(usable, 'usable CPU')} ({m.quota_rounding}, {m.quota_rounding_source})")
    if runtimes:
        message += f"; by their own rules {runtimes}"
    if here:
        message += f"; counts in force here: {here}"
    down, up = rounding.round_quota(quota, "floor"), rounding.round_quota(quota, "ceil")
    why, fix = _rounding_trade(quota, down, up, m.quota_rounding)
    return [Finding("fractional-quota", Severity.INFO, message, why, fix)]

def _rounding_trade(quota: float, down: int, up: int, rule: str | None) -> tuple[str, str]:
    """Why the rounding matters and what to do, for a fractional ``quota``: below one CPU every
    rule gives 1 thread, and that one thread outruns the quota, so only a bigger quota helps."""
    var = rounding.ROUNDING_VAR
    if quota < 1:
        return (f"below one CPU every rounding gives 1 thread, and 1 busy thread spends the {quota:g}-CPU "
                f"quota in {quota:.0%} of each period and waits for the rest; a runtime that counts more "
                "threads only makes more of them wait",
                "where throttling hurts (latency, barriers), give the cgroup at least 1 CPU: no rounding "
                "avoids it below one")
    why = (f"floor never throttles: {plural(down, 'busy thread')} use{'s' if down == 1 else ''} {down} of the "
           f"{quota:g} CPUs each period and leave{'s' if down == 1 else ''} {quota - down:g} CPU unused; ceil "
           f"uses it, but {plural(up, 'busy thread')} spend the quota early in each period and all of them "
           "wait for the next one")
    if rule == "floor":
        return why, (f"keep floor where latency matters; to use the fraction, set {var}=ceil or "
                     f"'quota_rounding: ceil' in a profile, or give the cgroup a whole number of CPUs ({up})")
    return why, (f"where throttling hurts (latency, barriers), set {var}=floor or 'quota_rounding: floor' "
                 f"in a profile ({plural(down, 'thread')}), or give the cgroup a whole number of CPUs")

def scheduler_unbound(r: Report) -> list[Finding]:
    """A Slurm job given fewer CPUs than its affinity mask holds: the job is not bound to them."""
    m = r.machine
    cpus = len(m.usable_cpu_list or m.affinity)
    if m.allocation is None or m.allocation >= cpus:
        return []
    return [Finding(
        "scheduler-unbound", Severity.WARNING,
        f"the job was allocated {plural(m.allocation, 'CPU')} "
        f"({m.allocation_source}) but this process may run on {cpus}: the job is not bound to its CPUs",
        f"libraries that size their pools from the CPU count or the affinity (OpenMP runtimes, BLAS, "
        f"torch, os.cpu_count()) start up to {cpus} threads on {plural(m.allocation, 'allocated CPU')} and "
        "oversubscribe the node; parinfo's own counts follow the allocation",
        f"bind the job's tasks to their CPUs: `{scheduler.BIND_FIX} ...` (the cluster needs a task/affinity "
        f"or task/cgroup plugin), or run under `parinfo apply container` so that every count follows the "
        f"{plural(m.allocation, 'usable CPU')}",
    )]

def invalid_machine_variables(r: Report) -> list[Finding]:
    """A scheduler variable or PARINFO_QUOTA_ROUNDING with garbage in it: ignored when counting CPUs."""
    out = []
    for name, why in r.machine.invalid.items():
        if name == rounding.ROUNDING_VAR:
            ignored = f"parinfo ignored it and rounded the CPU quota with {rounding.DEFAULT}"
            fix = f"unset {name} or set it to one of {', '.join(rounding.ROUNDINGS)}"
        else:
            ignored = "parinfo ignored it when counting the job's CPUs (the next Slurm variable, if any, counts)"
            fix = f"unset {name} or give it a valid value (check the job script and how the job was started)"
        out.append(Finding("invalid-variable", Severity.WARNING, f"{name} is invalid: {why}", ignored, fix))
    return out

def free_threaded(r: Report) -> list[Finding]:
    """A free-threaded interpreter: Python threads x a per-thread pool above the usable CPUs while
    the GIL is off; and, on such a build, the GIL turned back on by a module's import."""
    py = r.backend.python
    if py is None or py.free_threaded_build is not True:
        return []
    usable = r.machine.usable_cpus
    out = []
    if py.gil_off and py.threads_at_once is not None and py.threads_at_once > usable and py.per_thread_pool \
            and r.teams is None:  # with each thread's own team known, teams-oversubscribed says it
        fit = max(1, usable // max(1, py.python_threads or 1))
        out.append(Finding(
            "free-threaded-oversubscribed", Severity.WARNING,
            f"{plural(py.python_threads, 'Python thread')} x {py.per_thread_pool} "
            f"{plural(py.per_thread_threads, 'thread')} = {plural(py.threads_at_once, 'thread')} can run at once "
            f"on {plural(usable, 'usable CPU')} (free-threaded build, GIL off)",
            "without the GIL the Python threads run at once, and each one that calls a library whose limit "
            "holds per calling thread (OpenMP, torch) starts a team of its own",
            f"limit {py.per_thread_pool} to {plural(fit, 'thread')} in the threads that call it "
            "(threadpoolctl.threadpool_limits inside each thread, or parinfo.apply('single-thread')), or run "
            "fewer Python threads",
        ))
    if py.gil_enabled is True and py.gil_reenabled_by:
        out.append(Finding(
            "gil-reenabled", Severity.INFO,
            f"the GIL is on again in this free-threaded interpreter: importing {py.gil_reenabled_by} turned it on",
            "an extension module that does not declare it runs without the GIL turns the GIL on for the rest "
            "of the process: Python threads take turns again",
            f"use a build of {py.gil_reenabled_by.split('.')[0]} that supports free threading, or keep the GIL "
            "off at your own risk with -X gil=0",
        ))
    return out
