"""The library registry: one :class:`Library` record per library, and the thread variables they read.

This is the only module of parinfo that knows a library: which files it ships as, which variables
carry its count and in what order, its default and its cap, the profile key that sets it, how a
count is pushed and read back, and whether its limit holds per calling thread or for the whole
process. Every other module asks it (:func:`library`, :func:`records`, :data:`THREAD_VARS`...).

Importing this module is cheap (the standard library and :mod:`parinfo.process.defaults`, the
default rules over the machine's facts alone): the launcher runs it on the start-up path of
``parinfo apply P -- CMD``.

Adding a library: append one :class:`Library` to ``_RECORDS`` (and its variables to ``_VARIABLES``
when it brings its own). Nothing else needs editing; docs/process.md says more.
"""
from __future__ import annotations

import enum
import functools
import sys
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from parinfo.machine.rounding import ROUNDING_VAR, ROUNDINGS
from parinfo.process import defaults
from parinfo.records.record import record
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

# ---------------------------------------------------------------------------------------------
# Thread variables


@record(frozen=True)
class Var:
    """One thread-steering environment variable: its syntax and what it controls.

    ``kind`` is count | count_list | bool | enum | text | blocktime | cpu_count; ``choices`` the
    words of an enum; ``enum_list`` an enum that takes a comma-separated list (OMP_PROC_BIND);
    ``python`` the first Python version that reads it, when Python itself is the reader;
    ``set_on_import`` the (module, package) pairs whose import sets it (``os.environ.setdefault``);
    ``listed_unset`` False for one the report lists only when it is set (a mark, not a setting).
    Who reads a variable is not written here: :attr:`readers` asks the library records.
    """

    name: str
    kind: str
    summary: str
    choices: tuple[str, ...] = ()
    enum_list: bool = False
    python: tuple[int, int] | None = None
    set_on_import: tuple[tuple[str, str], ...] = ()
    listed_unset: bool = True

    @property
    def readers(self) -> tuple[str, ...]:
        """The libraries that read it: those whose own variable it is (by name prefix), then the
        frameworks, then the libraries that fall back to it; each group in registry order."""
        return _readers().get(self.name, ())


_OMP_BIND = ("true", "false", "master", "primary", "close", "spread")

