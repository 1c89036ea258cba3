"""The BLAS families: Intel MKL, OpenBLAS, BLIS, FlexiBLAS and Apple Accelerate."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from parinfo.process import defaults
from parinfo.process.defaults import ModuleFacts
from parinfo.process.library_base import Library
from parinfo.process.library_parts import CountSymbol, IdleWait, NativeReads, Push, ScopeFacts, SetAlong, is_false
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

#: MKL's variable that lets it cap a request at the physical cores (its role "dynamic").
MKL_DYNAMIC = "MKL_DYNAMIC"


def mkl_dynamic_cap(facts: MachineFacts, env: Mapping[str, str]) -> tuple[int | None, str]:
    """MKL's cap on a request: the physical cores, unless MKL_DYNAMIC is FALSE (torch's MKL too)."""
    if is_false(env.get(MKL_DYNAMIC)):
        return None, ""
    n = facts.physical_cores
    return n, f"{plural(n, 'physical core')} (MKL_DYNAMIC is not FALSE)"


class _Blas(Library):
    """A BLAS: set through threadpoolctl's controller for its ``internal_api``, by the ``blas`` key."""

    user_api = "blas"
    profile_key = "blas"


_MKL_MEASURED = "mkl 2026.2.0 wheel (mkl_rt), intel threading layer (intel-openmp 2026.2.0)"


class Mkl(_Blas):
    """Intel MKL through mkl_rt: capped at the physical cores unless MKL_DYNAMIC is FALSE; its
    threading layer told by the files beside it; also linked inside torch's library."""

    name, label, internal_api = "mkl", "Intel MKL", "mkl"
    prefixes = ("libmkl_rt",)
    env_prefixes = ("MKL_",)
    precedence = ("MKL_NUM_THREADS", "OMP_NUM_THREADS")
    reads = (MKL_DYNAMIC, "MKL_THREADING_LAYER")
    cap_vars = (MKL_DYNAMIC,)
    profile_key, profile_var = "mkl", "MKL_NUM_THREADS"
    native_getter = "mkl_get_max_threads()"
    native = NativeReads("MKL_Get_Max_Threads", version="MKL_Get_Version_String", version_buffer=True,
                         version_after="Version")
    layer_files = (("libmkl_intel_thread", "intel"), ("libmkl_gnu_thread", "gnu"),
                   ("libmkl_tbb_thread", "tbb"), ("libmkl_sequential", "sequential"))
    layer_var = "MKL_THREADING_LAYER"
    roles = (("dynamic", MKL_DYNAMIC),)
    static_prefixes = ("libmkl_core",)
    static_note = "MKL linked without mkl_rt: threadpoolctl has no controller for it"
    linked_into = (("libtorch_cpu", "torch"),)
    layer_from_openmp = (("libgomp", "gnu"), ("libiomp", "intel"))
    set_along = SetAlong("torch", "MKL")
    # threadpoolctl 3.8 (and so parinfo) sets it through the thread-local call, listed first
    scopes = (ScopeFacts("MKL_Set_Num_Threads_Local", reaches_new=False, reaches_running=False,
                         local_api="mkl_set_num_threads_local", measured=_MKL_MEASURED,
                         reference="oneMKL reference: mkl_set_num_threads_local; threadpoolctl#216, PR#228"),
              ScopeFacts("MKL_Set_Num_Threads", reaches_new=True, reaches_running=True,
                         local_api="mkl_set_num_threads_local", measured=_MKL_MEASURED,
                         reference="oneMKL reference: mkl_set_num_threads; threadpoolctl#208"))

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        return defaults.physical_in_affinity(facts, ctx)

    def cap(self, facts: MachineFacts, env: Mapping[str, str],
            ctx: ModuleFacts | None = None) -> tuple[int | None, str]:
        return mkl_dynamic_cap(facts, env)

    def plan_note(self, counts: Mapping[str, int], values: Mapping[str, int],
                  env: Mapping[str, str], facts: MachineFacts | None = None,
                  written: Collection[str] = ()) -> str | None:
        """A profile's MKL count above the usable physical cores: MKL caps it there unless
        MKL_DYNAMIC is FALSE."""
        n, cores = counts["mkl"], values["usable_physical_cores"]
        if n > cores and not is_false(env.get(MKL_DYNAMIC)):
            return (f"MKL uses at most the physical cores ({cores} usable) unless {MKL_DYNAMIC}=FALSE; "
                    f"libraries.mkl asks for {n}")
        return None


