"""The report for people: aligned sections, styled through rich on a terminal, plain text elsewhere.

Each line is a list of (text, style) spans. On a terminal they go through rich, which honours NO_COLOR;
written to a pipe or a file they are joined as plain text without loading rich at all, which keeps
``parinfo show`` fast. Sections are aligned lines rather than tables: they read better in a terminal
and in a log file alike.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from parinfo.cli.torch_block import human_bytes, plural, pool_title, quota_text, show_value
from parinfo.machine.cpulist import format_cpu_list

if TYPE_CHECKING:
    from rich.console import Console

    from parinfo.diagnostics.model import Report
    from parinfo.process.pools import PoolRow

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
Span = tuple[str, str]  # (text, rich style; "" for none)
Line = list[Span]


def _line(text: str, style: str = "") -> Line:
    return [(text, style)]


def _aligned(rows: Iterable[tuple[str, ...]], indent: int = 2, style: str = "") -> list[Line]:
    """Rows of plain cells -> lines with every column but the last padded to its widest cell."""
    rows = list(rows)
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows if len(r) > i) for i in range(max(map(len, rows)) - 1)]
    lines = []
    for row in rows:
        cells = [c.ljust(widths[i]) if i < len(row) - 1 else c for i, c in enumerate(row)]
        lines.append(_line(" " * indent + "   ".join(cells).rstrip(), style))
    return lines


def _section(title: str, lines: list[Line]) -> list[Line]:
    return [[], _line(title, "bold"), *lines]


def _machine(r: Report) -> list[Line]:
    m, unknown = r.machine, r.machine.unknown
    nodes = m.numa_nodes
    rows = [
        ("logical CPUs", show_value(m.logical_cpus, unknown, "logical_cpus")),
        ("physical cores", show_value(m.physical_cores, unknown, "physical_cores")),
        ("sockets", show_value(m.sockets, unknown, "sockets")),
        ("NUMA nodes", f"{len(nodes)}: " + "; ".join(format_cpu_list(n) for n in nodes) if nodes
         else show_value(None, unknown, "numa_nodes")),
        ("SMT", show_value(m.smt, unknown, "smt")),
    ]
    for kind, cpus in m.core_types.items():
        rows.append((f"{kind} cores", format_cpu_list(cpus)))
    rows += [
        ("affinity", f"{format_cpu_list(m.affinity)} ({plural(len(m.affinity), 'CPU')})"),
        ("cpuset", "none" if m.cpuset is None else format_cpu_list(m.cpuset)),
        ("cgroup CPU quota", quota_text(m)),
        ("usable CPUs", f"{m.usable_cpus} ({plural(m.usable_physical_cores, 'physical core')})"),
    ]
    lines = _aligned(rows)
    lines[-1] = [(text, "bold") for text, _ in lines[-1]]
    lines.append(_line(f"  usable = {m.usable_rule}", "dim"))
    lines += [_line(f"  note: {n}", "dim") for n in m.notes]
    return _section("Machine", lines)


def _cpu(r: Report) -> list[Line]:
    c = r.cpu
    rows = [("brand", show_value(c.brand, c.unknown, "brand")),
            ("arch", show_value(c.arch, c.unknown, "arch")),
            ("ISA for kernels", ", ".join(c.isa) if c.isa else "none of note")]
    if c.caches:
        rows.append(("caches", ", ".join(f"{k} {human_bytes(v)}" for k, v in c.caches.items())))
    return _section("CPU", _aligned(rows))


def _backend(r: Report) -> list[Line]:
    b, rt = r.backend, r.runtime
    started = "running" if b.runtime_started else "not started (pools start on first use)"
    rows = [("parinfo runtime", f"{b.runtime} ({rt.backend_source or 'default'}), {started}")]
    layers = b.layers
    for label, value in (("OpenMP", layers.openmp), ("MKL layer", layers.mkl),
                         ("OpenBLAS layer", layers.openblas), ("BLIS layer", layers.blis),
                         ("TBB", layers.tbb), ("torch ATen", b.torch)):
        if value is None or value == "":
            continue
        rows.append((label, show_value(value)))
    outer = r.outer
    if outer is not None and outer.threads is not None:  # a Dask, Ray or loky worker, or inspect(outer_threads=N)
        rows.append(("outer threads", f"{outer.threads} ({outer.source})"))
    return _section("Backend", _aligned(rows))


def _pool_count(p: PoolRow) -> tuple[str, str]:
    """(count, where it comes from) of a pool row: seen in force here, or, for a process read from
    outside, read from its memory, asked for by its launch environment (never shown as in force),
    or unknown with the reason."""
    if p.count_source is None:
        return f"{show_value(p.num_threads)} threads", f"seen by {p.seen_by}"
    if p.num_threads is not None:
        return plural(p.num_threads, "thread"), p.count_source
    if p.launch_count is not None:
        return (plural(p.launch_count, "thread") + " at launch",
                p.count_source + (f" ({p.launch_from})" if p.launch_from else ""))
    return "count unknown", p.count_source


def _pools(r: Report) -> list[Line]:
    unreadable = (r.process.unreadable or {}).get("pools")
    if not r.pools:
        return _section("Native pools", [_line(f"  {unreadable}" if unreadable else "  none loaded", "dim")])
    rows = [(pool_title(p), *_pool_count(p)) for p in r.pools]
    lines = []
    for line, p in zip(_aligned(rows), r.pools, strict=True):
        lines.append(line)
        if p.filepath:
            lines.append(_line(f"      {p.filepath}", "dim"))
        if p.note:
            lines.append(_line(f"      {p.note}", "dim"))
    return _section("Native pools", lines)


def _frameworks(r: Report) -> list[Line]:
    torch = r.frameworks.torch
    if torch is None:
        return []
    keys = ("version", "intra_op", "inter_op", "aten_backend", "openmp", "mkl_version", "mkldnn_version",
            "interop_started", "hardware_concurrency")
    rows = [(k.replace("_", " "), show_value(getattr(torch, k))) for k in keys if getattr(torch, k) is not None]
    return _section("torch", _aligned(rows))


def _settings(r: Report) -> list[Line]:
    libs = Counter(row.library for row in r.settings)
    rows = [(row.library + (f" [{row.owner}]" if libs[row.library] > 1 and row.owner else ""),
             show_value(row.count) + (f" ({row.capped_to} run)" if row.capped_to else ""),
             str(row.source)) for row in r.settings]
    return _section("Thread counts in force", _aligned([("who", "count", "decided by"), *rows]))


def _environment(r: Report) -> list[Line]:
    rows, unset = [], []
    for row in r.environment:
        value = row.value
        if value is None and not row.changed_after_launch:
            unset.append(row.name)
            continue
        shown = "(unset now)" if value is None else repr(value) if value.strip() != value or not value else value
        state = "" if value is None else ("valid" if row.valid else
                                          f"INVALID: {row.problem}" if row.valid is False else "")
        if row.capped_to is not None:
            state += f", capped: {plural(row.capped_to, 'thread')} run"
        if row.changed_after_launch:
            state += f"; changed after launch (was {row.launch_value!r})"
        who = "read by " + ", ".join(row.readers) if row.readers else "read by nothing here: " + str(row.summary)
        rows.append((f"{row.name}={shown}", state.strip("; "), who))
    lines = [[(text, "yellow" if "INVALID" in text or "changed after" in text else style)
              for text, style in line] for line in _aligned(rows)]
    unreadable = (r.process.unreadable or {}).get("environment")
    lines = lines or [_line(f"  {unreadable}" if unreadable else "  no thread variable is set", "dim")]
    if unset:
        lines.append(_line(f"  not set: {', '.join(unset)}", "dim"))
    return _section("Thread variables", lines)


def thread_group(name: str) -> str:
    """The group a thread name belongs to: numbered pool workers (parinfo-intra-3, pool-7) share one
    group with a * for the number; other names are their own group."""
    return re.sub(r"([-_])\d+$", r"\1*", name)


def _threads(r: Report) -> list[Line]:
    t = r.threads
    names = Counter(thread_group(th.name or "?") for th in t.threads)
    listing = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in names.most_common())
    lines = _aligned([(show_value(t.count), listing)])
    if t.states:
        states = ", ".join(f"{n} {_STATES.get(s, s)}" for s, n in sorted(t.states.items()))
        lines.append(_line(f"  now: {states}", "dim"))
    return _section("Live OS threads", lines)


_STATES = {"R": "running or runnable", "S": "sleeping", "D": "in uninterruptible wait", "T": "stopped",
           "t": "stopped by a tracer", "Z": "zombie", "I": "idle"}


def _findings(r: Report) -> list[Line]:
    if not r.findings:
        return _section("Findings", [_line("  nothing wrong found", "green")])
    width = max(len(f.severity) for f in r.findings)
    lines = []
    for f in r.findings:
        pad = " " * (width + 4)
        lines.append([("  ", ""), (f.severity.ljust(width), _SEVERITY_STYLE.get(f.severity, "")), ("  ", ""),
                      (f.id, "bold"), (f": {f.message}", "")])
        lines.append(_line(f"{pad}why: {f.why}", "dim"))
        lines.append(_line(f"{pad}fix: {f.fix}"))
    return _section("Findings", lines)


def _probes(r: Report) -> str:
    p = r.probes
    parts = []
    if p.imported:
        parts.append("imported to probe: " + ", ".join(p.imported))
    if p.already_imported:
        parts.append("already imported: " + ", ".join(p.already_imported))
    for mod, why in p.failed.items():
        parts.append(f"could not import {mod}: {why}")
    return "; ".join(parts) or "no module imported to probe"


def render_lines(report: Report) -> list[Line]:
    """The report as lines of styled spans."""
    from parinfo.cli.render_live import header, live_lines, outside_lines

    if report.process.inspected_from is not None:  # another process, read from /proc
        lines = [header(report)]
        for part in (_machine, _cpu, _pools, outside_lines, _environment, _threads, live_lines, _findings):
            lines.extend(part(report))
        return lines
    lines = [[("parinfo", "bold"), (f" report for pid {report.process.pid} "
                                      f"(Python {report.process.python}) ", ""), (_probes(report), "dim")]]
    for part in (_machine, _cpu, _backend, _pools, _frameworks, _settings, _environment, _threads, live_lines,
                 _findings):
        lines.extend(part(report))
    return lines


def render(report: Report, console: Console | None = None) -> None:
    """Print the report for people: through rich on a terminal (or the given console), else plain."""
    import sys

    from parinfo.safe_text import escape_controls

    # Values come from outside (environment, thread names, file paths): never print a control raw.
    lines = [[(escape_controls(text), style) for text, style in line] for line in render_lines(report)]
    if console is None and not sys.stdout.isatty():
        sys.stdout.write("\n".join("".join(text for text, _ in line) for line in lines) + "\n")
        return
    from rich.console import Console
    from rich.text import Text

    console = console or Console(highlight=False, emoji=False)
    console.print(Text("\n").join(Text.assemble(*line) for line in lines), soft_wrap=True)