# The order here is the order of the report's variable list.
_VARIABLES: tuple[Var, ...] = (
    Var("OMP_NUM_THREADS", "count_list", "OpenMP team size; fallback for MKL, OpenBLAS, BLIS, numexpr and torch"),
    Var("MKL_NUM_THREADS", "count", "MKL thread count; torch's first choice"),
    Var("OPENBLAS_NUM_THREADS", "count", "OpenBLAS thread count"),
    Var("GOTO_NUM_THREADS", "count", "OpenBLAS thread count (legacy name)"),
    Var("OPENBLAS_CORETYPE", "text", "OpenBLAS kernels: a CPU name (Haswell, SkylakeX...) that replaces its "
        "CPU detection"),
    Var("BLIS_NUM_THREADS", "count", "BLIS thread count"),
    Var("VECLIB_MAXIMUM_THREADS", "count", "Apple Accelerate thread cap"),
    Var("NUMEXPR_NUM_THREADS", "count", "numexpr thread count"),
    Var("NUMEXPR_MAX_THREADS", "count", "numexpr pool size cap"),
    Var("OMP_DYNAMIC", "bool", "let OpenMP shrink teams at run time"),
    Var("MKL_DYNAMIC", "bool", "let MKL use fewer threads than asked (caps at physical cores)"),
    Var("OMP_PROC_BIND", "enum", "OpenMP thread binding policy", _OMP_BIND, enum_list=True),
    Var("OMP_PLACES", "text", "OpenMP places (threads, cores, sockets, or an explicit list)"),
    Var("OMP_WAIT_POLICY", "enum", "OpenMP idle threads spin (active) or sleep (passive)", ("active", "passive")),
    Var("KMP_AFFINITY", "text", "Intel/LLVM OpenMP affinity"),
    Var("KMP_BLOCKTIME", "blocktime", "ms an Intel/LLVM OpenMP thread spins before sleeping"),
    Var("GOMP_CPU_AFFINITY", "text", "GNU OpenMP CPU binding list"),
    Var("KMP_DUPLICATE_LIB_OK", "bool", "allow two OpenMP runtimes in one process (hides a real conflict)",
        set_on_import=(("sklearn", "scikit-learn"), ("threadpoolctl", "threadpoolctl"))),
    Var("MKL_THREADING_LAYER", "enum", "MKL threading layer for mkl_rt", ("intel", "sequential", "gnu", "tbb", "pgi")),
    Var("NUMBA_NUM_THREADS", "count", "numba's parallel thread count (threads launched; read at import)"),
    Var("NUMBA_THREADING_LAYER", "enum", "numba's threading layer (or a safety class that picks one)",
        ("default", "safe", "threadsafe", "forksafe", "tbb", "omp", "workqueue")),
    Var("PYTHON_CPU_COUNT", "cpu_count", "overrides os.cpu_count() (Python 3.13+)", python=(3, 13)),
    Var("PYTHON_GIL", "enum", "free-threaded CPython: 0 keeps the GIL off, 1 turns it on (3.13+)", ("0", "1"),
        python=(3, 13)),
    Var("PARINFO_NUM_THREADS", "count", "parinfo intra-op count"),
    Var("PARINFO_NUM_INTEROP_THREADS", "count", "parinfo inter-op count"),
    Var("PARINFO_BACKEND", "enum", "parinfo runtime backend", ("native", "sequential")),
    Var("PARINFO_VERIFY", "enum", "what a program launched by `parinfo apply` checks at exit", ("auto", "full", "off")),
    Var("PARINFO_ADAPTIVE", "bool", "parinfo runtime's per-call-site choices (0 turns them off)"),
    Var("PARINFO_FOLLOW_QUOTA", "bool", "parinfo runtime's defaults follow a changing CPU quota (0 turns it off)"),
    Var(ROUNDING_VAR, "enum", "how parinfo rounds a fractional CPU quota to usable CPUs", ROUNDINGS),
    Var("PARINFO_PRELOAD", "text", "the LD_PRELOAD entries `parinfo apply` put first (a profile's allocator and "
        "OpenMP runtime)"),
    Var("PARINFO_PROFILE", "text", "the profile `parinfo apply` launched the program with (names the source "
        "of the counts it set)", listed_unset=False),
    Var("PARINFO_INSTANCE", "text", "this instance's index among those `parinfo apply --instances` started",
        listed_unset=False),
    Var("PARINFO_INSTANCES", "count", "how many instances `parinfo apply --instances` started", listed_unset=False),
)

# ---------------------------------------------------------------------------------------------
# Default rules and caps that read a variable or ask the loaded module (parinfo.process.defaults
# holds those over the machine's facts alone and says what a rule takes and returns)


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


#: The words a boolean variable takes (any case), as the libraries that read them accept.
TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


def is_false(value: str | None) -> bool:
    """True when a boolean variable's value means off (FALSE, 0, no, off)."""
    return value is not None and value.strip().lower() in FALSE_WORDS


def _mkl_cap(facts: MachineFacts, env: Mapping[str, str],
             ctx: Mapping[str, Any] | None = None) -> tuple[int | None, str]:
    if is_false(env.get(role_var("dynamic"))):
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
    n, cores, dynamic = counts["mkl"], values["usable_physical_cores"], role_var("dynamic")
    if n > cores and not is_false(env.get(dynamic)):
        return (f"MKL uses at most the physical cores ({cores} usable) unless {dynamic}=FALSE; "
                f"libraries.mkl asks for {n}")
    return None


