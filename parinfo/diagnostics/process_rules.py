"""Diagnostics: rules over the facts of a report, each with a stable id, a severity, one line, why, and the fix.

Rules read the typed sections of a :class:`~parinfo.diagnostics.model.Report` (a payload from
elsewhere, or a hand-made dict in a test, becomes one through ``Report.from_dict``), so they never
touch the process themselves. :data:`RULES` is the one list of them, with those of
:mod:`parinfo.diagnostics.fleet_rules` (outer threads) and :mod:`parinfo.diagnostics.live_rules`
(live evidence); :func:`diagnose` runs it.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from parinfo.diagnostics import fleet_rules, live_rules
from parinfo.diagnostics.findings import Finding, Severity, at_least, sort_findings
from parinfo.diagnostics.model import Report
from parinfo.machine import rounding, scheduler
from parinfo.process import libraries as reg
from parinfo.process.pools import PoolRow
from parinfo.process.provenance import SettingRow
from parinfo.process.serving import bypassed_by_parinfo
from parinfo.records.source import Kind
from parinfo.safe_text import plural

__all__ = ["RULES", "Finding", "Rule", "Severity", "at_least", "diagnose", "interop_fix"]

Rule = Callable[[Report], list[Finding]]


def diagnose(report: Report) -> list[Finding]:
    """Run every rule of :data:`RULES` over ``report``; errors first, then warnings, then infos
    (within one severity, in the order of the rules)."""
    return sort_findings([f for rule in RULES for f in rule(report)])


# -- helpers over the sections ---------------------------------------------------------------

def _counts(r: Report) -> list[tuple[str, int]]:
    """Every thread count in force: (who, count), for pools that can be busy at once."""
    return [(row.library, row.count) for row in r.settings if row.count is not None]


def _openmp_libs(r: Report) -> set[str]:
    return {p.library for p in r.pools if p.user_api == "openmp"}


def _bypassed(r: Report) -> set[str]:
    """Files of OpenMP runtimes loaded but never called: a profile had parinfo preload another
    runtime, to which every omp_* and GOMP_* entry point resolves (torch's libgomp under Intel's)."""
    return set(bypassed_by_parinfo(r.backend.openmp))


def _called_pools(r: Report) -> list[PoolRow]:
    bypassed = _bypassed(r)
    return [p for p in r.pools if not (p.filepath and p.filepath in bypassed)]


def _blas_pools(r: Report) -> list[PoolRow]:
    return [p for p in r.pools if p.user_api == "blas"]


def _inter_intra_pairs(r: Report) -> list[tuple[str, int, int]]:
    """(who, inter-op, intra-op) for frameworks whose inter-op tasks each open their own intra-op team.

    parinfo's own runtime is not among them: its inter-op tasks share the one intra-op pool and the
    native budget caps their native threads, so its defaults cannot oversubscribe this way.
    """
    pairs = []
    torch = r.frameworks.torch
    if torch is not None and torch.inter_op is not None and torch.intra_op is not None:
        pairs.append(("torch", torch.inter_op, torch.intra_op))
    return pairs


# -- rules -------------------------------------------------------------------------------------

def interop_fix(inter: int, usable: int) -> tuple[int, int]:
    """(inter-op, intra-op) counts whose product fits ``usable`` CPUs, keeping inter-op when it fits."""
    inter = max(1, min(inter, usable))
    return inter, max(1, usable // inter)


def _oversubscribed_interop(r: Report) -> list[Finding]:
    """torch's inter-op x intra-op above the usable CPUs: a warning once its inter-op pool runs, info
    before (it starts with the first inter-op task, and many programs never start it)."""
    usable = r.machine.usable_cpus
    out = []
    for who, inter, intra in _inter_intra_pairs(r):
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


def _oversubscribed_pools(r: Report) -> list[Finding]:
    """Several multi-threaded native pools that spin while idle can all be busy at once. Every loaded
    copy of a runtime is a pool of its own (numpy's and scipy's OpenBLAS each start their threads)."""
    usable = r.machine.usable_cpus
    spinning = [(p, p.num_threads) for p in _called_pools(r) if p.num_threads is not None and p.num_threads > 1]
    total = sum(n for _, n in spinning)
    if len(spinning) > 1 and total > 2 * usable:
        names = ", ".join(p.library + (f" [{p.owner}]" if p.owner else "") + f"={n}" for p, n in spinning)
        return [Finding(
            "oversubscribed-pools", Severity.INFO,
            f"{plural(len(spinning), 'native pool')} hold {plural(total, 'thread')} for "
            f"{plural(usable, 'usable CPU')} ({names})",
            "pools used one after another are fine, but pools used at once (for example BLAS called "
            "from inside an OpenMP region or from several Python threads) oversubscribe the CPUs",
            "limit the pools you do not use in parallel to 1 thread (threadpoolctl.threadpool_limits, "
            "or a parinfo profile)",
        )]
    return []


def _count_fix(row: SettingRow, env: dict[str, str], usable: int, profile: str | None) -> str:
    """How to bring ``row``'s count to ``usable`` so that it works as printed: name the variable that
    decides it (``parinfo apply`` keeps a variable the user set unless ``--force``)."""
    var = row.variable or next((v for v in row.precedence if v in env), None)
    if var:
        text = f"set {var}={usable}"
        if profile:
            text += f", or run under `parinfo apply {profile} --force` (without --force it keeps your {var})"
        return text
    if row.source is not None and row.source.kind in (Kind.RUN_TIME, Kind.EXPLICIT):
        return f"lower the count your program sets at run time to {usable}"
    first = row.precedence[0] if row.precedence else None
    if first:
        return f"set {first}={usable} before the program starts" + (
            f", or run under `parinfo apply {profile}`" if profile else "")
    return f"set {row.library} to at most {plural(usable, 'thread')}"


def _env_values(r: Report) -> dict[str, str]:
    return {e.name: e.value for e in r.environment if e.value is not None}


def _allocation_binds(r: Report) -> bool:
    """The scheduler's allocation, not the quota, is what limits the usable CPUs."""
    m = r.machine
    if m.allocation is None or m.allocation != m.usable_cpus:
        return False
    return m.quota is None or m.allocation < rounding.round_quota(m.quota, m.quota_rounding)


