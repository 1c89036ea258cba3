"""The registry's entries: one :class:`~parinfo.process.library_record.Library` per library, in
registry order, and the default rules, caps and notes that need a library's own module or variables
(:mod:`parinfo.process.defaults` holds those over the machine's facts alone and says what a rule
takes and returns).

Adding a library: append one record to :data:`RECORDS` (and its variables to
:mod:`parinfo.process.thread_vars` when it brings its own).
"""
from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from parinfo.machine.rounding import ROUNDING_VAR
from parinfo.process import defaults
from parinfo.process.library_parts import (
    Calls,
    CountSymbol,
    DirectRead,
    LibraryKind,
    NativeReads,
    Preloadable,
    Push,
    Scope,
    SetAlong,
    is_false,
)
from parinfo.process.library_record import Library
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

#: MKL's variable that lets it cap a request at the physical cores (its role "dynamic").
_MKL_DYNAMIC = "MKL_DYNAMIC"
#: The variables torch's intra-op count reads at import, first wins.
_TORCH_PRECEDENCE = ("MKL_NUM_THREADS", "OMP_NUM_THREADS")

# ---------------------------------------------------------------------------------------------
# Default rules and caps that read a variable or ask the loaded module


def _numexpr_default(facts: MachineFacts, ctx: Mapping[str, Any]) -> tuple[int, str]:
    """numexpr 2.8.5+ with no count asked: its whole pool when NUMEXPR_MAX_THREADS is set, else the
    online CPUs it detects (affinity ignored), at most 16."""
    pool = ctx.get("max_threads")
    if ctx.get("max_set") and isinstance(pool, int):
        return pool, f"{pool} (NUMEXPR_MAX_THREADS: numexpr runs its whole pool when no count is asked)"
    ncores = ctx.get("ncores") or facts.logical_cpus or 1
    if ncores > 16:
        return 16, f"16 (numexpr's safe limit; {plural(ncores, 'core')} detected)"
    return ncores, f"{ncores} (online CPUs detected by numexpr; affinity ignored)"


def _numba_default(facts: MachineFacts, ctx: Mapping[str, Any]) -> tuple[int, str]:
    n = ctx.get("default")
    if not isinstance(n, int) or n < 1:
        return defaults.affinity_cpus(facts)
    return n, f"{n} (numba.config.NUMBA_DEFAULT_NUM_THREADS: CPUs in affinity)"


def _numba_context(module: Any, env: Mapping[str, str]) -> dict[str, Any]:
    return {"default": getattr(getattr(module, "config", None), "NUMBA_DEFAULT_NUM_THREADS", None)}


def _numba_read(module: Any) -> Any:
    """numba.get_num_threads() launches the threading layer: call it only once that has happened;
    before, the count is the one numba will launch with (numba.config.NUMBA_NUM_THREADS)."""
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    if parallel is not None and getattr(parallel, "_is_initialized", False):
        return module.get_num_threads()
    return getattr(getattr(module, "config", None), "NUMBA_NUM_THREADS", None)


def _mkl_cap(facts: MachineFacts, env: Mapping[str, str],
             ctx: Mapping[str, Any] | None = None) -> tuple[int | None, str]:
    if is_false(env.get(_MKL_DYNAMIC)):
        return None, ""
    n = facts.physical_cores
    return n, f"{plural(n, 'physical core')} (MKL_DYNAMIC is not FALSE)"


def _numexpr_pool(facts: MachineFacts, env: Mapping[str, str],
                  ctx: Mapping[str, Any] | None = None) -> tuple[int | None, str]:
    """numexpr's pool size (MAX_THREADS: NUMEXPR_MAX_THREADS at import, else 64): a request above
    it is refused."""
    pool = (ctx or {}).get("max_threads")
    if not isinstance(pool, int):
        return None, ""
    if (ctx or {}).get("max_set"):
        return pool, f"its pool of NUMEXPR_MAX_THREADS={pool}"
    return pool, f"its pool of {pool} (NUMEXPR_MAX_THREADS unset)"


