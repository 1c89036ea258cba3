"""The rules over the team each thread gets (the report's ``teams`` section): a limit set in one
thread that does not reach the threads of a thread pool, a shared pool that several of them call,
and the teams of all those threads together above the usable CPUs.
:data:`parinfo.diagnostics.process_rules.RULES` lists them with every other rule.
"""
from __future__ import annotations

from parinfo.diagnostics.findings import Finding, Severity
from parinfo.diagnostics.model import Report
from parinfo.process import libraries as reg
from parinfo.process.thread_teams import Column, ThreadTeam, ThreadTeams
from parinfo.safe_text import plural

#: How to put a limit into the threads that call, in the words of every finding here.
PER_THREAD_FIX = ("set the limit where the calls happen: "
                  "ThreadPoolExecutor(initializer=parinfo.worker_initializer({n})), parinfo.thread_limits({n}) "
                  "around the task, or parinfo.limit_new_threads({n}) before the pool starts (a profile's "
                  "threads: every); or set {var}={n} before the process starts, "
                  "the default of every thread")


def _fix(n: int) -> str:
    return PER_THREAD_FIX.format(n=n, var=reg.family(reg.GnuOpenMP).precedence[0])


def _label(col: Column, teams: ThreadTeams) -> str:
    same = [c for c in teams.columns if c.pool == col.pool]
    if len(same) < 2 or not col.filepath:
        return col.pool
    return f"{col.pool} ({col.filepath.rsplit('/', 1)[-1]})"


def _names(threads: list[ThreadTeam], most: int = 3) -> str:
    shown = [t.name for t in threads[:most]]
    return ", ".join(shown) + (f" and {len(threads) - most} more" if len(threads) > most else "")


def _count(thread: ThreadTeam, col: Column) -> int | None:
    return thread.team(col.pool, col.filepath)


def limit_not_in_workers(r: Report) -> list[Finding]:
    """A per-thread pool limited here below what the threads of a thread pool get."""
    teams = r.teams
    here = None if teams is None else teams.here
    if teams is None or here is None:
        return []
    parts, missed, low = [], {}, 1 << 30
    for col in teams.columns:
        mine = _count(here, col)
        if not col.per_thread or mine is None:
            continue
        above = [t for t in teams.workers if (_count(t, col) or 0) > mine]
        if above:
            counts = sorted({_count(t, col) or 0 for t in above})
            parts.append(f"{_label(col, teams)} {mine} here, {'/'.join(map(str, counts))} there")
            missed.update({t.name: t for t in above})
            low = min(low, mine)
    if not parts:
        return []
    threads = list(missed.values())
    return [Finding(
        "limit-not-in-workers", Severity.WARNING,
        f"a limit set in {here.name} does not reach {plural(len(threads), 'thread')} of a thread pool "
        f"({_names(threads)}): {'; '.join(parts)}",
        "these pools hold a limit per calling thread (docs/scope.md), so a limit set in one thread, as "
        "threadpool_limits does, leaves every other thread at its own count: each thread of the pool that "
        "calls them starts a team of that size",
        _fix(low),
    )]


def shared_pool_callers(r: Report) -> list[Finding]:
    """One shared pool (OpenBLAS built with pthreads) that several threads of a thread pool call."""
    teams = r.teams
    if teams is None or len(teams.workers) < 2:
        return []
    out = []
    for col in teams.columns:
        n = None if teams.here is None else _count(teams.here, col)
        if not col.shared or n is None or n < 2:
            continue
        out.append(Finding(
            "shared-pool-callers", Severity.INFO,
            f"{plural(len(teams.workers), 'thread')} of a thread pool share {_label(col, teams)}'s one pool of "
            f"{plural(n, 'thread')}",
            f"{col.pool} keeps one pool of threads for the whole process: the threads that call it at once do "
            "not each get a team of its count, and no per-thread limit can split it between them "
            "(threadpoolctl#220)",
            f"use a build of {col.pool} whose limit holds per calling thread (its OpenMP build: docs/scope.md "
            "says which), or fewer calling threads; its one count is for all of them together",
        ))
    return out


def _widest(thread: ThreadTeam, teams: ThreadTeams) -> tuple[int, str | None]:
    """The most threads one call of this thread can run (itself included), and which pool."""
    best: tuple[int, str | None] = (1, None)
    for col in teams.columns:
        n = _count(thread, col)
        if col.per_thread and n is not None and n > best[0]:
            best = (n, _label(col, teams))
    return best


def teams_oversubscribed(r: Report) -> list[Finding]:
    """This thread and the threads of thread pools, each with its own team, above the usable CPUs."""
    teams = r.teams
    if teams is None or not teams.workers:
        return []
    callers = ([teams.here] if teams.here is not None else []) + teams.workers
    widest = [_widest(t, teams) for t in callers]
    total = sum(n for n, _ in widest)
    usable = r.machine.usable_cpus
    if total <= usable:
        return []
    pools = sorted({p for _, p in widest if p})
    py = r.backend.python
    gil = " (free-threaded, GIL off: their Python code runs at once too)" if py is not None and py.gil_off else ""
    fit = max(1, usable // len(callers))
    return [Finding(
        "teams-oversubscribed", Severity.WARNING,
        f"{plural(len(callers), 'calling thread')} with their own teams of {', '.join(pools)} can run "
        f"{' + '.join(str(n) for n, _ in widest)} = {plural(total, 'thread')} at once on "
        f"{plural(usable, 'usable CPU')}{gil}",
        "a native call releases the GIL, and each calling thread's team of a per-thread pool is its own: "
        "the threads of a thread pool that call at once multiply their teams",
        _fix(fit) + "; or run fewer threads",
    )]
