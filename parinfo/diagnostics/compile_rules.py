"""The rule over torch.compile's compile workers (Inductor's): more of them than usable CPUs.

Inductor sizes its compile pool from the CPUs in affinity (at most 32) and reads no CPU quota
(pytorch PR#191385: 32 workers in a pod of a 192-CPU host), and each worker runs one compiler at
once, so a pool wider than the quota is throttled and holds that many compilers in memory at once
(FBGEMM PR#6009 ran out of memory until TORCHINDUCTOR_COMPILE_THREADS=1). Its row is a library
family with ``own_rule`` set, which the rules on CPU pools leave out: this rule judges it instead.
:data:`parinfo.diagnostics.process_rules.RULES` lists it with every other rule.
"""
from __future__ import annotations

from parinfo.diagnostics.findings import Finding, Severity
from parinfo.diagnostics.model import Report
from parinfo.diagnostics.rule_views import row_family
from parinfo.process import libraries as reg
from parinfo.safe_text import plural

#: The id of the finding: the one Inductor's family names as its ``own_rule``.
RULE_ID = str(reg.family(reg.Inductor).own_rule)


def _mib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def _limits(r: Report) -> str:
    """What limits the usable CPUs, in words for the message."""
    m = r.machine
    if m.quota is not None:
        return f"the cgroup CPU quota allows {plural(m.quota, 'CPU', 'g')}"
    if m.allocation is not None and m.allocation == m.usable_cpus:
        return f"only {plural(m.usable_cpus, 'CPU')} {'is' if m.usable_cpus == 1 else 'are'} allocated"
    return f"only {plural(m.usable_cpus, 'CPU')} {'is' if m.usable_cpus == 1 else 'are'} usable (affinity/cpuset)"


def _memory(r: Report, workers: int) -> str:
    """The memory limit the workers' compilers share, where the report read one ("" otherwise)."""
    limit = None if r.live is None else r.live.memory.limit
    if limit is None:
        return ""
    return (f"; its {plural(workers, 'compiler')} at once share the memory limit of {_mib(limit)} "
            f"({_mib(limit // workers)} each)")


def compile_workers(r: Report) -> list[Finding]:
    """Inductor's compile workers above the usable CPUs (quota, allocation or affinity)."""
    usable = r.machine.usable_cpus
    out = []
    for row in r.settings:
        found = row_family(row)
        if found is None or found[0].own_rule != RULE_ID or row.count is None or row.count <= usable:
            continue
        lib, count = found[0], row.count
        var = lib.precedence[0]
        chose = row.source is not None and row.source.chosen
        out.append(Finding(
            RULE_ID, Severity.WARNING,
            f"torch.compile runs {plural(count, 'compile worker')} ({row.source}), but {_limits(r)}{_memory(r, count)}",
            "each compile worker runs one C++ (or Triton) compiler at once: more of them than usable CPUs are "
            "throttled and make the first calls of compiled code slower, and each compiler holds its own memory, "
            "so a wide pool in a small container can run out of it",
            f"set {var}={usable} {lib.read_when}, or run under `parinfo apply container{' --force' if chose else ''}` "
            f"(its env block sets {var}=1"
            + (f"; without --force it keeps your {var})" if chose else ")"),
        ))
    return out
