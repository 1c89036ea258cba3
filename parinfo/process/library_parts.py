"""The parts a library record is made of: what a library is (:class:`LibraryKind`), how parinfo sets
its count (:class:`Push`) and for whom (:class:`Scope`; which threads it reaches, measured:
:class:`ScopeFacts`, :func:`predicted_count`), the calls that set and read it
(:class:`Calls`, :class:`DirectRead`, :class:`NativeReads`), a family's other pools (:class:`Pool`),
where another process keeps it (:class:`CountSymbol`), who sets it along (:class:`SetAlong`), how a profile preloads it
(:class:`Preloadable`), and the words a boolean variable takes.

:class:`~parinfo.process.library_base.Library` and its families put them together; the registry
(:mod:`parinfo.process.libraries`) is the place to ask.
"""
from __future__ import annotations

import enum
from typing import Any

from parinfo.records.record import record

#: The words a boolean variable takes (any case), as the libraries that read them accept.
TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


def is_false(value: str | None) -> bool:
    """True when a boolean variable's value means off (FALSE, 0, no, off)."""
    return value is not None and value.strip().lower() in FALSE_WORDS



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


class SetIn(str, enum.Enum):
    """Where a limit is set: in the main thread, or in a worker thread."""

    MAIN = "main"
    WORKER = "worker"

    def __str__(self) -> str:
        return self.value


class ThreadKind(str, enum.Enum):
    """A thread that calls a pool, as seen from the thread that set a limit on it."""

    MAIN = "main"  # the main thread
    SETTER = "setter"  # the thread that set the limit (the main thread when it set it)
    RUNNING = "running"  # another thread, running (and using the pool) since before the limit
    NEW = "new"  # a thread started after the limit

    def __str__(self) -> str:
        return self.value


@record(frozen=True)
class ScopeFacts:
    """Which threads a limit set through ``call`` reaches, measured in real processes
    (:mod:`parinfo.process.scope_probe`, tests/test_scope_matrix.py) on ``measured`` (versions),
    for copies with threading ``layer`` ("": any). A limit always holds in the thread that set it;
    ``reaches_new``: threads started after it get it; ``reaches_running``: threads running since
    before, the main thread among them, get it (the library holds one count for the process).
    ``shared_pool``: one pool of threads serves every calling thread, so no per-thread limit can
    split it; ``local_api``: the call that limits the calling thread only ("" : none);
    ``reference``: the upstream discussion or documentation that states it."""

    call: str
    reaches_new: bool
    reaches_running: bool
    shared_pool: bool = False
    local_api: str = ""
    layer: str = ""
    measured: str = ""
    reference: str = ""

    @property
    def scope(self) -> Scope:
        """THREAD when a limit does not reach the threads already running, else PROCESS."""
        return Scope.PROCESS if self.reaches_running else Scope.THREAD


def predicted_count(facts: ScopeFacts, set_in: SetIn, thread: ThreadKind, limit: int, before: int | None) -> int | None:
    """The count ``thread`` gets from a pool once ``limit`` was set there as ``set_in`` says, as
    ``facts`` predict; ``before``: what that thread had before (for a NEW thread: what a thread
    started before the limit got). Pure: the per-thread report and the scope tests share it."""
    setter_is_main = set_in is SetIn.MAIN
    if thread is ThreadKind.SETTER or (thread is ThreadKind.MAIN and setter_is_main):
        return limit
    reached = facts.reaches_new if thread is ThreadKind.NEW else facts.reaches_running
    return limit if reached else before