def _above_quota_or_affinity(r: Report) -> list[Finding]:
    m = r.machine
    quota = m.quota
    affinity = len(m.affinity) or None
    usable = m.usable_cpus
    env = _env_values(r)
    by_allocation = _allocation_binds(r)
    changed_at = r.runtime.followed_at
    out = []
    for row in r.settings:
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
        elif quota is not None:
            kept = ""
            if changed_at is not None and row.source is not None and row.source.chosen:  # followed; this stayed
                kept = (f" (kept when the usable CPUs changed at {changed_at}: {row.source} chose it, "
                        "and parinfo changes only counts nobody chose)")
            out.append(Finding(
                "count-above-quota", Severity.WARNING,
                f"{who} uses {plural(count, 'thread')} but the cgroup CPU quota allows "
                f"{plural(quota, 'CPU', 'g')}{kept}",
                "threads beyond the quota are throttled by the kernel: the whole process stalls until the "
                "next CFS period, which makes parallel code slower than with fewer threads",
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


def _above_physical(r: Report) -> list[Finding]:
    m = r.machine
    phys = m.usable_physical_cores
    if not m.smt:
        return []
    out = []
    for who, count in _counts(r):
        if phys < count <= m.usable_cpus:
            out.append(Finding(
                "count-above-physical-cores", Severity.INFO,
                f"{who} uses {plural(count, 'thread')} on {plural(phys, 'usable physical core')} (SMT on)",
                "compute-bound kernels (GEMM, convolutions) rarely gain from SMT siblings and often lose",
                f"try {plural(phys, 'thread')}: parinfo tune measures both",
            ))
    return out


def _invalid_variables(r: Report) -> list[Finding]:
    out = []
    machine_said = r.machine.invalid or {}  # PARINFO_QUOTA_ROUNDING: the machine's own finding says it
    for row in r.environment:
        if row.value is not None and row.valid is False and row.name not in machine_said:
            readers = ", ".join(row.readers) or "its readers"
            out.append(Finding(
                "invalid-variable", Severity.WARNING,
                f"{row.name}={row.value!r} is invalid: {row.problem}",
                f"{readers} ignore an invalid value silently ({' and '.join(reg.warns_invalid())} alone "
                "prints a warning) and fall back to their defaults",
                f"unset {row.name} or give it a valid value",
            ))
    return out


def _refused_counts(r: Report) -> list[Finding]:
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


def _above_ceiling(r: Report) -> list[Finding]:
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


def _set_after_load(r: Report) -> list[Finding]:
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
            f"{var} changed after launch ({_env_shown(launch)} -> {_env_shown(now)}) "
            f"after libraries that ignore it loaded: {'; '.join(libs)}",
            "native libraries read their variables once, when they load: a later change is ignored "
            "by them but seen by libraries that load afterwards (the import-order trap)",
            f"set {var} before starting Python (or before the first import), or use "
            "parinfo.apply() / threadpoolctl to change loaded pools",
        ))
    return out


