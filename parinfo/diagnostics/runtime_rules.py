"""The rules over the runtimes loaded together: several OpenMP runtimes, OpenMP beside TBB, a pthreads
OpenBLAS beside OpenMP, KMP_DUPLICATE_LIB_OK hiding a conflict, duplicate copies of one library.
:data:`parinfo.diagnostics.process_rules.RULES` lists them with every other rule.
"""
from __future__ import annotations

from parinfo.diagnostics.findings import Finding, Severity
from parinfo.diagnostics.model import Report
from parinfo.diagnostics.rule_views import (
    blas_pools,
    called_pools,
    env_values,
    openmp_libs,
)
from parinfo.process import libraries as reg
from parinfo.safe_text import plural


def _both(pair: tuple[reg.Library, reg.Library]) -> str:
    return " and ".join(r.vendor or r.name for r in pair)

def several_openmp(r: Report) -> list[Finding]:
    libs = openmp_libs(r)
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
    called = {p.library for p in called_pools(r) if p.user_api == "openmp"}
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

def openmp_and_tbb(r: Report) -> list[Finding]:
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
            f"use builds of your libraries that share one threading layer (e.g. {reg.family(reg.Mkl).layer_var} "
            "matching the rest)",
        )]
    return []

def _spinning_layers(internal_api: str | None) -> tuple[str, ...]:
    """The threading layers of a BLAS whose idle threads spin a while after each call (OpenBLAS's
    pthreads), as its family says."""
    rec = reg.by_internal_api(internal_api)
    wait = None if rec is None else rec.idle_wait
    return wait.layers if wait is not None else ()


def openblas_pthreads_with_openmp(r: Report) -> list[Finding]:
    """OpenBLAS-pthreads beside a multi-threaded OpenMP runtime. Their idle threads spin a short while
    after each call: that may hurt work that alternates the two (info). With OMP_WAIT_POLICY=active the
    OpenMP threads spin until their next region: BLAS calls between regions find the CPUs busy (warning)."""
    pthreads = [p.num_threads for p in blas_pools(r)
                if p.threading_layer in _spinning_layers(p.internal_api)
                and p.num_threads is not None and p.num_threads > 1]
    omp = [p.num_threads for p in r.pools
           if p.user_api == "openmp" and p.num_threads is not None and p.num_threads > 1]
    if not (pthreads and omp):
        return []
    wait = reg.role_var("wait_policy")
    active = (env_values(r).get(wait) or "").strip().lower() == "active"
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

def kmp_duplicate(r: Report) -> list[Finding]:
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
    loaded = openmp_libs(r)
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

def duplicate_copies(r: Report) -> list[Finding]:
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
