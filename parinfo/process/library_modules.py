"""The families that are Python modules or frameworks (numexpr, numba, torch), the interpreter
itself, and parinfo's own runtime: read only when imported, set through their own functions."""
from __future__ import annotations

import sys
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from parinfo.machine.rounding import ROUNDING_VAR
from parinfo.process import defaults
from parinfo.process.defaults import NO_FACTS, ModuleFacts
from parinfo.process.library_base import INTER_OP, Library, QuotaRule
from parinfo.process.library_blas import MKL_DYNAMIC, Mkl, mkl_dynamic_cap
from parinfo.process.library_parts import (
    Calls,
    CountSymbol,
    Does,
    LibraryKind,
    Pool,
    Push,
    Reading,
    ScopeFacts,
    Takes,
    Uptake,
    as_count,
)
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts


class Numexpr(Library):
    """numexpr: a pool of NUMEXPR_MAX_THREADS; a count above it is refused (1 thread runs)."""

    name = label = module = "numexpr"
    kind = LibraryKind.PYTHON
    env_prefixes = ("NUMEXPR_",)
    precedence = ("NUMEXPR_NUM_THREADS", "OMP_NUM_THREADS")
    reads = ("NUMEXPR_MAX_THREADS",)
    cap_vars = ("NUMEXPR_MAX_THREADS",)
    refused = 1
    module_facts = ("ncores", "MAX_THREADS")
    profile_key, profile_var = "numexpr", "NUMEXPR_NUM_THREADS"
    push, calls = Push.SETTER, Calls()
    note = ("pool of NUMEXPR_MAX_THREADS (read at import, 64 unset); a count above it is refused with "
            "an 'Error.' line on stderr and 1 thread runs; 16 at most when neither it nor "
            "OMP_NUM_THREADS is set")
    scopes = (ScopeFacts("numexpr.set_num_threads", reaches_new=True, reaches_running=True, shared_pool=True,
                         measured="numexpr 2.14.2"),)

    def context(self, module: Any, env: Mapping[str, str]) -> ModuleFacts:
        return ModuleFacts(ncores=as_count(getattr(module, "ncores", None)),
                           max_threads=as_count(getattr(module, "MAX_THREADS", None)),
                           max_set=bool(env.get("NUMEXPR_MAX_THREADS")))

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        """numexpr 2.8.5+ with no count asked: its whole pool when NUMEXPR_MAX_THREADS is set, else
        the online CPUs it detects (affinity ignored), at most 16."""
        pool = ctx.max_threads
        if ctx.max_set and isinstance(pool, int):
            return pool, f"{pool} (NUMEXPR_MAX_THREADS: numexpr runs its whole pool when no count is asked)"
        ncores = ctx.ncores or facts.logical_cpus or 1
        if ncores > 16:
            return 16, f"16 (numexpr's safe limit; {plural(ncores, 'core')} detected)"
        return ncores, f"{ncores} (online CPUs detected by numexpr; affinity ignored)"

    def cap(self, facts: MachineFacts, env: Mapping[str, str],
            ctx: ModuleFacts | None = None) -> tuple[int | None, str]:
        """numexpr's pool size (MAX_THREADS: NUMEXPR_MAX_THREADS at import, else 64): a request
        above it is refused."""
        pool = (ctx or NO_FACTS).max_threads
        if not isinstance(pool, int):
            return None, ""
        if (ctx or NO_FACTS).max_set:
            return pool, f"its pool of NUMEXPR_MAX_THREADS={pool}"
        return pool, f"its pool of {pool} (NUMEXPR_MAX_THREADS unset)"