def _both(pair: tuple[reg.Library, reg.Library]) -> str:
    return " and ".join(r.vendor or r.name for r in pair)


def _several_openmp(r: Report) -> list[Finding]:
    libs = _openmp_libs(r)
    pair = reg.conflicting_openmp()
    names = {lib.name for lib in pair}
    if names <= libs:
        files = [f"{p.library} [{p.owner}]" for p in r.pools if p.library in names]
        return [Finding(
            "openmp-intel-llvm", Severity.ERROR,
            f"{_both(pair)} are both loaded ({', '.join(files)})",
            "the two runtimes share symbols: initialising both aborts with OMP Error #15, or hangs at "
            f"exit when {reg.role_var('duplicate_ok')} is set; parinfo read no count from any library so as not "
            "to initialise them",
            "install packages built against one OpenMP runtime (for example all from conda-forge, or "
            "all from PyPI wheels), or import only one of the libraries in this process",
        )]
    called = {p.library for p in _called_pools(r) if p.user_api == "openmp"}
    if len(called) > 1:
        libs = called
        return [Finding(
            "several-openmp", Severity.WARNING,
            f"several OpenMP runtimes are loaded: {', '.join(sorted(libs))}",
            "each runtime keeps its own thread team and settings, so limits set through one do not "
            "reach the others and their threads compete",
            "prefer packages that share one OpenMP runtime; limit each runtime with threadpoolctl",
        )]
    return []


def _openmp_and_tbb(r: Report) -> list[Finding]:
    """A runtime loaded beside one its record says not to mix with (TBB beside OpenMP)."""
    loaded_apis = {p.user_api for p in r.pools}
    mixed = [rec for rec in map(reg.find, {p.library for p in r.pools})
             if rec is not None and loaded_apis & set(rec.avoid_with)]
    if mixed:
        return [Finding(
            "openmp-tbb-mixed", Severity.WARNING,
            "OpenMP and TBB are both loaded",
            "the two schedulers do not know each other's threads; PyTorch's threading note strongly "
            "recommends not mixing OpenMP and TBB within one build",
            f"use builds of your libraries that share one threading layer (e.g. {reg.library('mkl').layer_var} "
            "matching the rest)",
        )]
    return []


