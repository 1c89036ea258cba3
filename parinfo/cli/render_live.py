"""Report sections for live evidence (throttling, pressure, stack budget) and for a process read
from outside (``parinfo show --pid``), in the span-list form of render_text."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from parinfo.cli.torch_block import human_bytes, plural

if TYPE_CHECKING:
    from parinfo.diagnostics.report import Report

Line = list[tuple[str, str]]


def _line(text: str, style: str = "") -> Line:
    return [(text, style)]


def throttling_text(t: dict[str, Any]) -> str:
    """The cumulative throttling of the cgroup, in one line."""
    if t.get("unknown"):
        return f"unknown ({t['unknown']})"
    worst = t.get("worst")
    if worst is None:
        return "none: no CPU quota on this cgroup or its ancestors"
    return (f"{100 * worst['ratio']:.0f}% of periods since the cgroup was created ({worst['throttled']} of "
            f"{worst['periods']}, {worst['throttled_usec'] / 1e6:.1f} s held back) under "
            f"{worst['quota']:g} CPUs ({worst['cgroup']})")


def _pressure_text(p: Any) -> str:
    if isinstance(p, str):
        return p
    full = "" if p.get("full_avg10") is None else f", all waiting {p['full_avg10']:.0f}%"
    return f"some task waiting {p['some_avg10']:.0f}% of the last 10 s{full} ({p['source']})"


def _stack_text(b: dict[str, Any]) -> list[str]:
    if b.get("unknown"):
        return [f"unknown ({b['unknown']})"]
    stack = b.get("thread_stack")
    source = "RLIMIT_STACK" if b.get("stack") else "glibc's default (RLIMIT_STACK unlimited)"
    out = [f"{human_bytes(stack)} per thread ({source})"]
    for row in b.get("limits") or ():
        need = row["threads"] * stack
        out.append(f"{plural(row['threads'], 'thread')} x {human_bytes(stack)} = {human_bytes(need)} "
                   f"against {row['name']} {human_bytes(row['bytes'])}")
    if len(out) == 1:
        out[0] += "; no memory limit bounds them"
    return out


def live_lines(r: Report) -> list[Line]:
    """The "Live evidence" section, or nothing when the report has none."""
    live = r.live or {}
    if not live:
        return []
    rows: list[tuple[str, str]] = [("throttling", throttling_text(live.get("throttling") or {}))]
    pressure = live.get("pressure") or {}
    rows.append(("CPU pressure, machine", _pressure_text(pressure.get("system", "unknown"))))
    rows.append(("CPU pressure, cgroup", _pressure_text(pressure.get("cgroup", "unknown"))))
    mem = live.get("memory") or {}
    limit = mem.get("limit")
    why = (mem.get("unknown") or {}).get("limit")
    rows.append(("memory limit", f"{human_bytes(limit)} ({mem.get('limit_source')})" if limit is not None
                 else f"unknown ({why})" if why else "none"))
    for i, text in enumerate(_stack_text(live.get("stack_budget") or {})):
        rows.append(("thread stacks" if i == 0 else "", text))
    tree = live.get("tree")
    if tree:
        wanting = (f"{tree['runnable']:.1f} threads on average over {tree['seconds']:g} s "
                   f"({plural(tree['processes'], 'process')}, {plural(tree['threads'], 'thread')})")
        rows.append(("wanting a CPU", wanting))
        if tree.get("processes", 1) > 1:
            for m in tree.get("members") or ():
                member = f"pid {m['pid']} {m['name']}: {plural(m['threads'], 'thread')}, {m['running_now']} running now"
                rows.append(("", member))
    width = max(len(k) for k, _ in rows)
    return [[], _line("Live evidence", "bold"), *(_line(f"  {k.ljust(width)}   {v}") for k, v in rows)]


def outside_lines(r: Report) -> list[Line]:
    """What a report read from outside cannot say, and how to get the rest."""
    p = r.process
    return [[], _line("Thread counts in force", "bold"), _line(f"  unknown: {p.get('counts')}", "dim"),
            _line(f"  {p.get('hint')}", "dim")]


def header(r: Report) -> Line:
    p = r.process
    cmd = " ".join(p.get("cmdline") or ()) or p.get("name", "?")
    if len(cmd) > 100:
        cmd = cmd[:97] + "..."
    return [("parinfo", "bold"), (f" report for pid {p.get('pid')} ({p.get('name')}), read from outside ", ""),
            (cmd, "dim")]