class Torch(Library):
    """torch: an intra-op count read from MKL's and OpenMP's variables at import (MKL's only when
    torch has MKL), an inter-op count that reads none; both set through its own functions."""

    name = label = module = "torch"
    kind = LibraryKind.FRAMEWORK
    precedence = ("MKL_NUM_THREADS", "OMP_NUM_THREADS")
    cap_vars = (MKL_DYNAMIC,)
    profile_key = "torch"
    push, calls = Push.SETTER, Calls()
    pools = (Pool(INTER_OP, Calls("set_num_interop_threads", "get_num_interop_threads")),)
    note = ("intra-op reads MKL_NUM_THREADS only when torch has MKL; inter-op reads no variable "
            "(std::thread::hardware_concurrency)")
    # a thread takes the last count set (in any thread) at its first op, then keeps its own
    scopes = (ScopeFacts("torch.set_num_threads", reaches_new=True, reaches_running=False,
                         local_api="torch.set_num_threads in that thread", measured="torch 2.13.0+cpu (OpenMP backend)",
                         reference="PyTorch docs, CPU threading and TorchScript inference"),)
    # where it keeps the last torch.set_num_threads count (-1: never called), which a thread takes at
    # its first torch op: read in this process to tell that call from an OpenMP limit alone
    last_set = CountSymbol(("_ZN2at12_GLOBAL__N_111num_threadsE",), size=4, unset=-1,
                           verified="torch 2.13.0+cpu (libtorch_cpu.so's .symtab)")
    last_set_file = "libtorch_cpu"

    def how_to_set(self, n: int, pool: str | None = None) -> str:
        """Its setters: which variables its intra-op count reads depends on its build."""
        return f"call {self.setter(n, pool)}"

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        return defaults.physical_in_affinity(facts, ctx)

    def cap(self, facts: MachineFacts, env: Mapping[str, str],
            ctx: ModuleFacts | None = None) -> tuple[int | None, str]:
        return mkl_dynamic_cap(facts, env)

    def vars_without_mkl(self) -> tuple[str, ...]:
        """The variables its intra-op count reads in a build without MKL."""
        return tuple(v for v in self.precedence if not v.startswith(Mkl.env_prefixes))

    def plan_note(self, counts: Mapping[str, int], values: Mapping[str, int],
                  env: Mapping[str, str], facts: MachineFacts | None = None,
                  written: Collection[str] = ()) -> str | None:
        """A profile's torch count other than its MKL count: torch reads MKL's variable at import,
        so its own count is set afterwards."""
        mkl, torch = counts["mkl"], counts["torch"]
        if torch != mkl:
            return (f"torch reads {self.precedence[0]} ({mkl}) at import; its intra-op count {torch} "
                    "is set by the start-up hook or parinfo.apply()")
        return None


class Inductor(Library):
    """torch.compile's Inductor: the compile workers it runs C++ (or Triton) compiles in, sized once
    when ``torch._inductor.config`` is imported, from TORCHINDUCTOR_COMPILE_THREADS or the CPUs in
    affinity (at most 32; a CPU quota is not read). Its row comes with torch's: read from that module
    once imported, else what it would take when imported now (never imported by parinfo: touching
    ``torch._inductor`` imports it, so only ``sys.modules`` is asked)."""

    name, label, module = "inductor", "Inductor compile workers", "torch"
    kind = LibraryKind.PYTHON
    precedence = ("TORCHINDUCTOR_COMPILE_THREADS",)
    # no profile key: a key would follow intra_op (192 compilers on a 192-CPU host, where torch stops at 32);
    # a profile sets it in its env block (the container profile: 1)
    push, calls = Push.NONE, None
    own_rule = "compile-workers-above-usable"
    listed = "loaded"
    read_when = "before torch._inductor is imported (before the first torch.compile)"
    sized_at_use = ("torch._inductor not imported yet: the count it takes from the environment of now when it "
                    "is (at the first torch.compile)")
    note = ("torch.compile's compile workers: a thread pool (C++ kernels on CPU) or a subprocess pool "
            "(Triton) of that many, each running one compiler at once; sized when torch._inductor.config "
            "is imported")
    quota_rule = QuotaRule.IGNORES  # torch 2.13: compile_threads 2 (affinity) in a 0.5-CPU cgroup

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        """torch's decide_compile_threads on Linux: min(32, the CPUs in affinity) (torch._utils.cpu_count)."""
        n, why = defaults.affinity_cpus(facts, ctx)
        if n > _INDUCTOR_MAX:
            return _INDUCTOR_MAX, f"{_INDUCTOR_MAX} (Inductor's limit; {why})"
        return n, f"{why} (Inductor's compile_threads: at most {_INDUCTOR_MAX}; the CPU quota is not read)"

    def count_in(self, var: str, env: Mapping[str, str]) -> int | None:
        """torch reads it with Python's int() ("+3", " 3 " and "3_0" too); 1 or less compiles in the
        calling thread, without a pool: 1 runs."""
        try:
            n = int(env[var])
        except (KeyError, ValueError):
            return None
        return max(1, n)

    def refusal(self, var: str, value: str) -> Reading:
        """A value int() refuses: importing torch._inductor.config raises, so torch.compile fails."""
        return Reading(Does.RAISES, words="raises ValueError when torch._inductor is imported (torch.compile fails)")

    def read_count(self, module: Any) -> int | None:
        """torch._inductor.config.compile_threads once that module is imported in this process (None
        before, or while torch leaves it to the first compile)."""
        if module is not sys.modules.get("torch"):
            return None  # a stand-in read inside another process
        return as_count(getattr(sys.modules.get(_CONFIG), "compile_threads", None))

    def row_note(self, module: Any) -> str | None:
        """Whether its pools are alive in this process: torch's AsyncCompile keeps each it made (a
        thread pool for C++ kernels; a subprocess pool for Triton) in an lru cache at first use."""
        if module is not sys.modules.get("torch") or _CONFIG not in sys.modules:
            return None  # a stand-in read inside another process; or nothing compiled yet
        cls = getattr(sys.modules.get("torch._inductor.async_compile"), "AsyncCompile", None)
        said = [w for w in (_thread_pool(getattr(cls, "pool", None)),
                            "compile subprocess pool alive" if _made(getattr(cls, "process_pool", None)) else "")
                if w]
        return "; ".join(said) if said else "no compile pool started in this process"


