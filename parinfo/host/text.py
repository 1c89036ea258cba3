"""``parinfo host`` as text for people: the cgroups, the processes with native pools, the families,
then the findings. Every text that comes from a process (names, command lines) is escaped here or
already was (:mod:`parinfo.safe_text`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from parinfo.safe_text import escape_controls

if TYPE_CHECKING:
    from parinfo.host.model import CgroupRow, HostProcess, HostReport, PoolCount

#: Processes listed without ``all_processes``: those with pools, then the busiest others.
OTHERS_SHOWN = 5


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def _pct(value: float | str | None) -> str:
    if value is None:
        return "-"
    return "?" if isinstance(value, str) else f"{value:.0f}%"


def _pool(p: PoolCount) -> str:
    if p.count is None:
        return f"{p.library} ?"
    kind = "in force" if p.in_force else "launch env"
    return f"{p.library} {p.count} ({kind})"


def _pools(p: HostProcess) -> str:
    if p.pools_unknown is not None:
        return p.pools_unknown
    shown = [_pool(x) for x in p.pools if not x.duplicate_of]
    copies = sum(1 for x in p.pools if x.duplicate_of)
    return ", ".join(shown) + (f" (+{copies} cop{'ies' if copies != 1 else 'y'})" if copies else "") or "none"


def _throttle(c: CgroupRow) -> str:
    t = c.throttling
    if t is None:
        return "none" if c.quota is None else "?" if c.throttling_unknown else "-"
    return f"{t.percent_periods:.0f}% of periods"


def _cgroup_lines(r: HostReport) -> list[str]:
    head = (f"{'cgroup':<34} {'usable':>6} {'quota':>6} {'procs':>5} {'threads':>7} {'runnable':>8} "
            f"{'at once':>7} {'CPU use':>7} {'throttled':>16} {'pressure':>8}")
    lines = [head]
    for c in r.cgroups:
        quota = "none" if c.quota is None else f"{c.quota:g}"
        lines.append(f"{_cut(escape_controls(c.path), 34):<34} {c.usable_cpus:>6} {quota:>6} {len(c.pids):>5} "
                     f"{c.threads:>7} {c.runnable_now:>8} {c.threads_at_once:>7} {_pct(c.cpu_percent):>7} "
                     f"{_throttle(c):>16} {_pct(c.pressure_some if r.interval else None):>8}")
    return lines


def _process_line(p: HostProcess) -> str:
    run = f"{p.runnable_now}" + (f"/{p.runnable_in_pools}" if p.pools else "")
    return (f"{p.pid:>7} {_cut(escape_controls(p.user), 8):<8} {p.usable_cpus:>4} {p.threads:>7} {run:>5} "
            f"{_pct(p.cpu_percent):>5}  {_cut(_pools(p), 44):<44} {_cut(p.command, 60)}")


def render(r: HostReport, *, all_processes: bool = False) -> str:
    """The whole report as text (see :meth:`HostReport.table`)."""
    threads = sum(p.threads for p in r.processes)
    runnable = sum(p.runnable_now for p in r.processes)
    scope = ", ".join(f"{k} {v}" for k, v in r.scope.items() if v)
    every = f"over {r.interval:g} s" if r.interval else "one reading (no interval)"
    lines = [escape_controls(
        f"host: {len(r.processes)} processes{' (' + scope + ')' if scope else ''}, {threads} threads, "
        f"{runnable} runnable now; {r.kernel_threads} kernel threads ({r.kernel_runnable} runnable); "
        f"{r.logical_cpus or '?'} logical CPUs; {every}; scan {r.elapsed_ms:.0f} ms")]
    if r.interval:
        lines.append(f"CPU pressure, machine: {_pct(r.pressure_some)} of the interval some task waited for a CPU")
    lines += ["", *_cgroup_lines(r), ""]
    with_pools = [p for p in r.processes if p.pools or p.pools_unknown is not None]
    others = [p for p in r.processes if p not in with_pools]
    shown = list(r.processes) if all_processes else with_pools + sorted(
        others, key=lambda p: (-(p.cpu_percent or 0), -p.runnable_now, -p.threads))[:OTHERS_SHOWN]
    order = {c.path: i for i, c in enumerate(r.cgroups)}
    shown.sort(key=lambda p: order.get(p.group, len(order)))  # stable: pools first within each cgroup
    hidden = len(r.processes) - len(shown)
    lines.append(f"{'pid':>7} {'user':<8} {'CPUs':>4} {'threads':>7} {'run':>5} {'CPU':>5}  "
                 f"{'pools (count: source)':<44} command")
    group = None
    for p in shown:
        if p.group != group and len(r.cgroups) > 1:
            group = p.group
            lines.append(escape_controls(f"  in {p.group}"))
        lines.append(_process_line(p))
    if hidden:
        lines.append(f"  ... and {hidden} more processes without native pools (--json lists them all)")
    lines.append("  run: runnable now / of them in pools;  in force: read from the process's memory;  "
                 "launch env: what its launch environment asks for (the process may have changed it)")
    if r.families:
        lines += ["", "families (one parent, one command)"]
        for f in r.families:
            members = ", ".join(map(str, f.pids[:10])) + (" ..." if len(f.pids) > 10 else "")
            lines.append(f"  pid {f.parent}: {f.size} workers ({members}): {_cut(f.command, 80)}")
    found = r.findings()
    lines.append("")
    if not found:
        lines.append("no findings")
    for _, finding in found:
        lines.append(escape_controls(f"{finding.severity}: [{finding.id}] {finding.message}"))
        lines.append(escape_controls(f"  fix: {finding.fix}"))
    return "\n".join(lines)
