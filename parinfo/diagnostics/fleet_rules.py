"""Rules over outer threads: a worker's task threads times its pools' threads, and the sum of them over a host
(a fleet's host, or one cgroup of this machine read by ``parinfo host``).

Pure functions over a typed :class:`~parinfo.diagnostics.model.Report` (its ``machine``, ``pools``,
``frameworks`` and ``outer`` sections, with the counts read in each executor thread when there are
some) and over fleet rows (:mod:`parinfo.diagnostics.fleet_rows`, whose report has the same
sections). They never touch the process, so they are tested on hand-made rows.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from parinfo.diagnostics.findings import Finding, Severity
from parinfo.diagnostics.model import Report
from parinfo.safe_text import plural

if TYPE_CHECKING:  # the fleet's rows are loaded with the fleet, not with every report
    from parinfo.diagnostics.fleet_rows import HostSummary, ProcessLoad, ThreadPools, WorkerRow

_WHO = {"dask": "dask worker", "ray": "ray worker", "loky": "loky worker", "user": "this process"}

_FIX = {
    "dask": "parinfo.fleet.apply(client, 'single-thread') (or parinfo fleet apply single-thread --dask ADDRESS)",
    "ray": "ray.init(runtime_env=parinfo.fleet.ray_runtime_env('single-thread')), or num_cpus per task "
           "equal to the threads its libraries use",
    "loky": "joblib.parallel_config(inner_max_num_threads=1), or parinfo.apply('single-thread') in the task",
    "user": "parinfo.apply('single-thread') in each outer thread's process, or threadpoolctl.threadpool_limits(1)",
}


def widest_pool(r: Report, per_thread: Sequence[ThreadPools] = ()) -> tuple[str | None, int]:
    """The pool with the most threads one outer thread can start: (name, count); (None, 1) when none
    holds more than one. Counts read in every executor thread (``per_thread``) are included, since
    OpenMP's limit is per thread."""
    best: tuple[str | None, int] = (None, 1)
    for pool in r.pools:
        n = pool.num_threads
        if n is not None and not pool.duplicate_of and n > best[1]:
            best = (pool.library, n)
    for thread in per_thread:
        for pool in thread.pools:
            n = pool.num_threads
            if n is not None and n > best[1]:
                best = (pool.library, n)
    torch = r.frameworks.torch
    if torch is not None and torch.intra_op is not None and torch.intra_op > best[1]:
        best = ("torch intra-op", torch.intra_op)
    return best


def budget(r: Report) -> int:
    """The CPUs this process's threads may use: those its framework grants, else its usable CPUs."""
    usable = r.machine.usable_cpus
    granted = None if r.outer is None else r.outer.cpus
    return min(granted, usable) if granted is not None else usable


def _outer_threads(r: Report) -> int | None:
    return None if r.outer is None else r.outer.threads


def at_once(r: Report, per_thread: Sequence[ThreadPools] = ()) -> int:
    """Threads that can run at once in this process: outer threads x the widest pool."""
    return (_outer_threads(r) or 1) * widest_pool(r, per_thread)[1]