def _made(maker: Any) -> bool:
    """Whether an lru-cached maker (AsyncCompile.pool) has made its pool and keeps it."""
    info = getattr(maker, "cache_info", None)
    try:
        return callable(info) and bool(info().currsize)
    except Exception:
        return False


def _thread_pool(maker: Any) -> str:
    """The compile thread pool AsyncCompile made, with its threads started out of its size; "" when
    none was made. Only a made one is asked for: a cache hit (were it cleared meanwhile, a new
    ThreadPoolExecutor starts no thread until a task comes)."""
    if not _made(maker):
        return ""
    try:
        pool = maker()
    except Exception:
        return "compile thread pool alive"
    size, running = as_count(getattr(pool, "_max_workers", None)), getattr(pool, "_threads", None)
    if size is None or not isinstance(running, (set, frozenset)):
        return "compile thread pool alive"
    return f"compile thread pool alive: {len(running)} of {size} workers started"


#: The module whose import sizes Inductor's compile workers.
_CONFIG = "torch._inductor.config"
#: Inductor's most compile workers by default (torch 2.13's decide_compile_threads).
_INDUCTOR_MAX = 32


class Numba(Library):
    """numba: launches NUMBA_NUM_THREADS threads once; its getter would launch them, so its count
    is read from its config until they are."""

    name = label = module = "numba"
    kind = LibraryKind.PYTHON
    precedence = ("NUMBA_NUM_THREADS",)
    reads = ("NUMBA_THREADING_LAYER",)
    profile_key, profile_var = "numba", "NUMBA_NUM_THREADS"
    module_facts = ("config.NUMBA_DEFAULT_NUM_THREADS",)
    push, calls = Push.SETTER, Calls()
    layer_var = "NUMBA_THREADING_LAYER"
    layer_files = (("tbbpool", "tbb"), ("omppool", "omp"), ("workqueue", "workqueue"))
    listed = "loaded"
    note = ("launches NUMBA_NUM_THREADS threads once; set_num_threads masks them for the calling "
            "thread only and refuses more than were launched; its omp layer sets the launching thread's "
            "OpenMP count (of the libgomp it shares with others, LightGBM's) to NUMBA_NUM_THREADS")
    scopes = (ScopeFacts("numba.set_num_threads", reaches_new=False, reaches_running=False,
                         local_api="numba.set_num_threads in that thread", measured="numba 0.68.1, omp layer",
                         reference="numba docs, Setting the Number of Threads (thread-local)"),)
    quota_rule = QuotaRule.IGNORES  # numba 0.68: get_num_threads() 2 (affinity) in a 0.5-CPU cgroup
    read_when = "before `import numba` (it takes the count then)"

    def context(self, module: Any, env: Mapping[str, str]) -> ModuleFacts:
        config = getattr(module, "config", None)
        return ModuleFacts(default=as_count(getattr(config, "NUMBA_DEFAULT_NUM_THREADS", None)))

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        n = ctx.default
        if not isinstance(n, int) or n < 1:
            return defaults.affinity_cpus(facts)
        return n, f"{n} (numba.config.NUMBA_DEFAULT_NUM_THREADS: CPUs in affinity)"

    def read_count(self, module: Any) -> int | None:
        """numba.get_num_threads() launches the threading layer: call it only once that has happened;
        before, the count is the one numba will launch with: the one its parallel module took from
        NUMBA_NUM_THREADS at import (numba.config re-reads the variable at each compile, but the
        launch keeps the import's count, measured on 0.68)."""
        try:
            parallel = sys.modules.get("numba.np.ufunc.parallel")
            if parallel is not None and getattr(parallel, "_is_initialized", False):
                return as_count(module.get_num_threads())
            if parallel is not None and as_count(getattr(parallel, "NUM_THREADS", None)) is not None:
                return as_count(parallel.NUM_THREADS)
            return as_count(getattr(getattr(module, "config", None), "NUMBA_NUM_THREADS", None))
        except Exception:
            return None

    def attach_getter(self) -> tuple[str, tuple[str, str] | None]:
        """get_num_threads(), once its threading layer is launched (it would launch it)."""
        return "get_num_threads", ("fact", "np.ufunc.parallel._is_initialized")

    def uptake(self, module: Any, n: int) -> Uptake:
        """numba took NUMBA_NUM_THREADS at import and launches that many threads; set_num_threads
        (which launches them) masks them for the calling thread only: code in each calling thread."""
        now = self.read_count(module)
        return Uptake(Takes.CODE, now=now, code=f"numba.set_num_threads({n}) in each thread that runs parallel "
                                                f"code (numba took NUMBA_NUM_THREADS={now} at import)")

    def quiet_getter(self) -> str:
        return ""

    def row_note(self, module: Any) -> str | None:
        """Its threading layer: numba.threading_layer() once the layer is launched (it raises, and
        launches nothing, before); until then the layer NUMBA_THREADING_LAYER asks for, or numba's
        order of trial."""
        config = getattr(module, "config", None)
        asked = getattr(config, "THREADING_LAYER", None)
        order = getattr(config, "THREADING_LAYER_PRIORITY", None)
        here = module is sys.modules.get(str(self.module))  # not a stand-in read inside another process
        parallel = sys.modules.get("numba.np.ufunc.parallel") if here else None
        getter = getattr(module, "threading_layer", None)
        if parallel is not None and getattr(parallel, "_is_initialized", False) and callable(getter):
            try:
                return f"threading layer {getter()} (numba.threading_layer())"
            except Exception:
                return None
        if isinstance(asked, str) and asked != "default":
            return (f"threading layer not launched yet: NUMBA_THREADING_LAYER={asked} picks it at the first "
                    "parallel call")
        if isinstance(order, (list, tuple)) and order:
            return ("threading layer not launched yet: the first of " + ", ".join(map(str, order))
                    + " that loads, at the first parallel call")
        return None