def _openblas_pthreads_with_openmp(r: Report) -> list[Finding]:
    """OpenBLAS-pthreads beside a multi-threaded OpenMP runtime. Their idle threads spin a short while
    after each call: that may hurt work that alternates the two (info). With OMP_WAIT_POLICY=active the
    OpenMP threads spin until their next region: BLAS calls between regions find the CPUs busy (warning)."""
    pthreads = [p.num_threads for p in _blas_pools(r)
                if p.internal_api == "openblas" and p.threading_layer == "pthreads"
                and p.num_threads is not None and p.num_threads > 1]
    omp = [p.num_threads for p in r.pools
           if p.user_api == "openmp" and p.num_threads is not None and p.num_threads > 1]
    if not (pthreads and omp):
        return []
    wait = reg.role_var("wait_policy")
    active = (_env_values(r).get(wait) or "").strip().lower() == "active"
    message = (f"OpenBLAS with pthreads ({plural(pthreads[0], 'thread')}) is loaded beside an OpenMP "
               f"runtime ({plural(omp[0], 'thread')})")
    if active:
        return [Finding(
            "openblas-pthreads-with-openmp", Severity.WARNING, message + f" with {wait}=active",
            f"{wait}=active keeps the OpenMP threads spinning between regions, so BLAS calls "
            "made between OpenMP regions find the CPUs busy",
            f"unset {wait} (or set {wait}=passive)",
        )]
    return [Finding(
        "openblas-pthreads-with-openmp", Severity.INFO, message,
        "both keep their idle threads spinning briefly after each call: BLAS and OpenMP work that "
        "alternate in quick succession steal CPU time from each other; work that uses one at a time "
        "is not affected",
        "only where BLAS and OpenMP work alternate in a hot loop: limit one of them to 1 thread there "
        f"(threadpoolctl.threadpool_limits), or set {wait}=passive",
    )]


def _kmp_duplicate(r: Report) -> list[Finding]:
    """KMP_DUPLICATE_LIB_OK where it can hurt: Intel libiomp and LLVM libomp both loaded (error: it
    lets them share a process), or set by the user while a runtime that reads it is loaded (info: it
    would hide that conflict). Set by an import (threadpoolctl, scikit-learn) with no such runtime
    loaded it changes nothing, and nothing fires."""
    var = reg.role_var("duplicate_ok")
    row = next((e for e in r.environment if e.name == var and e.value is not None), None)
    if row is None or reg.is_false(row.value):
        return []
    by_import = bool(row.importers)
    what = f"{var}={row.value} is set ({row.set_by or 'set by an unknown party'})"
    pair = reg.conflicting_openmp()
    loaded = _openmp_libs(r)
    if {lib.name for lib in pair} <= loaded:
        return [Finding(
            "kmp-duplicate-lib-ok", Severity.ERROR, what + f" while {_both(pair)} are both loaded",
            "it lets the second OpenMP runtime start instead of stopping with OMP Error #15; the two "
            "runtimes then share state: wrong results, crashes, or a hang at exit",
            "load a single OpenMP runtime (packages built against one); "
            + ("the variable then does no harm" if by_import else f"then unset {var}"),
        )]
    readers = [name for name in reg.THREAD_VARS[var].readers if name in loaded]
    if by_import or not readers:
        return []
    return [Finding(
        "kmp-duplicate-lib-ok", Severity.INFO, what + f" while {' and '.join(readers)} is loaded",
        f"it silences {readers[0]}'s check for a second OpenMP runtime: {_both(pair)} are not loaded "
        "together now, but if the other loads, they share state instead of stopping with OMP Error #15",
        f"unset {var} unless it was set on purpose; if it was set to silence an OMP Error #15, load a "
        "single OpenMP runtime instead",
    )]


def _duplicate_copies(r: Report) -> list[Finding]:
    dups = [p for p in r.pools if p.duplicate_of]
    if not dups:
        return []
    libs = sorted({p.library for p in dups})
    return [Finding(
        "duplicate-runtime-copies", Severity.INFO,
        f"several copies of {', '.join(libs)} are loaded ({len(dups) + len(libs)} files)",
        "each copy has its own pool and settings: a limit set through one copy does not reach the others",
        "limit pools through threadpoolctl or parinfo (they reach every copy), not through one "
        "library's own setter",
    )]