def as_count(value: Any) -> int | None:
    """``value`` when it is an int count (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@record(frozen=True)
class Calls:
    """A count set and read through a Python module's own functions: ``setter(n)`` and
    ``getter()`` (a family whose getter would change something reads otherwise: numba's
    ``read_count``). Counts are set through it by :mod:`parinfo.process.setter` only
    (:meth:`Library.push_count`)."""

    setter: str = "set_num_threads"
    getter: str = "get_num_threads"

    def set(self, module: Any, n: int) -> None:
        """Set the count; raises what the module raises when it refuses."""
        getattr(module, self.setter)(n)

    def get(self, module: Any) -> int | None:
        """The count in force, read without changing it; None when it cannot be read (a
        half-initialised module, no getter, not an int)."""
        try:
            getter = getattr(module, self.getter, None)
            count = getter() if callable(getter) else getattr(module, "nthreads", None)
        except Exception:
            return None
        return as_count(count)

    def call(self, owner: str, n: int | None = None) -> str:
        """How a report names the setter: ``numba.set_num_threads``, or with ``n``: ``...(2)``."""
        return f"{owner}.{self.setter}" + ("" if n is None else f"({n})")


@record(frozen=True)
class Pool:
    """One pool of a family besides its main count (torch's inter-op pool, Arrow's IO pool, ONNX
    Runtime's inter-op pool): ``name`` is the word its report row adds after the library's name
    (``pyarrow io``) and the key the family's methods take (:meth:`Library.pool`, ``push_pool``,
    ``read_pool``, ``pool_call``, ``pool_vars``, ``imposed``); ``calls`` its setter and getter
    through its module's own functions, None when it has none (its count is then what a pool made
    now would get: ``sized_at_use``); ``precedence`` the variables it reads, first valid wins (in
    the loaded version: the family's ``pool_vars``; its default and cap: ``pool_default`` and
    ``pool_cap``); ``cap_vars`` the variables that steer its cap; ``sized_at_use`` what its count
    is when it is sized when made or first used, as :attr:`Library.sized_at_use` for the main pool;
    ``io`` says its threads wait on I/O (Arrow's IO pool): more of them than CPUs is its design, so
    the findings on counts above the CPUs, and the sums of threads busy at once, leave it out.
    ``profile_key``: the profile's top-level count that a launched program gives it through its first
    variable (ONNX Runtime's inter-op pool takes ``inter_op``); None: no profile key sets it."""

    name: str
    calls: Calls | None = None
    precedence: tuple[str, ...] = ()
    cap_vars: tuple[str, ...] = ()
    sized_at_use: str = ""
    io: bool = False
    profile_key: str | None = None  # the profile's count that sets it ("inter_op"), through ``precedence[0]``


class Takes(str, enum.Enum):
    """How a count set now reaches an imported library (:meth:`Library.uptake`)."""

    SETTER = "setter"  # its module's setter, now (:meth:`Library.push_count`)
    AT_USE = "at use"  # its variable, read when its pool or object is made (none made yet, or new ones)
    STARTED = "started"  # its pool started already, with a count it keeps
    CODE = "code"  # only a call in the program's own code sets it

    def __str__(self) -> str:
        return self.value


@record(frozen=True)
class Uptake:
    """How a count ``apply()`` sets reaches an imported library now: ``takes``; ``when`` the words
    for AT_USE (when the variable is read), ``code`` the line the program would write (CODE, and
    for a pool that keeps its count), ``now`` the count it keeps (STARTED)."""

    takes: Takes
    when: str = ""
    code: str = ""
    now: int | None = None


def digits_value(digits: str) -> int:
    """The number ASCII ``digits`` write, without Python's cap on long conversions: one of more than
    40 digits (beyond any count a library holds) is given as 10**40."""
    kept = digits.lstrip("0") or "0"
    return int(kept) if len(kept) <= 40 else 10**40


class Does(str, enum.Enum):
    """What a library does with a value of a variable it reads (a :class:`Reading`'s verb)."""

    TAKES = "takes"  # takes a count (or a setting) from it
    DEFAULT = "default"  # takes it as asking for its default, as its documentation says (0)
    IGNORES = "ignores"  # skips it silently and uses its default
    WARNS = "warns"  # prints a warning and uses its default
    RAISES = "raises"  # raises an error where the variable is read

    def __str__(self) -> str:
        return self.value


@record(frozen=True)
class Reading:
    """What one library does with one value of a variable it reads, as measured on it: ``does``
    (:class:`Does`), the ``count`` it takes (TAKES, None for a setting that is no count), and
    ``words`` that say it when the verb alone does not (what a RAISES raises, and where)."""

    does: Does
    count: int | None = None
    words: str = ""

    @property
    def refuses(self) -> bool:
        """Whether it refuses the value (ignores it, warns, or raises): the value is invalid for it."""
        return self.does in (Does.IGNORES, Does.WARNS, Does.RAISES)


@record(frozen=True)
class DirectRead:
    """The words for a loaded copy that threadpoolctl does not see, read without changing anything
    by its family's ``read_direct`` (TBB): ``how`` is the pool row's note when the count was read,
    ``unread`` when it was not."""

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
    from its memory (:mod:`parinfo.outside.inforce`) without stopping it.

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
    (:mod:`parinfo.outside.attach`): names without the build's affixes, every one optional but ``count``.

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


@record(frozen=True)
class IdleWait:
    """How a runtime's idle threads wait for the next region: they spin (on a CPU, runnable) a while,
    or until it comes. ``sleep``: the settings that make them sleep at once, each enough alone, the first
    the one a fix names and a profile's ``wait_policy: passive`` sets; ``spin``: the settings that keep
    them spinning (``wait_policy: active``); ``layers``: the threading layers this holds for (all when
    empty). Measured under a CPU quota with bench/spin_quota.py."""

    sleep: tuple[tuple[str, str], ...]
    spin: tuple[tuple[str, str], ...] = ()
    layers: tuple[str, ...] = ()
    measured: str = ""

    @property
    def fix(self) -> str:
        """The settings of ``sleep`` as a fix says them: the first, then the others as alternatives."""
        first, *others = (f"{var}={value}" for var, value in self.sleep)
        return first + (f" (or {', '.join(others)})" if others else "")


#: The entry points that say which OpenMP runtime serves a process: the OpenMP API's, and the GNU
#: ABI's that GCC-built code calls (Intel's and LLVM's runtimes provide both).
OPENMP_ENTRY_POINTS = ("omp_get_max_threads", "GOMP_parallel")