class OpenBLAS(_Blas):
    """OpenBLAS (and scipy-openblas builds): pthreads builds hold one limit for the whole process,
    and their idle threads spin a while after each call; OpenMP builds follow the calling thread's
    OpenMP limit. Its count in force can be read from another process's memory."""

    name, label, internal_api = "openblas", "OpenBLAS", "openblas"
    prefixes = ("libopenblas", "libscipy_openblas")
    env_prefixes = ("OPENBLAS_", "GOTO_")
    precedence = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    reads = ("OPENBLAS_CORETYPE", "OPENBLAS_THREAD_TIMEOUT")
    profile_var = "OPENBLAS_NUM_THREADS"
    native_getter = "openblas_get_num_threads()"
    # its threads spin 2^N cycles after a call (N = OPENBLAS_THREAD_TIMEOUT, 4..30, default 28): 4 is the least
    idle_wait = IdleWait((("OPENBLAS_THREAD_TIMEOUT", "4"),), layers=("pthreads",),
                         measured="numpy 2.4.6's OpenBLAS 0.3.30 under a 0.5-CPU quota: 40 of 40 periods throttled, "
                                  "20 of 40 with 4 (the rest its work)")
    native = NativeReads("openblas_get_num_threads",
                         affixes=tuple((p, s) for p in ("", "scipy_") for s in ("", "64_", "_64")),
                         version="openblas_get_config", version_after="OpenBLAS", layer="openblas_get_parallel",
                         layer_codes=((0, "disabled"), (1, "pthreads"), (2, "openmp")),
                         openmp_count="omp_get_max_threads", architecture="openblas_get_corename")
    # openblas_get_num_threads() returns this int: exported by 0.3.31 and older, a local symbol of
    # .symtab from 0.3.34 (numpy 2.5); scipy-openblas builds prefix the getter
    # (scipy_openblas_get_num_threads64_) but not the variable. blas_thread_buffer is
    # void *[MAX_PARALLEL_NUMBER][MAX_CPU_NUMBER] (MAX_PARALLEL_NUMBER is 1 unless a build changes
    # it): the build's NUM_THREADS. 1024 is the most CPUs a BIGNUMA build handles.
    count_symbol = CountSymbol(("blas_cpu_number",),
                               getters=("openblas_get_num_threads", "scipy_openblas_get_num_threads64_",
                                        "scipy_openblas_get_num_threads", "openblas_get_num_threads64_"),
                               max_symbol="blas_thread_buffer", max_count=1024,
                               verified="numpy 2.4 (scipy-openblas64 0.3.31), numpy 2.5 (scipy-openblas64 "
                                        "0.3.34) and scipy 1.17 (scipy-openblas32 0.3.30) wheels, "
                                        "pthreads builds, x86-64")
    note = ("pthreads builds: one limit for the whole process; OpenMP builds follow the calling "
            "thread's OpenMP limit")
    # pthreads: one pool serves every caller; openmp: each call's team is the calling thread's
    # omp_get_max_threads() (num_cpu_avail resets the count to it, OpenBLAS#5806; PR#5808 changes
    # that after 0.3.31: not measured here). The openmp count is read as threadpoolctl reads it.
    scopes = (ScopeFacts("openblas_set_num_threads", reaches_new=True, reaches_running=True, shared_pool=True,
                         layer="pthreads", measured="numpy 2.4.6's wheel (scipy-openblas64 0.3.31)",
                         reference="threadpoolctl#208, #220"),
              ScopeFacts("openblas_set_num_threads_local", reaches_new=True, reaches_running=True, shared_pool=True,
                         layer="pthreads", measured="numpy 2.4.6's wheel (scipy-openblas64 0.3.31): exported "
                                                    "without the build's affixes, and process-wide",
                         reference="OpenMathLib/OpenBLAS PR#5808 (documents openblas_set_num_threads_local)"),
              ScopeFacts("openblas_set_num_threads", reaches_new=False, reaches_running=False,
                         local_api="omp_set_num_threads in that thread", layer="openmp",
                         measured="Debian 12 libopenblas0-openmp 0.3.21",
                         reference="OpenMathLib/OpenBLAS#5806, PR#5808; threadpoolctl#208"))

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        return defaults.affinity_cpus(facts, ctx)

    def cap(self, facts: MachineFacts, env: Mapping[str, str],
            ctx: ModuleFacts | None = None) -> tuple[int | None, str]:
        return defaults.affinity_cap(facts, env, ctx)


class Blis(_Blas):
    """BLIS: one thread unless asked."""

    name, label, internal_api = "blis", "BLIS", "blis"
    prefixes = ("libblis",)
    env_prefixes = ("BLIS_",)
    precedence = ("BLIS_NUM_THREADS", "OMP_NUM_THREADS")
    profile_var = "BLIS_NUM_THREADS"
    native_getter = "bli_thread_get_num_threads()"
    native = NativeReads("bli_thread_get_num_threads", version="bli_info_get_version_str")
    # one global count, in its pthreads and openmp builds alike; each call makes its own team
    scopes = (ScopeFacts("bli_thread_set_num_threads", reaches_new=True, reaches_running=True,
                         local_api="a rntm_t given to the expert API (bli_rntm_set_num_threads)",
                         measured="Debian 12 libblis4-pthread and libblis4-openmp 0.9.0",
                         reference="BLIS docs/Multithreading.md; threadpoolctl#208"),)

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        return defaults.single_thread(facts, ctx)


class FlexiBLAS(_Blas):
    """FlexiBLAS: a switch in front of another BLAS, whose backend decides the count."""

    name, label, internal_api = "flexiblas", "FlexiBLAS", "flexiblas"
    prefixes = ("libflexiblas",)
    profile_var = "OPENBLAS_NUM_THREADS"
    native_getter = "flexiblas_get_num_threads()"
    native = NativeReads("flexiblas_get_num_threads")

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        return defaults.backend_decides(facts, ctx)


class Accelerate(Library):
    """Apple Accelerate: a variable parinfo lists; parinfo cannot set it."""

    name, label = "accelerate", "Apple Accelerate"
    env_prefixes = ("VECLIB_",)
    reads = ("VECLIB_MAXIMUM_THREADS",)
    push = Push.NONE
