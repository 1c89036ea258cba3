"""The report as a text block in the style of ``torch.__config__.parallel_info()``.

People used to torch's block find its lines first (torch's own lines verbatim when torch is imported,
the same shape for parinfo's pools otherwise), then parinfo's additions: CPUs and quota, where each
count came from, and the findings. The text is the Python API's answer (:func:`parallel_info`, re-exported
as ``parinfo.parallel_info``); the CLI only escapes it for the terminal and prints it (``show --format torch``,
the ``%parinfo`` magic).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from parinfo.diagnostics.wording import pool_title, quota_text, show_value
from parinfo.machine.cpulist import format_cpu_list
from parinfo.process.libraries import Torch, by_internal_api, family, find
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.diagnostics.model import Report


def _no_torch(r: Report) -> str:
    """The one line that says why torch's own lines are missing, so their absence is not silent."""
    failed = r.probes.failed.get(str(family(Torch).module))
    if failed:
        return f"torch: not imported ({failed}): no ATen/Parallel lines"
    return "torch: not imported: no ATen/Parallel lines (import torch first; `parinfo show --torch` imports it)"


def torch_block(report: Report) -> str:
    """Render ``report`` as torch-style text."""
    r = report
    m = r.machine
    lines: list[str] = []
    torch_lib = family(Torch)
    torch_vars = torch_lib.count_vars  # the variables torch's own block lists
    torch = r.frameworks.torch
    if torch is not None and torch.parallel_info_text:
        lines.extend(torch.parallel_info_text.rstrip("\n").splitlines())
    elif torch is None:
        lines.append(_no_torch(r))
    rt = r.runtime
    lines.append("parinfo/Parallel:")
    lines.append(f"\tparinfo.get_num_threads() : {show_value(rt.intra_op and rt.intra_op.count)}")
    lines.append(f"\tparinfo.get_num_interop_threads() : {show_value(rt.inter_op and rt.inter_op.count)}")
    for pool in r.pools:
        if torch is not None and pool.owner == torch_lib.name and pool.user_api == "openmp":
            continue  # torch's block above already shows its OpenMP
        lines.append(pool_title(pool))
        rec = find(pool.library) or by_internal_api(pool.internal_api)
        getter = (rec.native_getter if rec is not None else None) or "num_threads"
        lines.append(f"\t{getter} : {show_value(pool.num_threads)}")
    if torch is None:
        lines.append(f"std::thread::hardware_concurrency() : {show_value(m.logical_cpus)}")
        lines.append("Environment variables:")
        for row in r.environment:
            if row.name in torch_vars:
                lines.append(f"\t{row.name} : {row.value if row.value is not None else '[not set]'}")
    started = "started" if r.backend.runtime_started else "not started"
    lines.append(f"parinfo parallel backend: {rt.backend} (pools {started})")

    lines.append("parinfo additions:")
    lines.append(
        f"\tCPUs : {show_value(m.logical_cpus, m.unknown, 'logical_cpus')} logical, "
        f"{show_value(m.physical_cores, m.unknown, 'physical_cores')} physical cores, "
        f"SMT {show_value(m.smt, m.unknown, 'smt')}")
    lines.append(f"\taffinity : {format_cpu_list(m.affinity)} ({plural(len(m.affinity), 'CPU')})")
    lines.append(f"\tcgroup CPU quota : {quota_text(m)}")
    lines.append(f"\tusable CPUs : {m.usable_cpus} = {m.usable_rule}")
    lines.append("Thread counts in force (count : source):")
    copies = [setting.library for setting in r.settings]
    for setting in r.settings:
        owner = f" [{setting.owner}]" if copies.count(setting.library) > 1 and setting.owner else ""
        shown = (f"{setting.count} ({setting.source})" if setting.count is not None
                 else str(setting.source or "unknown"))
        lines.append(f"\t{setting.library}{owner} : {shown}")
    others = [row for row in r.environment if row.value is not None and row.name not in torch_vars]
    if torch is not None:  # torch's block above listed OMP/MKL as torch saw them at its start; list all set now
        others = [row for row in r.environment if row.value is not None]
    if others:
        lines.append("Other thread variables:" if torch is None else "Thread variables set now:")
        for row in others:
            flag = "" if row.valid is not False else f" [invalid: {row.problem}]"
            lines.append(f"\t{row.name} : {row.value}{flag}")
    lines.append(f"Live OS threads : {show_value(r.threads.count)}")
    if r.teams is not None and r.teams.columns:
        from parinfo.process.thread_teams import LEGEND

        head, rows = r.teams.matrix()
        lines.append("Thread teams (threads x pools; " + LEGEND + "):")
        lines.extend("\t" + " | ".join(cells) for cells in [head, *rows])
    if r.findings:
        lines.append("Findings:")
        for f in r.findings:
            lines.append(f"\t[{f.severity}] {f.id}: {f.message}")
            lines.append(f"\t\tfix: {f.fix}")
    else:
        lines.append("Findings: none")
    return "\n".join(lines) + "\n"


def parallel_info() -> str:
    """The report as text in the style of ``torch.__config__.parallel_info()``, then parinfo's additions.

    Imports nothing new: it shows the pools already loaded in this process.
    """
    from parinfo.diagnostics.report import inspect

    return torch_block(inspect(imports=[]))
