"""The report for people: rich tables, colour only on a terminal (rich honours NO_COLOR)."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from parinfo.torch_format import cpu_ranges, human_bytes, pool_title, quota_text, show_value

if TYPE_CHECKING:
    from rich.console import Console

    from parinfo.report import Report

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _table(title: str, *columns: str):
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, expand=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def _kv(title: str, rows: list[tuple[str, str]]):
    table = _table(title, "", "")
    table.show_header = False
    for key, value in rows:
        table.add_row(f"[dim]{key}[/dim]", value)
    return table


def _machine(r: Report):
    m, unknown = r.machine, r.machine.get("unknown") or {}
    quota = m.get("quota")
    nodes = m.get("numa_nodes") or []
    types = m.get("core_types") or {}
    rows = [
        ("logical CPUs", show_value(m.get("logical_cpus"), unknown, "logical_cpus")),
        ("physical cores", show_value(m.get("physical_cores"), unknown, "physical_cores")),
        ("sockets", show_value(m.get("sockets"), unknown, "sockets")),
        ("NUMA nodes", f"{len(nodes)}: " + "; ".join(cpu_ranges(n) for n in nodes) if nodes
         else show_value(None, unknown, "numa_nodes")),
        ("SMT", show_value(m.get("smt"), unknown, "smt")),
    ]
    if types:
        rows.append(("core types", "; ".join(f"{k}: {cpu_ranges(v)}" for k, v in types.items())))
    rows += [
        ("affinity", f"{cpu_ranges(m.get('affinity'))} ({len(m.get('affinity') or ())} CPUs)"),
        ("cpuset", "none" if m.get("cpuset") is None else cpu_ranges(m.get("cpuset"))),
        ("cgroup CPU quota", quota_text(m)),
        ("usable CPUs", f"[bold]{m.get('usable_cpus')}[/bold] "
                        f"({m.get('usable_physical_cores')} physical cores) [dim]= {m.get('usable_rule')}[/dim]"),
    ]
    for note in m.get("notes") or ():
        rows.append(("note", f"[dim]{note}[/dim]"))
    return _kv("Machine", rows)


def _cpu(r: Report):
    c = r.cpu or {}
    rows = [("brand", show_value(c.get("brand"), c.get("unknown"), "brand")),
            ("arch", show_value(c.get("arch"), c.get("unknown"), "arch"))]
    isa = c.get("isa") or c.get("extensions")
    if isa is not None:
        rows.append(("ISA for kernels", ", ".join(isa) if isa else "none of note"))
    caches = c.get("caches")
    if isinstance(caches, dict) and caches:
        rows.append(("caches", ", ".join(f"{k} {human_bytes(v)}" for k, v in caches.items())))
    return _kv("CPU", rows)


def _backend(r: Report):
    b = r.backend
    rt = r.runtime
    started = "running" if b.get("runtime_started") else "not started (pools start on first use)"
    rows = [("parinfo runtime", f"{b.get('runtime')} [dim]({rt.get('backend_source', 'default')})[/dim], {started}")]
    for key, value in b.items():
        if key in ("runtime", "runtime_started") or value in (None, [], {}, ""):
            continue
        if isinstance(value, (list, tuple)):
            value = ", ".join(str(v) for v in value)
        rows.append((key.replace("_", " "), show_value(value)))
    return _kv("Backend", rows)


def _pools(r: Report):
    table = _table("Native pools", "pool", "threads", "file", "seen by")
    if not r.pools:
        table.add_row("[dim]none loaded[/dim]", "", "", "")
    for p in r.pools:
        table.add_row(pool_title(p), show_value(p.get("num_threads")), str(p.get("filepath") or ""),
                      str(p.get("seen_by") or ""))
    return table


def _frameworks(r: Report):
    torch = (r.frameworks or {}).get("torch")
    if not torch:
        return None
    rows = [(k.replace("_", " "), show_value(v)) for k, v in torch.items()
            if k != "parallel_info_text" and v is not None]
    return _kv("torch", rows)


def _settings(r: Report):
    table = _table("Thread counts in force", "who", "count", "decided by", "reads (first wins)")
    for row in r.settings:
        table.add_row(row["library"], show_value(row.get("count")), str(row.get("source")),
                      " > ".join(row.get("precedence") or ()))
    return table


def _environment(r: Report):
    table = _table("Thread variables", "variable", "value", "valid", "read by", "changed after launch")
    unset = []
    for row in r.environment:
        value = row.get("value")
        if value is None and not row.get("changed_after_launch"):
            unset.append(row["name"])
            continue
        shown = "[dim]unset now[/dim]" if value is None else (
            repr(value) if value.strip() != value or not value else value)
        valid = ""
        if value is not None:
            valid = "yes" if row.get("valid") else (f"[red]no: {row.get('problem')}[/red]"
                                                   if row.get("valid") is False else "")
        changed = ""
        if row.get("changed_after_launch"):
            changed = f"[yellow]yes (was {row.get('launch_value')!r})[/yellow]"
        table.add_row(row["name"], shown, valid, ", ".join(row.get("readers") or ()), changed)
    if unset:
        table.caption = "not set: " + ", ".join(unset)
        table.caption_justify = "left"
    return table


def _threads(r: Report):
    t = r.threads
    names = Counter((th.get("name") or "?") for th in t.get("threads") or ())
    listing = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in names.most_common())
    return _kv("Live OS threads", [("count", show_value(t.get("count"))), ("names", listing or "unknown")])


def _findings(r: Report):
    table = _table("Findings", "severity", "id", "finding", "fix")
    if not r.findings:
        table.add_row("[green]ok[/green]", "", "nothing wrong found", "")
    for f in r.findings:
        style = _SEVERITY_STYLE.get(f.severity, "")
        table.add_row(f"[{style}]{f.severity}[/{style}]", f.id, f"{f.message}\n[dim]{f.why}[/dim]", f.fix)
    return table


def _probes(r: Report) -> str:
    p = r.probes
    parts = []
    if p.get("imported"):
        parts.append("imported to probe: " + ", ".join(p["imported"]))
    if p.get("already_imported"):
        parts.append("already imported: " + ", ".join(p["already_imported"]))
    for mod, why in (p.get("failed") or {}).items():
        parts.append(f"could not import {mod}: {why}")
    return "; ".join(parts) or "no module imported to probe"


def render(report: Report, console: Console | None = None) -> None:
    """Print the report for people."""
    from rich.console import Console

    if console is None:
        import os
        import sys

        wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
        console = Console(width=120 if wide else None)
    console.print(f"[bold]parinfo[/bold] report for pid {report.process.get('pid')} "
                  f"(Python {report.process.get('python')}) [dim]- {_probes(report)}[/dim]")
    for part in (_machine, _cpu, _backend, _pools, _frameworks, _settings, _environment, _threads,
                 _findings):
        table: Any = part(report)
        if table is not None:
            console.print()
            console.print(table)
