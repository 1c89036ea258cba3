"""The threading runtimes' families: the OpenMP runtimes (GNU libgomp, Intel libiomp, LLVM libomp)
and oneTBB. What they share is their base class; each runtime says what is its own."""
from __future__ import annotations

from typing import TYPE_CHECKING

from parinfo.process import defaults
from parinfo.process.defaults import ModuleFacts
from parinfo.process.library_base import Library
from parinfo.process.library_parts import DirectRead, IdleWait, NativeReads, Preloadable, Push, ScopeFacts, SetAlong

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

_OMP_STEER: tuple[str, ...] = ("OMP_DYNAMIC", "OMP_PROC_BIND", "OMP_PLACES", "OMP_WAIT_POLICY")
_KMP_STEER: tuple[str, ...] = ("KMP_AFFINITY", "KMP_BLOCKTIME", "KMP_DUPLICATE_LIB_OK")
_OMP_ROLES: tuple[tuple[str, str], ...] = (("wait_policy", "OMP_WAIT_POLICY"), ("proc_bind", "OMP_PROC_BIND"),
                                           ("places", "OMP_PLACES"))
_KMP_ROLES: tuple[tuple[str, str], ...] = (("duplicate_ok", "KMP_DUPLICATE_LIB_OK"), ("affinity", "KMP_AFFINITY"),
                                           ("blocktime", "KMP_BLOCKTIME"))


class OpenMPLibrary(Library):
    """An OpenMP runtime: OMP_NUM_THREADS, a limit per calling thread (the ICVs), no cap (libgomp
    takes 8 on 2 CPUs); set through threadpoolctl's openmp controller, preloaded by a profile's
    ``openmp:`` word."""

    user_api = internal_api = "openmp"
    not_prefixes = ("libomptarget",)
    precedence = ("OMP_NUM_THREADS",)
    reads = (*_OMP_STEER, "OMP_THREAD_LIMIT")  # caps every team (libgomp warns on a value it refuses)
    profile_key = "openmp"
    profile_var = "OMP_NUM_THREADS"
    native_getter = "omp_get_max_threads()"
    native = NativeReads("omp_get_max_threads")
    roles = _OMP_ROLES
    # torch sets the OpenMP runtime it ships with to its intra-op count when it initialises
    set_along = SetAlong("torch", "OpenMP runtime", " when it initialised")
    note = "no cap: a request above the CPUs is taken as it is (libgomp takes 8 on 2 CPUs)"
    # the ICVs are the calling thread's: a thread started later starts from the process's default
    scopes = (ScopeFacts("omp_set_num_threads", reaches_new=False, reaches_running=False,
                         local_api="omp_set_num_threads in that thread",
                         measured="libgomp of scikit-learn 1.9.1's wheel and of Debian 12 (gcc 12.2); LLVM libomp "
                                  "14.0.6 (Debian libomp5-14); Intel libiomp5 of intel-openmp 2026.2.0",
                         reference="OpenMP 5.2 spec, nthreads-var is a data environment ICV; threadpoolctl#207, #208"),)

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        return defaults.affinity_cpus(facts, ctx)


class GnuOpenMP(OpenMPLibrary):
    """GNU libgomp: frees one thread's team (``omp_pause_resource_all``); warns of an invalid count."""

    name, vendor, label = "libgomp", "GNU libgomp", "GNU OpenMP (libgomp)"
    prefixes = ("libgomp",)
    env_prefixes = ("OMP_", "GOMP_")
    reads = (*_OMP_STEER, "OMP_THREAD_LIMIT", "GOMP_CPU_AFFINITY", "GOMP_SPINCOUNT")
    preload = Preloadable("gnu", ("libgomp.so.1", "libgomp.so"), "omp",
                          "apt-get install libgomp1 (Debian, Ubuntu), or dnf install libgomp")
    team_release = "omp_pause_resource_all"
    warns_invalid = True
    idle_wait = IdleWait((("OMP_WAIT_POLICY", "passive"), ("GOMP_SPINCOUNT", "0")), (("OMP_WAIT_POLICY", "active"),),
                         measured="scikit-learn 1.9.1's libgomp under a 0.5-CPU quota, 5 ms between regions: 50 of 50 "
                                  "periods throttled with active or unset, 0 of 50 with either setting")


class _KmpRuntime(OpenMPLibrary):
    """The Intel-style runtimes (KMP_ variables). Both register as "the" Intel-style runtime: the
    second to initialise aborts (OMP Error #15). Their pause acts on the whole process."""

    env_prefixes = ("OMP_", "KMP_")
    reads = (*_OMP_STEER, "OMP_THREAD_LIMIT", *_KMP_STEER)
    roles = _OMP_ROLES + _KMP_ROLES
    idle_wait = IdleWait((("OMP_WAIT_POLICY", "passive"), ("KMP_BLOCKTIME", "0")), (("OMP_WAIT_POLICY", "active"),),
                         measured="LLVM libomp 14.0.6 and intel-openmp 2026.2.0's libiomp5 under a 0.5-CPU quota, 5 ms "
                                  "between regions: 39-40 of 40 periods throttled with active or unset, 0 of 40 with "
                                  "either setting")


class IntelOpenMP(_KmpRuntime):
    """Intel libiomp."""

    name, vendor, label = "libiomp", "Intel libiomp", "Intel OpenMP (libiomp)"
    prefixes = ("libiomp",)
    preload = Preloadable("intel", ("libiomp5.so",), "kmp", "pip install intel-openmp (or conda install intel-openmp)")
    conflicts = ("libomp",)


class LlvmOpenMP(_KmpRuntime):
    """LLVM libomp."""

    name, vendor, label = "libomp", "LLVM libomp", "LLVM OpenMP (libomp)"
    prefixes = ("libomp",)
    preload = Preloadable("llvm", ("libomp.so.5", "libomp.so"), "omp",
                          "apt-get install libomp5 (Debian, Ubuntu), dnf install libomp, or conda install llvm-openmp")
    conflicts = ("libiomp",)


_TBB_MAX_CONCURRENCY = "_ZN3tbb6detail2r115max_concurrencyEPKNS0_2d115task_arena_baseE"
_TBB_ACTIVE_VALUE = "_ZN3tbb6detail2r127global_control_active_valueEi"


class OneTBB(Library):
    """oneTBB: invisible to threadpoolctl, read through its own getters; not to be mixed with OpenMP
    in one build (PyTorch's threading note)."""

    name, label = "tbb", "oneTBB"
    prefixes = ("libtbb",)
    not_prefixes = ("libtbbmalloc", "libtbbbind")
    user_api = internal_api = "tbb"
    env_prefixes = ("TBB_",)
    push = Push.NONE
    direct = DirectRead("TBB is not visible to threadpoolctl; count from "
                        "this_task_arena::max_concurrency() and global_control",
                        "TBB is not visible to threadpoolctl; its count cannot be read without changing it")
    avoid_with = ("openmp",)
    note = "count from this_task_arena::max_concurrency() and global_control, read through ctypes"

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        return defaults.affinity_no_variable(facts, ctx)

    def read_direct(self, path: str) -> tuple[str | None, int | None]:
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
