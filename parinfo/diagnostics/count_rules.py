"""The rules over a process's thread counts: pools oversubscribing the usable CPUs, counts above the
quota, the affinity, the physical cores or a library's ceiling, variables a library ignores or
refuses, and counts set after the library read them. :data:`parinfo.diagnostics.process_rules.RULES`
lists them with every other rule.
"""
from __future__ import annotations

from parinfo.diagnostics.findings import Finding, Severity
from parinfo.diagnostics.model import Report
from parinfo.diagnostics.rule_views import (
    counts_in_force,
    env_shown,
    env_values,
    inter_intra_pairs,
    pools_at_once,
    row_family,
)
from parinfo.machine import rounding
from parinfo.process import libraries as reg
from parinfo.process.library_base import QuotaRule
from parinfo.process.library_parts import Push, Reading
from parinfo.process.provenance import SettingRow
from parinfo.process.variables import readings
from parinfo.records.source import Kind
from parinfo.safe_text import plural


def interop_fix(inter: int, usable: int) -> tuple[int, int]:
    """(inter-op, intra-op) counts whose product fits ``usable`` CPUs, keeping inter-op when it fits."""
    inter = max(1, min(inter, usable))
    return inter, max(1, usable // inter)

def oversubscribed_interop(r: Report) -> list[Finding]:
    """torch's inter-op x intra-op above the usable CPUs: a warning once its inter-op pool runs, info
    before (it starts with the first inter-op task, and many programs never start it)."""
    usable = r.machine.usable_cpus
    out = []
    for who, inter, intra in inter_intra_pairs(r):
        if inter > 1 and intra > 1 and inter * intra > usable:
            fix_inter, fix_intra = interop_fix(inter, usable)
            started = r.frameworks.torch is not None and r.frameworks.torch.interop_started is True
            message = (f"{who}: {plural(inter, 'inter-op thread')} x {plural(intra, 'intra-op thread')} = "
                       f"{plural(inter * intra, 'thread')} can run at once on {plural(usable, 'usable CPU')}")
            if not started:
                message += " once its inter-op pool starts (it has not)"
            out.append(Finding(
                "oversubscribed-interop", Severity.WARNING if started else Severity.INFO, message,
                "every inter-op task that runs a parallel op opens its own team, so concurrent tasks "
                "multiply the intra-op count and the threads fight for the CPUs",
                f"keep inter-op x intra-op <= {usable}: torch.set_num_interop_threads({fix_inter}) and "
                f"torch.set_num_threads({fix_intra}) at start-up ({fix_inter} x {fix_intra} = "
                f"{fix_inter * fix_intra}), or torch.set_num_interop_threads(1) when you run no "
                "inter-op tasks",
            ))
    return out


def oversubscribed_pools(r: Report) -> list[Finding]:
    """Several multi-threaded CPU pools that may run at once (:func:`pools_at_once`: every loaded
    copy of a native runtime, numpy's and scipy's OpenBLAS each, and each Python-module library's
    CPU pool: ONNX Runtime's session, Polars', Arrow's CPU pool, DuckDB's, tokenizers', OpenCV's,
    numba's...) hold more than twice the usable CPUs. Each library sized its pool for the CPUs it
    sees, not for the others. Info: used one after another they do not compete, and nothing tells
    whether they run at once. The fix names, for each library, what sets its count
    (:meth:`Library.how_to_set`), the same pools named once with their copies."""
    usable = r.machine.usable_cpus
    busy = [p for p in pools_at_once(r) if p.threads > 1]
    total = sum(p.threads for p in busy)
    if len(busy) < 2 or total <= 2 * usable:
        return []
    names = ", ".join(f"{p.who}={p.threads}" + (" (predicted)" if p.predicted else "") for p in busy)
    ways: dict[str, list[str]] = {}
    for p in busy:
        how = p.family.how_to_set(1, p.pool) if p.family is not None else "limit it to 1 thread"
        ways.setdefault(how, []).append(p.who)
    fixes = "; ".join(f"{', '.join(dict.fromkeys(who))}: {how}" for how, who in ways.items())
    return [Finding(
        "oversubscribed-pools", Severity.INFO,
        f"{plural(len(busy), 'pool')} may run {plural(total, 'thread')} at once on "
        f"{plural(usable, 'usable CPU')} ({names})",
        "each library sized its pool for the CPUs it sees, not for the other pools: used one after "
        "another they are fine, but used at once (BLAS called inside an OpenMP region, a query beside an "
        "inference session, several Python threads) they oversubscribe the CPUs",
        f"limit the pools you do not use in parallel to 1 thread: {fixes} (threadpoolctl.threadpool_limits "
        "limits the native ones at run time; a parinfo profile sets those it knows)",
    )]

def _count_fix(row: SettingRow, env: dict[str, str], usable: int, profile: str | None) -> str:
    """How to bring ``row``'s count to ``usable`` so that it works as printed: name the variable that
    decides it (``parinfo apply`` keeps a variable the user set unless ``--force``), else what sets
    its library's count (:meth:`Library.how_to_set`: SQL for DuckDB, a setter, a session option)."""
    lib, pool = row_family(row) or (None, None)
    call = lib.setter(usable, pool) if lib is not None else None
    var = row.variable or next((v for v in row.precedence if v in env), None)
    if var:
        text = f"set {var}={usable}" + (f" (or call {call})" if call else "")
        if profile:
            text += f", or run under `parinfo apply {profile} --force` (without --force it keeps your {var})"
        return text
    if row.source is not None and row.source.kind in (Kind.RUN_TIME, Kind.EXPLICIT):
        return f"lower the count your program sets at run time to {usable}" + (f": {call}" if call else "")
    profile_sets = lib is None or lib.profile_key is not None or lib.push is Push.RUNTIME  # a profile reaches it
    apply = f", or run under `parinfo apply {profile}`" if profile and profile_sets else ""
    if lib is not None:
        return lib.how_to_set(usable, pool) + apply
    first = row.precedence[0] if row.precedence else None
    if first:
        return f"set {first}={usable} before the program starts" + apply
    return f"set {row.library} to at most {plural(usable, 'thread')}"


def _allocation_binds(r: Report) -> bool:
    """The scheduler's allocation, not the quota, is what limits the usable CPUs."""
    m = r.machine
    if m.allocation is None or m.allocation != m.usable_cpus:
        return False
    return m.quota is None or m.allocation < rounding.round_quota(m.quota, m.quota_rounding)


def _quota_ignored(row: SettingRow, r: Report) -> tuple[str, str] | None:
    """(words for the message, a sentence for the why) when ``row``'s count is its library's default
    and that default does not follow the quota (its family's ``quota_rule``, measured: ONNX Runtime,
    Arrow's CPU pool, numba, LightGBM ignore it; OpenCV and XGBoost read one only at the cgroup
    mount's root); None when someone chose the count or the library follows the quota.

    It enriches ``count-above-quota`` rather than raising a finding of its own: the problem is one
    (a count above the quota), this is its cause, and its fix is the one the finding already gives
    (what sets that library's count, or ``parinfo apply container``); a second finding would say it
    twice, and whoever filters on the finding's id keeps seeing it."""
    lib, _ = row_family(row) or (None, None)
    rule = None if lib is None else lib.quota_rule
    if lib is None or rule is None or rule is QuotaRule.FOLLOWS or row.source is None or not row.source.kind.default:
        return None
    where = f", not this one's ({r.machine.quota_source})" if rule is QuotaRule.ROOT_ONLY else ""
    return (f": {lib.label} {rule.value}{where}, and sized itself by its default ({row.source})",
            f"{lib.label}'s default does not follow this quota, and nobody chose its count: ")


def above_quota_or_affinity(r: Report) -> list[Finding]:
    m = r.machine
    quota = m.quota
    affinity = len(m.affinity) or None
    usable = m.usable_cpus
    env = env_values(r)
    by_allocation = _allocation_binds(r)
    changed_at = r.runtime.followed_at
    io_pools = reg.apart_rows()  # threads that wait on I/O (more than the CPUs is their design), compile workers
    out = []
    for row in r.settings:
        if row.library in io_pools:
            continue
        who, count = row.library, row.count
        if count is not None and row.capped_to is not None:
            count = min(count, row.capped_to)  # what runs, not what was asked (count-above-ceiling)
        if count is None or count <= usable:
            continue
        if by_allocation:
            out.append(Finding(
                "count-above-usable", Severity.WARNING,
                f"{who} uses {plural(count, 'thread')} but only {plural(usable, 'CPU')} "
                f"{'is' if usable == 1 else 'are'} usable ({m.allocation_source})",
                "the job was given fewer CPUs than its threads: they share the allocated CPUs (or, when the "
                "job is not bound, take CPUs given to other jobs on the node)",
                f"use at most {usable}: " + _count_fix(row, env, usable, "container"),
            ))
        elif quota is not None and (affinity is None or quota <= affinity):  # the quota is what binds
            kept = ""
            if changed_at is not None and row.source is not None and row.source.chosen:  # followed; this stayed
                kept = (f" (kept when the usable CPUs changed at {changed_at}: {row.source} chose it, "
                        "and parinfo changes only counts nobody chose)")
            cause, cause_why = _quota_ignored(row, r) or ("", "")
            out.append(Finding(
                "count-above-quota", Severity.WARNING,
                f"{who} uses {plural(count, 'thread')} but the cgroup CPU quota allows "
                f"{plural(quota, 'CPU', 'g')}{kept}{cause}",
                f"{cause_why}threads beyond the quota are throttled by the kernel: the whole process stalls until "
                "the next CFS period, which makes parallel code slower than with fewer threads",
                f"use at most {usable}: " + _count_fix(row, env, usable, "container"),
            ))
        elif affinity is not None:
            out.append(Finding(
                "count-above-usable", Severity.WARNING,
                f"{who} uses {plural(count, 'thread')} but only {plural(usable, 'CPU')} "
                f"{'is' if usable == 1 else 'are'} usable (affinity/cpuset)",
                "extra threads share the allowed CPUs and wait for each other at every barrier",
                f"use at most {usable}: " + _count_fix(row, env, usable, None),
            ))
    return out


def above_physical(r: Report) -> list[Finding]:
    m = r.machine
    phys = m.usable_physical_cores
    if not m.smt:
        return []
    out = []
    for who, count in counts_in_force(r):
        if phys < count <= m.usable_cpus:
            out.append(Finding(
                "count-above-physical-cores", Severity.INFO,
                f"{who} uses {plural(count, 'thread')} on {plural(phys, 'usable physical core')} (SMT on)",
                "compute-bound kernels (GEMM, convolutions) rarely gain from SMT siblings and often lose",
                f"try {plural(phys, 'thread')}: parinfo tune measures both",
            ))
    return out


def invalid_variables(r: Report) -> list[Finding]:
    """A set variable a reader refuses: the message says what each reader does with it (the row's
    problem), the why whether its readers disagree."""
    out = []
    machine_said = r.machine.invalid or {}  # PARINFO_QUOTA_ROUNDING: the machine's own finding says it
    for row in r.environment:
        if row.value is not None and row.valid is False and row.name not in machine_said:
            out.append(Finding(
                "invalid-variable", Severity.WARNING,
                f"{row.name}={row.value!r} is invalid: {row.problem}",
                _invalid_why(row.readers, readings(row.name, row.value, row.readers)),
                f"unset {row.name} or give it a valid value",
            ))
    return out


def _invalid_why(readers: list[str], said: list[tuple[str, Reading]] | None) -> str:
    if said is None:  # every reader parses as parinfo validates
        return (f"{', '.join(readers) or 'its readers'} ignore an invalid value silently "
                f"({' and '.join(reg.warns_invalid())} alone prints a warning) and fall back to their defaults")
    takers = [name for name, reading in said if not reading.refuses]
    if not takers:
        return "none of its readers takes it (what each does was measured on the library)"
    return (f"its readers disagree: {', '.join(takers)} {'take' if len(takers) > 1 else 'takes'} it, the "
            "others do not, so their counts differ")

def refused_counts(r: Report) -> list[Finding]:
    """A count a library refused because it is above its cap (numexpr above NUMEXPR_MAX_THREADS): the
    library runs a fallback count, far from the one asked, and says so only on stderr."""
    out = []
    for row in r.settings:
        refused = row.refused
        if refused is None:
            continue
        var, asked, cap, runs = refused.variable, refused.asked, refused.cap, refused.runs
        cap_var = next((v for v in row.cap_vars if v != var), None)
        raise_cap = f", or raise {cap_var} to {asked}" if cap_var else ""
        out.append(Finding(
            "count-refused", Severity.WARNING,
            f"{row.library} runs {plural(runs, 'thread')}, not {asked}: "
            f"{var}={asked} is above {refused.why}",
            f"{row.library} refuses a count above its cap instead of cutting it to the cap: it prints an "
            f"error on stderr and keeps {runs}",
            f"set {var} to at most {cap}{raise_cap}, before {row.library} is imported",
        ))
    return out


def above_ceiling(r: Report) -> list[Finding]:
    """A valid count above parinfo's pool ceiling: the runtime runs the ceiling, not the count."""
    out = []
    for row in r.settings:
        cap = row.capped_to
        if cap is None or row.count is None:
            continue
        out.append(Finding(
            "count-above-ceiling", Severity.INFO,
            f"{row.library} count {row.count} ({row.source}) is above parinfo's pool ceiling: "
            f"at most {plural(cap, 'thread')} run",
            "a pool never holds more than 4 x the logical CPUs (as MKL and OpenBLAS cap theirs): more "
            "threads than that only add switching and memory",
            f"ask for at most {cap} (or leave the count to its default)",
        ))
    return out


def set_after_load(r: Report) -> list[Finding]:
    """A variable changed after launch that a library loaded earlier ignores: its count is still the
    launch environment's and differs from what the variable asks now. Made of the settings rows'
    ``ignored_changes``, the rows whose provenance note says "ignored", so the two always agree."""
    env_rows = {e.name: e for e in r.environment}
    hits: dict[str, list[str]] = {}
    for row in r.settings:
        for var in row.ignored_changes:
            owner = f" [{row.owner}]" if row.owner else ""
            hits.setdefault(var, []).append(f"{row.library}{owner} runs {row.count}, not {row.asked_now}")
    out = []
    for var, libs in hits.items():
        env_row = env_rows.get(var)
        launch, now = (None, None) if env_row is None else (env_row.launch_value, env_row.value)
        out.append(Finding(
            "variable-after-load", Severity.WARNING,
            f"{var} changed after launch ({env_shown(launch)} -> {env_shown(now)}) "
            f"after libraries that ignore it loaded: {'; '.join(libs)}",
            "native libraries read their variables once, when they load: a later change is ignored "
            "by them but seen by libraries that load afterwards (the import-order trap)",
            f"set {var} before starting Python (or before the first import), or use "
            "parinfo.apply() / threadpoolctl to change loaded pools",
        ))
    return out