def _fractional_quota(r: Report) -> list[Finding]:
    """A fractional quota: runtimes round it differently, so the process's pools may disagree on how
    many CPUs there are. Says parinfo's rule, every runtime's answer, and the number each count in
    force uses."""
    m = r.machine
    quota, usable = m.quota, m.usable_cpus
    cpus = len(m.usable_cpu_list or m.affinity)
    if quota is None or quota == int(quota) or (cpus and rounding.round_quota(quota, "floor") >= cpus):
        return []  # a whole quota, or fewer CPUs than the quota: every rule gives the same number
    answers = m.usable_by_rule
    if answers and set(answers.values()) == {usable}:
        return []
    runtimes = ", ".join(f"{rounding.RUNTIMES[k]} {answers[k]}" for k in rounding.RUNTIMES if k in answers)
    groups: dict[int, list[str]] = {}
    owners = Counter(row.library for row in r.settings)
    for row in r.settings:
        if row.count is not None:
            name = row.library + (f" [{row.owner}]" if owners[row.library] > 1 and row.owner else "")
            groups.setdefault(row.count, []).append(name)
    here = "; ".join(f"{n} for {', '.join(names)}" for n, names in sorted(groups.items()))
    message = (f"the cgroup CPU quota is {plural(quota, 'CPU', 'g')}: parinfo counts "
               f"{plural(usable, 'usable CPU')} ({m.quota_rounding}, {m.quota_rounding_source})")
    if runtimes:
        message += f"; by their own rules {runtimes}"
    if here:
        message += f"; counts in force here: {here}"
    down, up = rounding.round_quota(quota, "floor"), rounding.round_quota(quota, "ceil")
    why, fix = _rounding_trade(quota, down, up, m.quota_rounding)
    return [Finding("fractional-quota", Severity.INFO, message, why, fix)]


def _rounding_trade(quota: float, down: int, up: int, rule: str | None) -> tuple[str, str]:
    """Why the rounding matters and what to do, for a fractional ``quota``: below one CPU every
    rule gives 1 thread, and that one thread outruns the quota, so only a bigger quota helps."""
    var = rounding.ROUNDING_VAR
    if quota < 1:
        return (f"below one CPU every rounding gives 1 thread, and 1 busy thread spends the {quota:g}-CPU "
                f"quota in {quota:.0%} of each period and waits for the rest; a runtime that counts more "
                "threads only makes more of them wait",
                "where throttling hurts (latency, barriers), give the cgroup at least 1 CPU: no rounding "
                "avoids it below one")
    why = (f"floor never throttles: {plural(down, 'busy thread')} use{'s' if down == 1 else ''} {down} of the "
           f"{quota:g} CPUs each period and leave{'s' if down == 1 else ''} {quota - down:g} CPU unused; ceil "
           f"uses it, but {plural(up, 'busy thread')} spend the quota early in each period and all of them "
           "wait for the next one")
    if rule == "floor":
        return why, (f"keep floor where latency matters; to use the fraction, set {var}=ceil or "
                     f"'quota_rounding: ceil' in a profile, or give the cgroup a whole number of CPUs ({up})")
    return why, (f"where throttling hurts (latency, barriers), set {var}=floor or 'quota_rounding: floor' "
                 f"in a profile ({plural(down, 'thread')}), or give the cgroup a whole number of CPUs")


def _scheduler_unbound(r: Report) -> list[Finding]:
    """A Slurm job given fewer CPUs than its affinity mask holds: the job is not bound to them."""
    m = r.machine
    cpus = len(m.usable_cpu_list or m.affinity)
    if m.allocation is None or m.allocation >= cpus:
        return []
    return [Finding(
        "scheduler-unbound", Severity.WARNING,
        f"the job was allocated {plural(m.allocation, 'CPU')} "
        f"({m.allocation_source}) but this process may run on {cpus}: the job is not bound to its CPUs",
        f"libraries that size their pools from the CPU count or the affinity (OpenMP runtimes, BLAS, "
        f"torch, os.cpu_count()) start up to {cpus} threads on {plural(m.allocation, 'allocated CPU')} and "
        "oversubscribe the node; parinfo's own counts follow the allocation",
        f"bind the job's tasks to their CPUs: `{scheduler.BIND_FIX} ...` (the cluster needs a task/affinity "
        f"or task/cgroup plugin), or run under `parinfo apply container` so that every count follows the "
        f"{plural(m.allocation, 'usable CPU')}",
    )]