def _numexpr_context(module: Any, env: Mapping[str, str]) -> dict[str, Any]:
    return {"ncores": getattr(module, "ncores", None), "max_threads": getattr(module, "MAX_THREADS", None),
            "max_set": bool(env.get("NUMEXPR_MAX_THREADS"))}


def _mkl_plan_note(counts: Mapping[str, int], values: Mapping[str, int], env: Mapping[str, str]) -> str | None:
    """A profile's MKL count above the usable physical cores: MKL caps it there unless MKL_DYNAMIC
    is FALSE (``counts`` by profile key, ``values`` the machine's profile values)."""
    n, cores, dynamic = counts["mkl"], values["usable_physical_cores"], _MKL_DYNAMIC
    if n > cores and not is_false(env.get(dynamic)):
        return (f"MKL uses at most the physical cores ({cores} usable) unless {dynamic}=FALSE; "
                f"libraries.mkl asks for {n}")
    return None


def _torch_plan_note(counts: Mapping[str, int], values: Mapping[str, int], env: Mapping[str, str]) -> str | None:
    """A profile's torch count other than its MKL count: torch reads MKL's variable at import, so
    its own count is set afterwards."""
    mkl, torch = counts["mkl"], counts["torch"]
    if torch != mkl:
        return (f"torch reads {_TORCH_PRECEDENCE[0]} ({mkl}) at import; its intra-op count {torch} "
                "is set by the start-up hook or parinfo.apply()")
    return None


_TBB_MAX_CONCURRENCY = "_ZN3tbb6detail2r115max_concurrencyEPKNS0_2d115task_arena_baseE"
_TBB_ACTIVE_VALUE = "_ZN3tbb6detail2r127global_control_active_valueEi"


def _tbb_facts(path: str) -> tuple[str | None, int | None]:
    """TBB's version and its thread count for the calling thread, through oneTBB's getters.

    The count is ``this_task_arena::max_concurrency()`` limited by the active
    ``global_control(max_allowed_parallelism)``; both only read state. (None, None) parts when the
    library or the entry point is missing (TBB before 2021 has other entry points).
    """
    import ctypes
    import os

    try:
        lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
    except OSError:
        return None, None
    version = None
    fn = getattr(lib, "TBB_runtime_version", None)
    if fn is not None:
        fn.restype, fn.argtypes = ctypes.c_char_p, []
        raw = fn()
        version = raw.decode("ascii", "replace") if raw else None
    count = None
    conc = getattr(lib, _TBB_MAX_CONCURRENCY, None)
    active = getattr(lib, _TBB_ACTIVE_VALUE, None)
    if conc is not None and active is not None:
        conc.restype, conc.argtypes = ctypes.c_int, [ctypes.c_void_p]
        active.restype, active.argtypes = ctypes.c_size_t, [ctypes.c_int]
        count = min(conc(None), active(0))  # 0 is global_control::max_allowed_parallelism
    return version, count



# ---------------------------------------------------------------------------------------------
# The records


_OMP_STEER = ("OMP_DYNAMIC", "OMP_PROC_BIND", "OMP_PLACES", "OMP_WAIT_POLICY")
_KMP_STEER = ("KMP_AFFINITY", "KMP_BLOCKTIME", "KMP_DUPLICATE_LIB_OK")