def _torch_plan_note(counts: Mapping[str, int], values: Mapping[str, int], env: Mapping[str, str]) -> str | None:
    """A profile's torch count other than its MKL count: torch reads MKL's variable at import, so
    its own count is set afterwards."""
    mkl, torch = counts["mkl"], counts["torch"]
    if torch != mkl:
        return (f"torch reads {library('torch').precedence[0]} ({mkl}) at import; its intra-op count {torch} "
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
# Library records


class LibraryKind(str, enum.Enum):
    """What a library is, which says where parinfo finds it and its count."""

    NATIVE = "native"  # a shared object, found by its file name among the loaded objects
    PYTHON = "python"  # a Python module with its own count (numexpr, numba), read when imported
    FRAMEWORK = "framework"  # a Python framework with its own pools (torch)
    INTERPRETER = "interpreter"  # Python itself
    PARINFO = "parinfo"  # parinfo's own runtime

    def __str__(self) -> str:
        return self.value


class Push(str, enum.Enum):
    """How parinfo sets a library's count (:mod:`parinfo.process.setter` does it, asking the record)."""

    THREADPOOLCTL = "threadpoolctl"  # threadpoolctl's controller for its ``internal_api``, per loaded copy
    SETTER = "setter"  # the module's own functions (:class:`Calls`)
    RUNTIME = "runtime"  # parinfo's own runtime
    NONE = "none"  # parinfo cannot set it

    def __str__(self) -> str:
        return self.value


class Scope(str, enum.Enum):
    """For whom a set limit holds: the calling thread only (OpenMP's ICVs), or the whole process.
    Its value is the word an :class:`~parinfo.process.setter.Outcome` carries."""

    THREAD = "thread"
    PROCESS = "process"

    def __str__(self) -> str:
        return self.value


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@record(frozen=True)
class Calls:
    """A count set and read through a Python module's own functions: ``setter(n)`` and
    ``getter()``; ``read(module)`` replaces the getter where calling it would change something
    (numba's launches its threads). Counts are set through it by :mod:`parinfo.process.setter` only
    (:meth:`Library.push_count`)."""

    setter: str = "set_num_threads"
    getter: str = "get_num_threads"
    read: Callable[[Any], Any] | None = None

    def set(self, module: Any, n: int) -> None:
        """Set the count; raises what the module raises when it refuses."""
        getattr(module, self.setter)(n)

    def get(self, module: Any) -> int | None:
        """The count in force, read without changing it; None when it cannot be read (a
        half-initialised module, no getter, not an int)."""
        try:
            if self.read is not None:
                count = self.read(module)
            else:
                getter = getattr(module, self.getter, None)
                count = getter() if callable(getter) else getattr(module, "nthreads", None)
        except Exception:
            return None
        return _count(count)

    def call(self, owner: str, n: int | None = None) -> str:
        """How a report names the setter: ``numba.set_num_threads``, or with ``n``: ``...(2)``."""
        return f"{owner}.{self.setter}" + ("" if n is None else f"({n})")


@record(frozen=True)
class DirectRead:
    """How a loaded copy that threadpoolctl does not see is read without changing anything (TBB):
    ``read(path)`` gives (version, count) through the library's own getters, None parts when they
    are missing; ``how`` is the pool row's note when the count was read, ``unread`` when it was not."""

    read: Callable[[str], tuple[str | None, int | None]]
    how: str
    unread: str


@record(frozen=True)
class SetAlong:
    """A framework that sets this library's count to its own intra-op count (torch sets its OpenMP
    runtime's and MKL's): ``framework`` (its record name, also the package that ships the copy it
    sets), ``named`` (how the words name this library: "OpenMP runtime", "MKL"), and ``when``
    (appended to say when the framework sets it unasked: " when it initialised", or "")."""

    framework: str
    named: str
    when: str = ""


@record(frozen=True)
class CountSymbol:
    """Where a library keeps its count in force, so that the count of another process can be read
    from its memory (:mod:`parinfo.process.inforce`) without stopping it.

    ``getters``: the exported getter functions tried in order (the first the file exports wins); its
    machine code, read from the process's memory, must load the variable it returns (that is what
    makes a file named like the library believed; it also finds the variable where no symbol names
    it). ``names``: the variable's symbol names, exported or local (``.symtab``); when the file
    names it, the getter must load that very variable. ``size``: its width in bytes (a C ``int``: 4),
    read as a signed integer in the file's byte order; ``unset``: the value it holds before the
    library has set it up (the count is then unknown). A count is believed from 1 to the build's
    maximum: ``max_symbol`` names a local array of one pointer per thread the build allows (its size
    over the pointer size), and ``max_count`` bounds it, and is the bound when the file does not say.
    ``verified``: the builds on which the facts were checked against the library's own getter.
    """

    names: tuple[str, ...]
    getters: tuple[str, ...] = ()
    size: int = 4
    unset: int = 0
    max_symbol: str = ""
    max_count: int = 1024
    verified: str = ""


@record(frozen=True)
class NativeReads:
    """The C functions that read a loaded library's facts without changing anything, called (through
    ctypes, on the copy already loaded) by the script parinfo's attach runs inside another process
    (:mod:`parinfo.process.attach`): names without the build's affixes, every one optional but ``count``.

    ``count``: ``int f(void)``, the count in force for the calling thread (the target's main thread).
    ``affixes``: (prefix, suffix) pairs a build may put around every name (scipy-openblas builds);
    the first pair under which ``count`` is exported is used for the others. ``version``: ``const
    char *f(void)``, or with ``version_buffer`` ``void f(char *buf, int len)``; the version is the word
    after ``version_after`` in that text ("" : the whole text). ``layer``: ``int f(void)`` whose
    value ``layer_codes`` names (the threading layer); with the layer "openmp" the count is
    ``openmp_count``'s instead (the calling thread's OpenMP limit, as threadpoolctl reads it).
    ``architecture``: ``const char *f(void)``, the kernels in use.
    """

    count: str
    affixes: tuple[tuple[str, str], ...] = (("", ""),)
    version: str = ""
    version_buffer: bool = False
    version_after: str = ""
    layer: str = ""
    layer_codes: tuple[tuple[int, str], ...] = ()
    openmp_count: str = ""
    architecture: str = ""

    def to_data(self) -> dict[str, Any]:
        """Its fields as plain data (the attach script takes nothing else)."""
        return {"count": self.count, "affixes": [list(a) for a in self.affixes], "version": self.version,
                "version_buffer": self.version_buffer, "version_after": self.version_after, "layer": self.layer,
                "layer_codes": {str(code): name for code, name in self.layer_codes},
                "openmp_count": self.openmp_count, "architecture": self.architecture}


@record(frozen=True)
class Preloadable:
    """How a profile's ``openmp:`` word puts this runtime in charge of a launched program: ``word``
    (intel, gnu, llvm), the file ``names`` to preload, best first, ``binds`` (``kmp``: its threads
    are bound through its ``affinity`` variable; ``omp``: through ``proc_bind`` and ``places``), and
    what to ``install`` when it is missing."""

    word: str
    names: tuple[str, ...]
    binds: str
    install: str


#: The entry points that say which OpenMP runtime serves a process: the OpenMP API's, and the GNU
#: ABI's that GCC-built code calls (Intel's and LLVM's runtimes provide both).
OPENMP_ENTRY_POINTS = ("omp_get_max_threads", "GOMP_parallel")


@record(frozen=True)
class Library:
    """Everything parinfo knows about one library, in the manner of threadpoolctl's controllers.

    Found by: ``prefixes`` (starts of its shared objects' file names, ``not_prefixes`` excepted: a
    helper such as TBB's allocator is not a runtime; the owning package is the
    ``site-packages`` folder the file lies in) or ``module`` (a Python module, read only when it is
    already in ``sys.modules``, never imported by parinfo).
    Count: ``precedence`` (variables read in order, first valid wins; then those of ``follows``),
    ``default`` when none is set, ``cap`` on a variable's request (``cap_vars`` steer the cap;
    ``refused`` is the count kept when a request above the cap is refused rather than cut to the
    cap, as numexpr does; ``context`` gathers what only the loaded module can tell the default and
    the cap). ``layer_files`` tell its threading layer from the files loaded beside it;
    ``layer_var`` chooses that layer.
    Set and read back (by :mod:`parinfo.process.setter`, the one module that sets counts, asking
    the record): ``push`` (:class:`Push`) says how: through threadpoolctl's controller for
    ``internal_api`` (:attr:`set_by_threadpoolctl`), through the module's own functions
    (``calls``, and ``interop_calls`` for a framework's inter-op pool: :meth:`push_count`,
    :meth:`read_count`, :meth:`push_interop`, :meth:`read_interop`), by parinfo's runtime, or not at
    all. ``native_getter`` names the C call that reads it; ``team_release`` the C call that frees the
    calling thread's idle team. ``scope`` (:class:`Scope`) is THREAD when a set limit holds for the
    calling thread only (OpenMP's ICVs), PROCESS otherwise (:attr:`per_thread`;
    :meth:`per_thread_in` adds the threading layer). ``set_along``: the framework that sets its count
    with its own (:class:`SetAlong`). ``direct``: how a copy threadpoolctl does not see is read
    (:class:`DirectRead`). ``avoid_with``: the user APIs of runtimes not to mix with it in one build.
    ``kind`` (:class:`LibraryKind`) says what it is: a native library, a Python module with its own
    count, a framework, the interpreter, parinfo.
    Profiles: ``profile_key`` (libraries.KEY) sets it through ``profile_var`` at launch; ``plan_note``
    says what a plan's counts (by profile key) mean for it on the machine (MKL's cap, torch's import).
    From outside: ``count_symbol`` (:class:`CountSymbol`) names the getter and variable that hold the
    count in force, and its bounds, when the library keeps it in one. Attached (a script run inside
    the process): ``native`` (:class:`NativeReads`) names the C getters of a loaded copy;
    ``module_facts`` the attributes of a Python-module library that ``context`` reads (dotted, from
    the module), read there beside ``getter``'s count.
    """

    name: str
    label: str
    kind: LibraryKind = LibraryKind.NATIVE
    prefixes: tuple[str, ...] = ()
    not_prefixes: tuple[str, ...] = ()
    module: str | None = None
    user_api: str | None = None
    internal_api: str | None = None
    vendor: str | None = None
    env_prefixes: tuple[str, ...] = ()
    precedence: tuple[str, ...] = ()
    follows: str | None = None
    reads: tuple[str, ...] = ()
    default: defaults.Rule | None = None
    cap: defaults.Cap | None = None
    cap_vars: tuple[str, ...] = ()
    refused: int | None = None
    context: Callable[[Any, Mapping[str, str]], dict[str, Any]] | None = None
    profile_key: str | None = None
    profile_var: str | None = None
    push: Push = Push.THREADPOOLCTL
    calls: Calls | None = None
    interop_calls: Calls | None = None
    native_getter: str | None = None
    team_release: str | None = None
    scope: Scope = Scope.PROCESS
    layer_files: tuple[tuple[str, str], ...] = ()
    layer_var: str | None = None
    listed: str = "always"  # always | loaded: list its unset variables only when the module is loaded
    roles: tuple[tuple[str, str], ...] = ()  # (role, variable): variables other modules ask for by role
    conflicts: tuple[str, ...] = ()  # runtimes it cannot share a process with (both initialised: abort)
    warns_invalid: bool = False  # prints a warning for an invalid count variable (the others are silent)
    static_prefixes: tuple[str, ...] = ()  # files that hold it without a controller threadpoolctl knows
    linked_into: tuple[tuple[str, str], ...] = ()  # (file prefix, framework): a copy linked inside it
    layer_from_openmp: tuple[tuple[str, str], ...] = ()  # (OpenMP runtime, layer) when no layer file says
    count_symbol: CountSymbol | None = None
    native: NativeReads | None = None
    module_facts: tuple[str, ...] = ()
    set_along: SetAlong | None = None
    direct: DirectRead | None = None
    static_note: str = ""  # the pool row's note for a file of static_prefixes
    avoid_with: tuple[str, ...] = ()  # user APIs of runtimes whose threads its scheduler does not know
    plan_note: Callable[[Mapping[str, int], Mapping[str, int], Mapping[str, str]], str | None] | None = None
    preload: Preloadable | None = None  # how a profile's openmp: word preloads it (OpenMP runtimes)
    note: str = ""

    def var(self, role: str) -> str:
        """The variable that plays ``role`` for this library (KeyError when none does)."""
        for name, var in self.roles:
            if name == role:
                return var
        raise KeyError(f"{self.name} has no variable for {role!r}")

    def layer_in(self, objects: list[str]) -> str | None:
        """Its threading layer, from the files loaded beside it (``layer_files``), or None."""
        for path in objects:
            base = path.rsplit("/", 1)[-1].lower()
            for prefix, layer in self.layer_files:
                if base.startswith(prefix):
                    return layer
        return None

    def layer_given_openmp(self, runtimes: set[str]) -> str | None:
        """Its threading layer inferred from the one OpenMP runtime its owner loaded, or None."""
        if len(runtimes) != 1:
            return None
        return dict(self.layer_from_openmp).get(next(iter(runtimes)))

    @property
    def count_vars(self) -> tuple[str, ...]:
        """All variables that decide its count, first wins (its own, then those it follows)."""
        if self.follows is None:
            return self.precedence
        return self.precedence + library(self.follows).count_vars

    @property
    def variables(self) -> tuple[str, ...]:
        """The variables it reads itself (not those of the library it follows): its own count
        variables, then the other steering ones."""
        return tuple(dict.fromkeys(self.precedence + self.reads))

    @property
    def set_by_threadpoolctl(self) -> bool:
        """Whether its loaded copies are set through threadpoolctl's controller for them."""
        return self.push is Push.THREADPOOLCTL

    @property
    def set_in_module(self) -> bool:
        """Whether its count is set through its Python module's own functions (:meth:`push_count`)."""
        return self.push is Push.SETTER and self.calls is not None

    def _calls(self, calls: Calls | None) -> Calls:
        if calls is None or self.push is not Push.SETTER:
            raise TypeError(f"{self.name}'s count is not set through its module's functions")
        return calls

    def push_count(self, module: Any, n: int) -> None:
        """Set its count in its imported ``module`` (torch: the intra-op count); raises what the
        module raises when it refuses. Only :mod:`parinfo.process.setter` calls it."""
        self._calls(self.calls).set(module, n)

    def read_count(self, module: Any) -> int | None:
        """The count in force in its imported ``module`` (torch: the intra-op count), read without
        changing it; None when it cannot be read."""
        return None if self.calls is None else self.calls.get(module)

    def push_interop(self, module: Any, n: int) -> None:
        """Set a framework's inter-op count (torch's); raises what the module raises when it refuses.
        Only :mod:`parinfo.process.setter` calls it."""
        self._calls(self.interop_calls).set(module, n)

    def read_interop(self, module: Any) -> int | None:
        """A framework's inter-op count in force; None when it cannot be read."""
        return None if self.interop_calls is None else self.interop_calls.get(module)

    def set_call(self, n: int | None = None) -> str:
        """How a report names the call that sets its count: ``numexpr.set_num_threads``, with ``n``
        ``numexpr.set_num_threads(4)``."""
        return self._calls(self.calls).call(str(self.module), n)

    def interop_call(self, n: int | None = None) -> str:
        """How a report names the call that sets a framework's inter-op count."""
        return self._calls(self.interop_calls).call(str(self.module), n)

    @property
    def per_thread(self) -> bool:
        """Whether a limit set on it holds for the calling thread only (whatever its build)."""
        return self.scope is Scope.THREAD

    def scope_of(self, threading_layer: str | None) -> Scope:
        """Whose limit a set count is for a loaded copy with this threading layer: a library built
        on an OpenMP runtime follows the calling thread's OpenMP limit."""
        return Scope.THREAD if self.per_thread or threading_layer == "openmp" else Scope.PROCESS

    def per_thread_in(self, threading_layer: str | None) -> bool:
        """Whether a limit set on a loaded copy with this threading layer holds per calling thread."""
        return self.scope_of(threading_layer) is Scope.THREAD

    def is_loaded(self, modules: Collection[str] | None = None) -> bool:
        """True when its Python module is imported (in ``modules``, default this process's; always
        False for a native library)."""
        return self.module is not None and self.module in (sys.modules if modules is None else modules)


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


# Registry order matters: it is the order of a variable's readers within each group.
_RECORDS: tuple[Library, ...] = (
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
    Library("torch", "torch", kind=LibraryKind.FRAMEWORK, module="torch",
            precedence=("MKL_NUM_THREADS", "OMP_NUM_THREADS"), default=defaults.physical_in_affinity, cap=_mkl_cap,
            cap_vars=("MKL_DYNAMIC",), profile_key="torch", push=Push.SETTER, calls=Calls(),
            interop_calls=Calls("set_num_interop_threads", "get_num_interop_threads"), scope=Scope.THREAD,
            plan_note=_torch_plan_note,
            note="intra-op reads MKL_NUM_THREADS only when torch has MKL; inter-op reads no variable "
                 "(std::thread::hardware_concurrency)"),
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
            precedence=("PARINFO_NUM_THREADS",), follows="torch",
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

_BY_NAME: dict[str, Library] = {r.name: r for r in _RECORDS}

# ---------------------------------------------------------------------------------------------
# Questions other modules ask


def records() -> tuple[Library, ...]:
    """Every library record, in registry order."""
    return _RECORDS


def library(name: str) -> Library:
    """The record named ``name`` (KeyError when there is none)."""
    return _BY_NAME[name]


def find(name: str) -> Library | None:
    """The record named ``name``, or None."""
    return _BY_NAME.get(name)


def by_prefix(file_name: str) -> Library | None:
    """The native library whose shared object ``file_name`` (a base name, lower case) is, or None."""
    for rec in _RECORDS:
        if rec.prefixes and file_name.startswith(rec.prefixes):
            return None if rec.not_prefixes and file_name.startswith(rec.not_prefixes) else rec
    return None


def by_internal_api(internal_api: str | None) -> Library | None:
    """The first record for a threadpoolctl ``internal_api`` (openblas, mkl, blis, flexiblas, openmp)."""
    return next((r for r in _RECORDS if internal_api and r.internal_api == internal_api), None)


def python_libraries() -> tuple[Library, ...]:
    """Libraries that are Python modules with their own count (numexpr...), read when imported."""
    return tuple(r for r in _RECORDS if r.kind is LibraryKind.PYTHON)


def openmp_runtimes() -> tuple[str, ...]:
    """Names of the OpenMP runtimes (libgomp, libiomp, libomp)."""
    return tuple(r.name for r in _RECORDS if r.user_api == "openmp")


def profile_keys() -> tuple[str, ...]:
    """The keys of a profile's ``libraries`` section, in the order the language lists them."""
    keys = [r.profile_key for r in _RECORDS if r.profile_key]
    first = ("blas", "openmp", "mkl", "torch")
    return tuple(dict.fromkeys([k for k in first if k in keys] + keys))


def _library_vars() -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for rec in _RECORDS:
        if rec.profile_key:
            have = out.get(rec.profile_key, ())
            add = (rec.profile_var,) if rec.profile_var and rec.profile_var not in have else ()
            out[rec.profile_key] = have + add
    return out


@functools.cache
def _readers() -> dict[str, tuple[str, ...]]:
    """Variable -> the records that read it: its own library first, then frameworks, then others."""
    found: dict[str, list[tuple[int, int, str]]] = {}
    for i, rec in enumerate(_RECORDS):
        for var in rec.variables:
            group = 0 if var.startswith(rec.env_prefixes or ("\0",)) else 1 if rec.kind is LibraryKind.FRAMEWORK else 2
            found.setdefault(var, []).append((group, i, rec.name))
    return {v: tuple(n for _, _, n in sorted(rows)) for v, rows in found.items()}

#: Every thread variable parinfo knows, by name, in report order.
THREAD_VARS: dict[str, Var] = {v.name: v for v in _VARIABLES}

#: parinfo's runtime counts: (intra-op variable, inter-op variable).
RUNTIME_VARS: tuple[str, str] = (library("parinfo").precedence[0], library("parinfo").var("inter_op"))

#: The variables that carry each profile key's count (torch has none of its own).
LIBRARY_VARS: dict[str, tuple[str, ...]] = _library_vars()

#: Name prefixes of variables that steer some runtime's threads: a set variable with one of these
#: prefixes is reported even when it is not in THREAD_VARS.
THREAD_PREFIXES: tuple[str, ...] = tuple(dict.fromkeys(p for r in _RECORDS for p in r.env_prefixes))


def listed_unset(name: str, modules: Collection[str] | None = None) -> bool:
    """Whether the report lists ``name`` while it is unset: always, unless every reader asks to be
    listed only when its module is loaded and none of those is (in ``modules``, the modules the
    process imported; default: this process's)."""
    if name in THREAD_VARS and not THREAD_VARS[name].listed_unset:
        return False
    readers = [_BY_NAME[n] for n in THREAD_VARS[name].readers] if name in THREAD_VARS else []
    return not readers or any(r.listed == "always" or r.is_loaded(modules) for r in readers)


def role_var(role: str) -> str:
    """The variable that plays ``role`` (wait_policy, duplicate_ok, dynamic, inter_op, backend,
    verify, adaptive, follow, gil) for the first library that has one."""
    for rec in _RECORDS:
        for name, var in rec.roles:
            if name == role:
                return var
    raise KeyError(f"no library has a variable for {role!r}")


def conflicting_openmp() -> tuple[Library, Library]:
    """The two OpenMP runtimes that cannot share a process (Intel libiomp, LLVM libomp)."""
    first = next(r for r in _RECORDS if r.conflicts)
    return first, library(first.conflicts[0])


def warns_invalid() -> tuple[str, ...]:
    """The libraries that print a warning for an invalid count variable (the others are silent)."""
    return tuple(r.name for r in _RECORDS if r.warns_invalid)


def set_on_import(module: str) -> tuple[str, ...]:
    """The variables whose value importing ``module`` sets (``os.environ.setdefault``)."""
    return tuple(v.name for v in _VARIABLES if any(m == module for m, _ in v.set_on_import))


def hook_facts() -> str:
    """The registry's facts the start-up hook needs (it imports nothing of parinfo), for its
    instruction variable, as space-separated fields: ``pool.API=VAR,VAR`` the precedence of each
    threadpoolctl ``internal_api``; ``runtime=INTRA,INTER`` parinfo's runtime variables;
    ``verify=VAR`` the variable that says what the hook checks; ``profile=VAR`` the one that names
    the profile; ``preload=VAR`` the one that lists the files a launch preloaded; ``undo=VAR,...`` the variables
    threadpoolctl's import sets; ``torch=SET,GET,SET_INTEROP,GET_INTEROP`` torch's setters."""
    fields: dict[str, str] = {}
    for rec in _RECORDS:
        if rec.internal_api and rec.set_by_threadpoolctl and rec.count_vars:
            fields.setdefault(f"pool.{rec.internal_api}", ",".join(rec.count_vars))
    torch = library("torch")
    calls = (torch.calls or Calls(), torch.interop_calls or Calls())
    fields.update({
        "runtime": ",".join(RUNTIME_VARS),
        "verify": library("parinfo").var("verify"),
        "profile": library("parinfo").var("profile"),
        "preload": library("parinfo").var("preload"),
        "undo": ",".join(set_on_import("threadpoolctl")),
        "torch": ",".join(name for c in calls for name in (c.setter, c.getter)),
    })
    return " ".join(f"{k}={v}" for k, v in fields.items())