def _invalid_machine_variables(r: Report) -> list[Finding]:
    """A scheduler variable or PARINFO_QUOTA_ROUNDING with garbage in it: ignored when counting CPUs."""
    out = []
    for name, why in r.machine.invalid.items():
        if name == rounding.ROUNDING_VAR:
            ignored = f"parinfo ignored it and rounded the CPU quota with {rounding.DEFAULT}"
            fix = f"unset {name} or set it to one of {', '.join(rounding.ROUNDINGS)}"
        else:
            ignored = "parinfo ignored it when counting the job's CPUs (the next Slurm variable, if any, counts)"
            fix = f"unset {name} or give it a valid value (check the job script and how the job was started)"
        out.append(Finding("invalid-variable", Severity.WARNING, f"{name} is invalid: {why}", ignored, fix))
    return out


def _free_threaded(r: Report) -> list[Finding]:
    """A free-threaded interpreter: Python threads x a per-thread pool above the usable CPUs while
    the GIL is off; and, on such a build, the GIL turned back on by a module's import."""
    py = r.backend.python
    if py is None or py.free_threaded_build is not True:
        return []
    usable = r.machine.usable_cpus
    out = []
    if py.gil_off and py.threads_at_once is not None and py.threads_at_once > usable and py.per_thread_pool:
        fit = max(1, usable // max(1, py.python_threads or 1))
        out.append(Finding(
            "free-threaded-oversubscribed", Severity.WARNING,
            f"{plural(py.python_threads, 'Python thread')} x {py.per_thread_pool} "
            f"{plural(py.per_thread_threads, 'thread')} = {plural(py.threads_at_once, 'thread')} can run at once "
            f"on {plural(usable, 'usable CPU')} (free-threaded build, GIL off)",
            "without the GIL the Python threads run at once, and each one that calls a library whose limit "
            "holds per calling thread (OpenMP, torch) starts a team of its own",
            f"limit {py.per_thread_pool} to {plural(fit, 'thread')} in the threads that call it "
            "(threadpoolctl.threadpool_limits inside each thread, or parinfo.apply('single-thread')), or run "
            "fewer Python threads",
        ))
    if py.gil_enabled is True and py.gil_reenabled_by:
        out.append(Finding(
            "gil-reenabled", Severity.INFO,
            f"the GIL is on again in this free-threaded interpreter: importing {py.gil_reenabled_by} turned it on",
            "an extension module that does not declare it runs without the GIL turns the GIL on for the rest "
            "of the process: Python threads take turns again",
            f"use a build of {py.gil_reenabled_by.split('.')[0]} that supports free threading, or keep the GIL "
            "off at your own risk with -X gil=0",
        ))
    return out


#: Every rule a report runs, in order: those over the process's facts (above), the outer threads
#: times the pools (fleet_rules), then the live evidence (live_rules). The one list of rules.
RULES: tuple[Rule, ...] = (
    _oversubscribed_interop, _oversubscribed_pools, _above_quota_or_affinity, _above_physical,
    _invalid_variables, _invalid_machine_variables, _fractional_quota, _scheduler_unbound,
    _refused_counts, _above_ceiling, _set_after_load, _several_openmp, _openmp_and_tbb,
    _openblas_pthreads_with_openmp,
    _kmp_duplicate, _duplicate_copies, _free_threaded,
    fleet_rules.outer_findings,
    live_rules.throttled, live_rules.thread_stack_budget, live_rules.runnable_above_usable,
)


def _env_shown(value: str | None) -> str:
    """A variable's value for a finding: quoted, or "not set" (never None)."""
    return "not set" if value is None else repr(value)
