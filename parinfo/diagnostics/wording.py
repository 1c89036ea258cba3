"""How the report says a value to people: one wording for every front end (text, HTML, the
torch-style block), so a count, a quota or a pool reads the same wherever the report is shown."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from parinfo.process.libraries import find
from parinfo.records.source import Kind
from parinfo.records.unknown import Unknown
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.diagnostics.parts import StackBudget
    from parinfo.machine.pressure import CpuCounters, Pressure
    from parinfo.machine.topology import MachineFacts
    from parinfo.process.interpreter import InterpreterFacts
    from parinfo.process.pools import PoolRow
    from parinfo.process.probing import Probes


def show_value(value: Any, unknown: dict[str, str] | None = None, key: str | None = None) -> str:
    """A value for people: None becomes "unknown (reason)" when the reason is known."""
    if value is None:
        reason = (unknown or {}).get(key or "")
        return f"unknown ({reason})" if reason else "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def human_bytes(value: Any) -> str:
    """32768 -> "32 KiB"; anything not an int is shown as it is."""
    if not isinstance(value, int):
        return str(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB" or value % 1024:
            return f"{value} {unit}"
        value //= 1024
    return str(value)


def quota_text(m: MachineFacts) -> str:
    """The cgroup CPU quota and the file that decided it, or why it is unknown."""
    unknown = m.unknown.get("quota")
    text = plural(m.quota, "CPU", "g") if m.quota is not None else f"unknown ({unknown})" if unknown else "none"
    if m.quota_source.kind is not Kind.NONE:
        text += f" ({m.quota_source})"
    if m.cgroup_version:
        text += f", cgroup {m.cgroup_version}"
    return text


def pool_title(pool: PoolRow) -> str:
    """One line naming a native pool: library, version, threading layer, owner package."""
    lib = pool.library or pool.internal_api or "?"
    rec = find(lib)
    bits = [rec.label if rec is not None else lib]
    if pool.version:
        bits.append(pool.version)
    extra = [x for x in (pool.threading_layer, pool.architecture) if x]
    if extra:
        bits.append(f"({', '.join(extra)})")
    if pool.owner:
        bits.append(f"[{pool.owner}]")
    if pool.duplicate_of:
        bits.append("(another copy)")
    if pool.pid is not None:  # a process tree's report: whose pool it is
        bits.insert(0, f"pid {pool.pid}:")
    return " ".join(bits)


def pool_count(p: PoolRow) -> tuple[str, str]:
    """(count, where it comes from) of a pool row: seen in force here, or, for a process read from
    outside, read from its memory, asked for by its launch environment (never shown as in force),
    or unknown with the reason."""
    if p.count_source is None:
        count = "count unknown" if p.num_threads is None else plural(p.num_threads, "thread")
        return count, f"seen by {p.seen_by}"
    if p.num_threads is not None:
        return plural(p.num_threads, "thread"), p.count_source.text
    if p.launch_count is not None:
        return (plural(p.launch_count, "thread") + " at launch",
                p.count_source.text + (f" ({p.launch_from})" if p.launch_from else ""))
    return "count unknown", p.count_source.text


def python_text(py: InterpreterFacts) -> str:
    """The interpreter's line: its build, the GIL now and who asked, Python threads x pools."""
    if py.free_threaded_build is None:
        build = "build unknown"
    else:
        build = "free-threaded build" if py.free_threaded_build else "default build (GIL)"
    if py.free_threaded_build is not True:
        return build
    gil = {True: "GIL on", False: "GIL off", None: "GIL state unknown"}[py.gil_enabled]
    parts = [build, gil]
    if py.gil_requested_by:
        parts.append(f"asked by {py.gil_requested_by}")
    if py.gil_reenabled_by:
        parts.append(f"turned on by importing {py.gil_reenabled_by}")
    if py.threads_at_once is not None:
        parts.append(f"{plural(py.python_threads, 'Python thread')} x {py.per_thread_pool or 'per-thread pools'} "
                     f"{py.per_thread_threads or 1} = {plural(py.threads_at_once, 'thread')} at once")
    return ", ".join(parts)


def probes_text(p: Probes) -> str:
    """Which modules the report imported to see their pools, and which it could not."""
    parts = []
    if p.imported:
        parts.append("imported to probe: " + ", ".join(p.imported))
    if p.already_imported:
        parts.append("already imported: " + ", ".join(p.already_imported))
    for mod, why in p.failed.items():
        parts.append(f"could not import {mod}: {why}")
    return "; ".join(parts) or "no module imported to probe"


#: A thread's state letter (/proc/PID/task/TID/stat) in words.
THREAD_STATES = {"R": "running or runnable", "S": "sleeping", "D": "in uninterruptible wait", "T": "stopped",
                 "t": "stopped by a tracer", "Z": "zombie", "I": "idle"}


def throttling_text(t: CpuCounters) -> str:
    """The cumulative throttling of the cgroup, in one line."""
    if t.unknown:
        return f"unknown ({t.unknown})"
    worst = t.worst
    if worst is None:
        return "none: no CPU quota on this cgroup or its ancestors"
    return (f"{100 * worst.ratio:.0f}% of periods since the cgroup was created ({worst.throttled} of "
            f"{worst.periods}, {worst.throttled_usec / 1e6:.1f} s held back) under "
            f"{plural(worst.quota, 'CPU', 'g')} ({worst.cgroup})")


def pressure_text(p: Pressure | Unknown) -> str:
    """CPU pressure over the last 10 s, or why it is unknown."""
    if isinstance(p, Unknown):
        return str(p)
    full = "" if p.full_avg10 is None else f", all waiting {p.full_avg10:.0f}%"
    return f"some task waiting {p.some_avg10:.0f}% of the last 10 s{full} ({p.source})"


def stack_text(b: StackBudget) -> list[str]:
    """The stack a new thread gets, then each memory limit against the threads it bounds."""
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