def _openmp(name: str, vendor: str, label: str, env_prefixes: tuple[str, ...], reads: tuple[str, ...],
            preload: Preloadable, team_release: str | None = None, conflicts: tuple[str, ...] = (),
            warns_invalid: bool = False) -> Library:
    kmp = tuple((role, var) for role, var in (("duplicate_ok", "KMP_DUPLICATE_LIB_OK"), ("affinity", "KMP_AFFINITY"),
                                              ("blocktime", "KMP_BLOCKTIME")) if var in reads)
    bind = (("proc_bind", "OMP_PROC_BIND"), ("places", "OMP_PLACES"))
    return Library(
        name, label, prefixes=(name,), not_prefixes=("libomptarget",), user_api="openmp", internal_api="openmp",
        vendor=vendor, env_prefixes=env_prefixes, precedence=("OMP_NUM_THREADS",), reads=_OMP_STEER + reads,
        default=defaults.affinity_cpus, profile_key="openmp", profile_var="OMP_NUM_THREADS",
        native_getter="omp_get_max_threads()", native=NativeReads("omp_get_max_threads"), team_release=team_release,
        scope=Scope.THREAD,
        roles=(("wait_policy", "OMP_WAIT_POLICY"), *bind, *kmp), conflicts=conflicts, warns_invalid=warns_invalid,
        preload=preload,
        # torch sets the OpenMP runtime it ships with to its intra-op count when it initialises
        set_along=SetAlong("torch", "OpenMP runtime", " when it initialised"),
        note="no cap: a request above the CPUs is taken as it is (libgomp takes 8 on 2 CPUs)")


_TORCH = Library("torch", "torch", kind=LibraryKind.FRAMEWORK, module="torch",
        precedence=_TORCH_PRECEDENCE, default=defaults.physical_in_affinity, cap=_mkl_cap,
        cap_vars=("MKL_DYNAMIC",), profile_key="torch", push=Push.SETTER, calls=Calls(),
        interop_calls=Calls("set_num_interop_threads", "get_num_interop_threads"), scope=Scope.THREAD,
        plan_note=_torch_plan_note,
        note="intra-op reads MKL_NUM_THREADS only when torch has MKL; inter-op reads no variable "
             "(std::thread::hardware_concurrency)")