def outer_findings(r: Report, per_thread: Sequence[ThreadPools] = ()) -> list[Finding]:
    """``outer-times-inner``: the outer threads times a pool's threads exceed the CPUs this process
    may use (with ``per_thread``: the counts each executor thread saw count too)."""
    threads = _outer_threads(r)
    pool, inner = widest_pool(r, per_thread)
    cpus = budget(r)
    if threads is None or inner <= 1 or threads * inner <= cpus:
        return []
    framework = (r.outer.framework if r.outer is not None else None) or "user"
    who = _WHO.get(framework, framework)
    where = {"ray": f"the {plural(cpus, 'CPU')} granted to the task",
             "loky": f"the {plural(cpus, 'CPU')} left to each loky worker"}.get(
                 framework, plural(cpus, "usable CPU"))
    fit = max(1, cpus // threads)
    return [Finding(
        "outer-times-inner", Severity.WARNING,
        f"{who}: {plural(threads, 'task thread')} x {pool} {plural(inner, 'thread')} = "
        f"{plural(threads * inner, 'thread')} can run at once on {where}",
        "every task thread that calls into the library runs its own team of threads (or queues on one "
        "spinning pool), so the threads take turns on the CPUs: more CPU time per op, less throughput",
        f"limit {pool} to {plural(fit, 'thread')} inside the workers: "
        f"{_FIX.get(framework, _FIX['user'])}",
    )]


def worker_findings(row: WorkerRow) -> list[Finding]:
    """``outer-times-inner`` for a fleet worker, over the counts each of its executor threads saw."""
    return outer_findings(row.report, row.per_thread or ())


def host_summary(host: str, rows: Sequence[WorkerRow]) -> HostSummary:
    """One host's row: its workers, their threads at once, and the usable CPUs they share; its
    findings are :func:`host_findings`'s.

    The usable CPUs are the fewest any worker on the host reports (they share one host identity:
    boot, cgroup and cpuset), so the sum is compared with what every worker may use.
    """
    from parinfo.diagnostics.fleet_rows import HostSummary

    frameworks = [w.report.outer.framework for w in rows if w.report.outer is not None and w.report.outer.framework]
    return HostSummary(
        host=host,
        hostname=rows[0].host.hostname if rows else host,
        workers=[w.worker for w in rows],
        usable_cpus=min((w.report.machine.usable_cpus for w in rows), default=1),
        outer_threads=sum(_outer_threads(w.report) or 1 for w in rows),
        threads_at_once=sum(at_once(w.report, w.per_thread or ()) for w in rows),
        widest_pool=max((widest_pool(w.report, w.per_thread or ())[1] for w in rows), default=1),
        framework=frameworks[0] if frameworks else None,
    )


def host_findings(summary: HostSummary) -> list[Finding]:
    """``host-oversubscribed``: the workers of one host together run more threads at once than it
    has usable CPUs, because their pools multiply the task threads. Task threads alone above the
    CPUs (pools at 1) are the cluster's own choice and are not flagged."""
    workers, usable, total = len(summary.workers), summary.usable_cpus, summary.threads_at_once
    if workers < 2 or summary.widest_pool <= 1 or total <= usable:
        return []
    fit = max(1, usable // max(1, summary.outer_threads))
    return [Finding(
        "host-oversubscribed", Severity.WARNING,
        f"{plural(workers, 'worker')} run {plural(total, 'thread')} at once "
        f"({plural(summary.outer_threads, 'task thread')} with their pools) on {plural(usable, 'usable CPU')}",
        "workers on one host share its CPUs: each worker's pools are sized for the whole host, so "
        "together they ask for several times the CPUs and every op waits for its threads",
        f"limit the pools to {plural(fit, 'thread')} in every worker: "
        f"{_FIX.get(summary.framework or 'user', _FIX['user'])}; or fewer workers or task threads per host",
    )]



def _pids(loads: Sequence[ProcessLoad]) -> str:
    shown = [str(p.pid) for p in loads[:12]]
    return ", ".join(shown) + (f" and {len(loads) - 12} more" if len(loads) > 12 else "")


def cgroup_findings(where: str, usable: int, loads: Sequence[ProcessLoad]) -> list[Finding]:
    """``host-oversubscribed`` for the processes of one cgroup (``where``) read from outside: their
    widest pools times their outer threads, summed, exceed the cgroup's ``usable`` CPUs. The same
    meaning as for the workers of a fleet host: several processes each size their pools for the
    CPUs they all share. ``loads`` are the processes with native pools loaded. Needs two or more of
    them, one pool of more than one thread, and more threads than CPUs (pools at 1 in more processes
    than CPUs are the processes' own choice, as for a fleet); a process whose pools could not be
    read counts for nothing and is named as unknown, never guessed. Only counts in force are summed:
    a count predicted from a launch environment is no evidence, and where predictions alone would
    exceed the CPUs the rule says so in an ``info`` note (:func:`_predicted_note`), never a warning."""
    busy = [p for p in loads if p.unknown is None and p.threads is not None]
    total = sum(p.threads * p.outer for p in busy if p.threads is not None)
    if len(busy) < 2 or max(p.threads or 1 for p in busy) <= 1 or total <= usable:
        return _predicted_note(where, usable, loads, total)
    outer = sum(p.outer for p in busy)
    share = max(1, usable // outer)
    pools = ", ".join(f"{p.pid} {p.pool or 'pools'}={p.threads}" for p in busy[:12])
    unknown = [p for p in loads if p.unknown is not None]
    message = (f"{where}: {plural(len(busy), 'process')} (pids {_pids(busy)}) can run "
               f"{plural(total, 'thread')} at once "
               f"({pools}) on {plural(usable, 'usable CPU')}")
    if unknown:
        message += f"; {len(unknown)} more not counted, unknown (permission): pids {_pids(unknown)}"
    variables = list(dict.fromkeys(v for p in busy for v in p.variables))
    assign = " ".join(f"{v}={share}" for v in variables)
    fixes = [f"give each process {plural(share, 'thread')} per pool: start it with {assign}"]
    families: dict[int, list[ProcessLoad]] = {}
    for p in busy:
        if len(p.family) > 1 and p.parent is not None:
            families.setdefault(p.parent, []).append(p)
    for parent, members in families.items():
        widest = max(p.threads or 1 for p in members)
        adopter = members[0].adopted_by
        if adopter is not None:
            fixes.append(f"the {plural(len(members), 'process')} under {adopter} are not workers it started with one "
                         f"environment (it took them in when their parent exited, or starts each on its own): "
                         f"set {assign} where each one is started (its service unit or start command) and "
                         "restart it, or stop the ones left over")
            continue
        fixes.append(f"for the {plural(len(members), 'worker')} of pid {parent}: set it in the environment "
                     f"pid {parent} starts them with (they inherit it), or run at most "
                     f"{plural(max(1, usable // widest), 'worker')} there")
    by_command: dict[str, list[ProcessLoad]] = {}
    for p in busy:
        if p.command:
            by_command.setdefault(p.command, []).append(p)
    for command, copies in by_command.items():
        if 1 < len(copies) <= usable and not any(p.parent in families for p in copies):
            fixes.append(f"launch the {len(copies)} copies as `parinfo apply multi-instance --instances "
                         f"{len(copies)} -- {command}` (each pinned to its share of the CPUs, with counts to match)")
    return [Finding(
        "host-oversubscribed", Severity.WARNING, message,
        "processes in one cgroup share its CPUs: each sizes its pools for all of them, so together they ask "
        "for several times the CPUs and every op waits for its threads (or, under a quota, the cgroup is throttled)",
        "; ".join(fixes),
    )]


def _predicted_note(where: str, usable: int, loads: Sequence[ProcessLoad], in_force: int) -> list[Finding]:
    """``host-oversubscribed-predicted`` (info): the processes would exceed ``usable`` CPUs only if the
    counts predicted from their launch environments hold, which nothing read confirms (a process may
    have set its own count since it started); the note says how to confirm them."""
    def widest(p: ProcessLoad) -> int:
        return max(p.threads or 0, p.predicted or 0)

    known = [p for p in loads if p.unknown is None and widest(p) > 0]
    raised = [p for p in known if p.predicted is not None]
    total = sum(widest(p) * p.outer for p in known)
    if not raised or len(known) < 2 or max(widest(p) for p in known) <= 1 or total <= usable:
        return []
    share = max(1, usable // sum(p.outer for p in known))
    pools = ", ".join(f"{p.pid} {p.predicted_pool or 'pools'}={p.predicted}" for p in raised[:12])
    variables = list(dict.fromkeys(v for p in raised for v in p.variables))
    assign = " ".join(f"{v}={share}" for v in variables) or f"counts of {share}"
    return [Finding(
        "host-oversubscribed-predicted", Severity.INFO,
        f"{where}: a prediction, not a reading: {len(known)} processes could run up to {total} threads at once "
        f"on {plural(usable, 'usable CPU')} if the counts their launch environments ask for hold ({pools}); "
        f"the counts in force read add up to {in_force}",
        "a count predicted from a launch environment is not read from the process: it may have set its own "
        "since it started (threadpoolctl, torch.set_num_threads), so this alone is no evidence of oversubscription",
        f"confirm the counts: `parinfo host --attach` reads them inside each Python 3.14+ process; or start "
        f"the processes with the count they should run set explicitly ({assign})",
    )]
