"""Report sections for live evidence (throttling, pressure, stack budget) and for a process read
from outside (``parinfo show --pid``), in the span-list form of render_text."""
from __future__ import annotations

from typing import TYPE_CHECKING

from parinfo.cli.torch_block import human_bytes, plural

if TYPE_CHECKING:
    from parinfo.diagnostics.model import Report, StackBudget
    from parinfo.machine.pressure import CpuCounters, Pressure

Line = list[tuple[str, str]]


def _line(text: str, style: str = "") -> Line:
    return [(text, style)]


def throttling_text(t: CpuCounters) -> str:
    """The cumulative throttling of the cgroup, in one line."""
    if t.unknown:
        return f"unknown ({t.unknown})"
    worst = t.worst
    if worst is None:
        return "none: no CPU quota on this cgroup or its ancestors"
    return (f"{100 * worst.ratio:.0f}% of periods since the cgroup was created ({worst.throttled} of "
            f"{worst.periods}, {worst.throttled_usec / 1e6:.1f} s held back) under "
            f"{worst.quota:g} CPUs ({worst.cgroup})")


def _pressure_text(p: Pressure | str) -> str:
    if isinstance(p, str):
        return p
    full = "" if p.full_avg10 is None else f", all waiting {p.full_avg10:.0f}%"
    return f"some task waiting {p.some_avg10:.0f}% of the last 10 s{full} ({p.source})"


def _stack_text(b: StackBudget) -> list[str]:
    if b.unknown:
        return [f"unknown ({b.unknown})"]
    stack = b.thread_stack
    source = ("RLIMIT_STACK" if b.rlimits is not None and b.rlimits.stack
              else "glibc's default (RLIMIT_STACK unlimited)")
    out = [f"{human_bytes(stack)} per thread ({source})"]
    for row in b.limits:
        need = row.threads * stack if row.threads is not None and stack is not None else "unknown"
        out.append(f"{plural(row.threads, 'thread')} x {human_bytes(stack)} = {human_bytes(need)} "
                   f"against {row.name} {human_bytes(row.bytes)}")
    if len(out) == 1:
        out[0] += "; no memory limit bounds them"
    return out


def live_lines(r: Report) -> list[Line]:
    """The "Live evidence" section, or nothing when the report has none."""
    live = r.live
    if live is None:
        return []
    rows: list[tuple[str, str]] = [("throttling", throttling_text(live.throttling))]
    rows.append(("CPU pressure, machine", _pressure_text(live.pressure.system)))
    rows.append(("CPU pressure, cgroup", _pressure_text(live.pressure.cgroup)))
    mem = live.memory
    why = mem.unknown.get("limit")
    rows.append(("memory limit", f"{human_bytes(mem.limit)} ({mem.limit_source})" if mem.limit is not None
                 else f"unknown ({why})" if why else "none"))
    for i, text in enumerate(_stack_text(live.stack_budget)):
        rows.append(("thread stacks" if i == 0 else "", text))
    tree = live.tree
    if tree is not None and tree.runnable is not None:
        wanting = (f"{tree.runnable:.1f} threads on average over {tree.seconds:g} s "
                   f"({plural(tree.processes, 'process')}, {plural(tree.threads, 'thread')})")
        rows.append(("wanting a CPU", wanting))
        if tree.processes > 1:
            for m in tree.members:
                member = f"pid {m.pid} {m.name}: {plural(m.threads, 'thread')}, {m.running_now} running now"
                rows.append(("", member))
    width = max(len(k) for k, _ in rows)
    return [[], _line("Live evidence", "bold"), *(_line(f"  {k.ljust(width)}   {v}") for k, v in rows)]


def outside_lines(r: Report) -> list[Line]:
    """Which counts a report read from outside could read, which it could not, and how to get the rest."""
    p = r.process
    read = [pool for pool in r.pools if pool.num_threads is not None]
    lines = [[], _line("Thread counts in force", "bold")]
    if read:
        lines.append(_line(f"  read from the process's memory: {len(read)} of {len(r.pools)} pools (above)"))
    lines += [_line(f"  {p.counts}", "dim"), _line(f"  {p.hint}", "dim")]
    return lines


def header(r: Report) -> Line:
    p = r.process
    cmd = " ".join(p.cmdline or ()) or p.name or "?"
    if len(cmd) > 100:
        cmd = cmd[:97] + "..."
    return [("parinfo", "bold"), (f" report for pid {p.pid} ({p.name}), read from outside ", ""),
            (cmd, "dim")]