class Interpreter(Library):
    """Python itself: PYTHON_CPU_COUNT and PYTHON_GIL."""

    name, label = "python", "Python"
    kind = LibraryKind.INTERPRETER
    reads = ("PYTHON_CPU_COUNT", "PYTHON_GIL")
    push = Push.NONE
    roles = (("gil", "PYTHON_GIL"),)


class ParinfoRuntime(Library):
    """parinfo's own runtime: PARINFO_NUM_THREADS, then torch's variables."""

    name = label = "parinfo"
    kind = LibraryKind.PARINFO
    env_prefixes = ("PARINFO_",)
    precedence = ("PARINFO_NUM_THREADS",)
    follows = Torch
    reads = ("PARINFO_NUM_INTEROP_THREADS", "PARINFO_BACKEND", "PARINFO_VERIFY", "PARINFO_ADAPTIVE",
             "PARINFO_FOLLOW_QUOTA", ROUNDING_VAR, "PARINFO_PRELOAD", "PARINFO_PROFILE", "PARINFO_INSTANCE",
             "PARINFO_INSTANCES")
    roles = (("inter_op", "PARINFO_NUM_INTEROP_THREADS"), ("backend", "PARINFO_BACKEND"),
             ("preload", "PARINFO_PRELOAD"), ("verify", "PARINFO_VERIFY"), ("adaptive", "PARINFO_ADAPTIVE"),
             ("follow", "PARINFO_FOLLOW_QUOTA"), ("quota_rounding", ROUNDING_VAR),
             ("profile", "PARINFO_PROFILE"), ("instance", "PARINFO_INSTANCE"), ("instances", "PARINFO_INSTANCES"))
    push = Push.RUNTIME