# Registry order matters: it is the order of a variable's readers within each group.
RECORDS: tuple[Library, ...] = (
    # libgomp frees one thread's team; LLVM/Intel OpenMP's pause acts on the whole process
    _openmp("libgomp", "GNU libgomp", "GNU OpenMP (libgomp)", ("OMP_", "GOMP_"), ("GOMP_CPU_AFFINITY",),
            Preloadable("gnu", ("libgomp.so.1", "libgomp.so"), "omp",
                        "apt-get install libgomp1 (Debian, Ubuntu), or dnf install libgomp"),
            team_release="omp_pause_resource_all", warns_invalid=True),
    # both register as "the" Intel-style runtime: the second to initialise aborts (OMP Error #15)
    _openmp("libiomp", "Intel libiomp", "Intel OpenMP (libiomp)", ("OMP_", "KMP_"), _KMP_STEER,
            Preloadable("intel", ("libiomp5.so",), "kmp", "pip install intel-openmp (or conda install intel-openmp)"),
            conflicts=("libomp",)),
    _openmp("libomp", "LLVM libomp", "LLVM OpenMP (libomp)", ("OMP_", "KMP_"), _KMP_STEER,
            Preloadable("llvm", ("libomp.so.5", "libomp.so"), "omp",
                        "apt-get install libomp5 (Debian, Ubuntu), dnf install libomp, or conda install llvm-openmp"),
            conflicts=("libiomp",)),
    Library("mkl", "Intel MKL", prefixes=("libmkl_rt",), user_api="blas", internal_api="mkl",
            env_prefixes=("MKL_",), precedence=("MKL_NUM_THREADS", "OMP_NUM_THREADS"),
            reads=("MKL_DYNAMIC", "MKL_THREADING_LAYER"), default=defaults.physical_in_affinity, cap=_mkl_cap,
            cap_vars=("MKL_DYNAMIC",), profile_key="mkl", profile_var="MKL_NUM_THREADS",
            native_getter="mkl_get_max_threads()", scope=Scope.PROCESS,
            native=NativeReads("MKL_Get_Max_Threads", version="MKL_Get_Version_String", version_buffer=True,
                               version_after="Version"),
            layer_files=(("libmkl_intel_thread", "intel"), ("libmkl_gnu_thread", "gnu"),
                         ("libmkl_tbb_thread", "tbb"), ("libmkl_sequential", "sequential")),
            layer_var="MKL_THREADING_LAYER", roles=(("dynamic", "MKL_DYNAMIC"),),
            static_prefixes=("libmkl_core",),
            static_note="MKL linked without mkl_rt: threadpoolctl has no controller for it",
            linked_into=(("libtorch_cpu", "torch"),), layer_from_openmp=(("libgomp", "gnu"), ("libiomp", "intel")),
            set_along=SetAlong("torch", "MKL"), plan_note=_mkl_plan_note),
    Library("openblas", "OpenBLAS", prefixes=("libopenblas", "libscipy_openblas"), user_api="blas",
            internal_api="openblas", env_prefixes=("OPENBLAS_", "GOTO_"),
            precedence=("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"),
            reads=("OPENBLAS_CORETYPE",), default=defaults.affinity_cpus, cap=defaults.affinity_cap,
            profile_key="blas", profile_var="OPENBLAS_NUM_THREADS", native_getter="openblas_get_num_threads()",
            scope=Scope.PROCESS,
            native=NativeReads("openblas_get_num_threads", affixes=tuple((p, s) for p in ("", "scipy_")
                                                                          for s in ("", "64_", "_64")),
                               version="openblas_get_config", version_after="OpenBLAS", layer="openblas_get_parallel",
                               layer_codes=((0, "disabled"), (1, "pthreads"), (2, "openmp")),
                               openmp_count="omp_get_max_threads", architecture="openblas_get_corename"),
            # openblas_get_num_threads() returns this int: exported by 0.3.31 and older, a local
            # symbol of .symtab from 0.3.34 (numpy 2.5); scipy-openblas builds prefix the getter
            # (scipy_openblas_get_num_threads64_) but not the variable. blas_thread_buffer is
            # void *[MAX_PARALLEL_NUMBER][MAX_CPU_NUMBER] (MAX_PARALLEL_NUMBER is 1 unless a build
            # changes it): the build's NUM_THREADS. 1024 is the most CPUs a BIGNUMA build handles.
            count_symbol=CountSymbol(("blas_cpu_number",),
                                     getters=("openblas_get_num_threads", "scipy_openblas_get_num_threads64_",
                                              "scipy_openblas_get_num_threads", "openblas_get_num_threads64_"),
                                     max_symbol="blas_thread_buffer", max_count=1024,
                                     verified="numpy 2.4 (scipy-openblas64 0.3.31), numpy 2.5 (scipy-openblas64 "
                                              "0.3.34) and scipy 1.17 (scipy-openblas32 0.3.30) wheels, "
                                              "pthreads builds, x86-64"),
            note="pthreads builds: one limit for the whole process; OpenMP builds follow the calling "
                 "thread's OpenMP limit"),
    Library("blis", "BLIS", prefixes=("libblis",), user_api="blas", internal_api="blis",
            env_prefixes=("BLIS_",), precedence=("BLIS_NUM_THREADS", "OMP_NUM_THREADS"), default=defaults.single_thread,
            profile_key="blas", profile_var="BLIS_NUM_THREADS",
            native_getter="bli_thread_get_num_threads()", scope=Scope.PROCESS,
            native=NativeReads("bli_thread_get_num_threads", version="bli_info_get_version_str")),
    Library("flexiblas", "FlexiBLAS", prefixes=("libflexiblas",), user_api="blas", internal_api="flexiblas",
            default=defaults.backend_decides, profile_key="blas", profile_var="OPENBLAS_NUM_THREADS",
            native_getter="flexiblas_get_num_threads()", scope=Scope.PROCESS,
            native=NativeReads("flexiblas_get_num_threads")),
    Library("accelerate", "Apple Accelerate", env_prefixes=("VECLIB_",), reads=("VECLIB_MAXIMUM_THREADS",),
            push=Push.NONE),
    Library("tbb", "oneTBB", prefixes=("libtbb",),
            not_prefixes=("libtbbmalloc", "libtbbbind"), user_api="tbb", internal_api="tbb", env_prefixes=("TBB_",),
            default=defaults.affinity_no_variable, push=Push.NONE, scope=Scope.THREAD,
            direct=DirectRead(_tbb_facts,
                              "TBB is not visible to threadpoolctl; count from "
                              "this_task_arena::max_concurrency() and global_control",
                              "TBB is not visible to threadpoolctl; its count cannot be read without changing it"),
            # PyTorch's threading note: do not mix OpenMP and TBB within one build
            avoid_with=("openmp",),
            note="count from this_task_arena::max_concurrency() and global_control, read through ctypes"),
    Library("numexpr", "numexpr", kind=LibraryKind.PYTHON, module="numexpr", env_prefixes=("NUMEXPR_",),
            precedence=("NUMEXPR_NUM_THREADS", "OMP_NUM_THREADS"), reads=("NUMEXPR_MAX_THREADS",),
            default=_numexpr_default, cap=_numexpr_pool, cap_vars=("NUMEXPR_MAX_THREADS",), refused=1,
            context=_numexpr_context, module_facts=("ncores", "MAX_THREADS"), profile_key="numexpr",
            profile_var="NUMEXPR_NUM_THREADS", push=Push.SETTER, calls=Calls(), scope=Scope.PROCESS,
            note="pool of NUMEXPR_MAX_THREADS (read at import, 64 unset); a count above it is refused with "
                 "an 'Error.' line on stderr and 1 thread runs; 16 at most when neither it nor "
                 "OMP_NUM_THREADS is set"),
    _TORCH,
    Library("numba", "numba", kind=LibraryKind.PYTHON, module="numba",
            precedence=("NUMBA_NUM_THREADS",), reads=("NUMBA_THREADING_LAYER",), default=_numba_default,
            context=_numba_context, module_facts=("config.NUMBA_DEFAULT_NUM_THREADS",), push=Push.SETTER,
            calls=Calls(read=_numba_read), scope=Scope.THREAD, layer_var="NUMBA_THREADING_LAYER",
            layer_files=(("tbbpool", "tbb"), ("omppool", "omp"), ("workqueue", "workqueue")),
            listed="loaded",
            note="launches NUMBA_NUM_THREADS threads once; set_num_threads masks them for the calling "
                 "thread only and refuses more than were launched"),
    Library("python", "Python", kind=LibraryKind.INTERPRETER, reads=("PYTHON_CPU_COUNT", "PYTHON_GIL"),
            push=Push.NONE, roles=(("gil", "PYTHON_GIL"),)),
    Library("parinfo", "parinfo", kind=LibraryKind.PARINFO, env_prefixes=("PARINFO_",),
            precedence=("PARINFO_NUM_THREADS",), follows=_TORCH,
            reads=("PARINFO_NUM_INTEROP_THREADS", "PARINFO_BACKEND", "PARINFO_VERIFY", "PARINFO_ADAPTIVE",
                   "PARINFO_FOLLOW_QUOTA", ROUNDING_VAR, "PARINFO_PRELOAD", "PARINFO_PROFILE", "PARINFO_INSTANCE",
                   "PARINFO_INSTANCES"),
            roles=(("inter_op", "PARINFO_NUM_INTEROP_THREADS"), ("backend", "PARINFO_BACKEND"),
                   ("preload", "PARINFO_PRELOAD"),
                   ("verify", "PARINFO_VERIFY"), ("adaptive", "PARINFO_ADAPTIVE"),
                   ("follow", "PARINFO_FOLLOW_QUOTA"), ("quota_rounding", ROUNDING_VAR),
                   ("profile", "PARINFO_PROFILE"), ("instance", "PARINFO_INSTANCE"),
                   ("instances", "PARINFO_INSTANCES")),
            push=Push.RUNTIME, scope=Scope.PROCESS),
)
