"""Rules over outer threads: a worker's task threads times its pools' threads, and a host's sum of them.

Pure functions over plain dicts: a report's sections (``machine``, ``pools``, ``frameworks``,
``outer``, optionally ``per_thread``) or a fleet worker row of the same shape. They never touch the
process, so they are tested on hand-made rows.
"""
from __future__ import annotations

from typing import Any

from parinfo.diagnostics.findings import Finding

_WHO = {"dask": "dask worker", "ray": "ray worker", "loky": "loky worker", "user": "this process"}

_FIX = {
    "dask": "parinfo.fleet.apply(client, 'single-thread') (or parinfo fleet apply single-thread --dask ADDRESS)",
    "ray": "ray.init(runtime_env=parinfo.fleet.ray_runtime_env('single-thread')), or num_cpus per task "
           "equal to the threads its libraries use",
    "loky": "joblib.parallel_config(inner_max_num_threads=1), or parinfo.apply('single-thread') in the task",
    "user": "parinfo.apply('single-thread') in each outer thread's process, or threadpoolctl.threadpool_limits(1)",
}


def widest_pool(sections: dict[str, Any]) -> tuple[str | None, int]:
    """The pool with the most threads one outer thread can start: (name, count); (None, 1) when none
    holds more than one. Counts read in every executor thread (``per_thread``) are included, since
    OpenMP's limit is per thread."""
    best: tuple[str | None, int] = (None, 1)
    for pool in sections.get("pools") or ():
        n = pool.get("num_threads")
        if isinstance(n, int) and not pool.get("duplicate_of") and n > best[1]:
            best = (pool.get("library"), n)
    for thread in sections.get("per_thread") or ():
        for pool in thread.get("pools") or ():
            n = pool.get("num_threads")
            if isinstance(n, int) and n > best[1]:
                best = (pool.get("library"), n)
    torch = (sections.get("frameworks") or {}).get("torch") or {}
    if isinstance(torch.get("intra_op"), int) and torch["intra_op"] > best[1]:
        best = ("torch intra-op", torch["intra_op"])
    return best


def budget(sections: dict[str, Any]) -> int:
    """The CPUs this process's threads may use: those its framework grants, else its usable CPUs."""
    outer = sections.get("outer") or {}
    usable = int((sections.get("machine") or {}).get("usable_cpus") or 1)
    granted = outer.get("cpus")
    return min(int(granted), usable) if isinstance(granted, int) else usable


def at_once(sections: dict[str, Any]) -> int:
    """Threads that can run at once in this process: outer threads x the widest pool."""
    threads = (sections.get("outer") or {}).get("threads")
    return (threads if isinstance(threads, int) else 1) * widest_pool(sections)[1]


def outer_findings(sections: dict[str, Any]) -> list[Finding]:
    """``outer-times-inner``: the outer threads times a pool's threads exceed the CPUs this process may use."""
    outer = sections.get("outer") or {}
    threads = outer.get("threads")
    pool, inner = widest_pool(sections)
    cpus = budget(sections)
    if not isinstance(threads, int) or inner <= 1 or threads * inner <= cpus:
        return []
    framework = outer.get("framework") or "user"
    who = _WHO.get(framework, framework)
    plural = "s" if cpus != 1 else ""
    where = {"ray": f"the {cpus} CPU{plural} granted to the task",
             "loky": f"the {cpus} CPU{plural} left to each loky worker"}.get(
                 framework, f"{cpus} usable CPU{plural}")
    fit = max(1, cpus // threads)
    return [Finding(
        "outer-times-inner", "warning",
        f"{who}: {threads} task thread{'s' if threads != 1 else ''} x {pool} {inner} threads = "
        f"{threads * inner} threads can run at once on {where}",
        "every task thread that calls into the library runs its own team of threads (or queues on one "
        "spinning pool), so the threads take turns on the CPUs: more CPU time per op, less throughput",
        f"limit {pool} to {fit} thread{'s' if fit != 1 else ''} inside the workers: "
        f"{_FIX.get(framework, _FIX['user'])}",
    )]


def host_summary(host: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One host's row: its workers, their threads at once, and the usable CPUs they share.

    The usable CPUs are the fewest any worker on the host reports (they share one host identity:
    boot, cgroup and cpuset), so the sum is compared with what every worker may use.
    """
    usable = min((int(r.get("machine", {}).get("usable_cpus") or 1) for r in rows), default=1)
    return {
        "host": host,
        "workers": [r.get("worker") for r in rows],
        "usable_cpus": usable,
        "outer_threads": sum((r.get("outer") or {}).get("threads") or 1 for r in rows),
        "threads_at_once": sum(at_once(r) for r in rows),
        "widest_pool": max((widest_pool(r)[1] for r in rows), default=1),
        "framework": next(((r.get("outer") or {}).get("framework") for r in rows
                           if (r.get("outer") or {}).get("framework")), None),
    }


def host_findings(summary: dict[str, Any]) -> list[Finding]:
    """``host-oversubscribed``: the workers of one host together run more threads at once than it
    has usable CPUs, because their pools multiply the task threads. Task threads alone above the
    CPUs (pools at 1) are the cluster's own choice and are not flagged."""
    workers, usable, total = len(summary["workers"]), summary["usable_cpus"], summary["threads_at_once"]
    if workers < 2 or summary["widest_pool"] <= 1 or total <= usable:
        return []
    fit = max(1, usable // max(1, summary["outer_threads"]))
    return [Finding(
        "host-oversubscribed", "warning",
        f"{workers} workers run {total} threads at once "
        f"({summary['outer_threads']} task threads with their pools) on {usable} usable CPUs",
        "workers on one host share its CPUs: each worker's pools are sized for the whole host, so "
        "together they ask for several times the CPUs and every op waits for its threads",
        f"limit the pools to {fit} thread{'s' if fit != 1 else ''} in every worker: "
        f"{_FIX.get(summary.get('framework') or 'user', _FIX['user'])}; or fewer workers or task threads per host",
    )]

