"""The base class of the library families (:class:`Library`): what every library is asked, with the
answer most of them give.

A library family is a small subclass whose class attributes say what it is (its files, its
variables, how its count is set) and whose methods hold what it does differently (its default and
cap, what a plan's counts mean for it, how its count is read). The registry
(:mod:`parinfo.process.libraries`) holds one instance of each; other modules ask it, never build one.
Plain classes with class attributes: defining them costs nothing at import (the launcher imports the
registry on its start-up path).
"""
from __future__ import annotations

import enum
import sys
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from parinfo.process.defaults import NO_FACTS, ModuleFacts
from parinfo.process.library_parts import (
    Calls,
    CountSymbol,
    DirectRead,
    Does,
    IdleWait,
    LibraryKind,
    NativeReads,
    Pool,
    Preloadable,
    Push,
    Reading,
    Scope,
    ScopeFacts,
    SetAlong,
    Takes,
    Uptake,
)
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from types import ModuleType

    from parinfo.machine.topology import MachineFacts
    from parinfo.records.source import Source


#: The name of a framework's inter-op pool among its ``pools`` (torch's).
INTER_OP = "inter-op"


class QuotaRule(enum.Enum):
    """What a library's default count does with a cgroup CPU quota below the CPUs it sees, measured
    on the library under a real 0.5-CPU cgroup (tests/test_findings_pools.py): the value is the
    words a finding says it with."""

    FOLLOWS = "follows the CPU quota"
    IGNORES = "ignores the CPU quota"
    ROOT_ONLY = "reads a CPU quota only at fixed paths of the cgroup mount's root (a container's own cgroup)"


class Library:
    """One library family, in the manner of threadpoolctl's controllers: data as class attributes,
    behaviour as methods that a family overrides.

    Found by: ``prefixes`` (starts of its shared objects' file names, ``not_prefixes`` excepted: a
    helper such as TBB's allocator is not a runtime; the owning package is the ``site-packages``
    folder the file lies in) or ``module`` (a Python module, read only when it is already in
    ``sys.modules``, never imported by parinfo).
    Count: ``precedence`` (variables read in order, first valid wins; then those of the family it
    ``follows``), :meth:`default` when none is set, :meth:`cap` on a variable's request
    (``cap_vars`` steer the cap; ``refused`` is the count kept when a request above the cap is
    refused rather than cut to the cap, as numexpr does; :meth:`context` gathers what only the
    loaded module can tell the default and the cap). ``layer_files`` tell its threading layer from
    the files loaded beside it; ``layer_var`` chooses that layer.
    Set and read back (by :mod:`parinfo.process.setter`, the one module that sets counts, asking the
    family): ``push`` (:class:`Push`) says how: through threadpoolctl's controller for
    ``internal_api``, through the module's own functions (``calls``), by parinfo's runtime, or not
    at all. ``unread`` says why a count :meth:`read_count` cannot give is not read.
    More than one pool: ``calls``, ``precedence``, ``sized_at_use``, :meth:`default` and :meth:`cap`
    are its main pool's; each other pool is a :class:`Pool` in ``pools`` (its name, calls or none,
    variables, ``sized_at_use`` words), set and read by name (:meth:`push_pool`, :meth:`read_pool`,
    :meth:`pool_call`), its variables in the loaded version :meth:`pool_vars`, its default and cap
    the family's :meth:`pool_default` and :meth:`pool_cap`, what the environment imposes on it
    :meth:`imposed` with its name (ONNX Runtime's inter-op pool). torch's inter-op pool is its pool
    "inter-op" (``interop_calls``, :meth:`push_interop`... are its names for it); the report gives
    a Python module's other pools a row each, named "<library> <pool>" (``pyarrow io``).
    ``borrowed``: variables of other libraries it also reads (OMP_NUM_THREADS for Arrow), named
    among their readers only while its module is imported, so a report without it is unchanged.
    ``thread_names``: the kernel names of the threads it starts (grouped as
    :func:`parinfo.process.threads.thread_group` writes them), each with what they are. ``native_getter`` names the C
    call that reads it; ``team_release`` the C call that frees the calling thread's idle team.
    ``scopes`` (:class:`ScopeFacts`): which threads a limit reaches, measured per call and threading
    layer, the call parinfo sets it through first; ``scope`` (:class:`Scope`, from them: PROCESS
    where none) is THREAD when a set limit holds for the calling thread only. ``set_along``: the
    framework that sets its count with its own. ``direct``: the words for a copy threadpoolctl
    does not see, read by :meth:`read_direct`. ``avoid_with``: the user APIs of runtimes not to
    mix with it in one build. ``idle_wait`` (:class:`IdleWait`): how its idle threads spin between
    regions and what makes them sleep. ``kind`` (:class:`LibraryKind`) says what it is.
    Profiles: ``profile_key`` (libraries.KEY) sets it through ``profile_var`` at launch;
    :meth:`plan_note` says what a plan's counts mean for it on the machine. From outside:
    ``count_symbol`` (:class:`CountSymbol`) names the getter and variable that hold the count in
    force. No getter, pools sized when made (ONNX Runtime's per session, rayon's at its first use):
    ``sized_at_use`` says what its count is then (what a pool made now gets from the environment of
    now, the report's count) and that pools made otherwise may differ. :meth:`imposed`: what a
    variable imposes before its precedence (a value it raises on; a switch that turns its pool off).
    A family whose library parses its variables otherwise than parinfo validates (:meth:`count_in`) says what it does
    with any value (:meth:`reading`, :meth:`refusal`): the report's variable rows and the invalid-variable finding take
    its word over parinfo's validator. Attached: ``native`` (:class:`NativeReads`) names the C getters of a loaded
    copy; ``module_facts`` the module attributes :meth:`context` reads. Findings: ``quota_rule`` (:class:`QuotaRule`,
    None where not measured) what its default does under a CPU quota; ``own_rule`` the finding that judges its count,
    not the rules on CPU pools (Inductor's compile workers); :meth:`how_to_set` the words of a fix that sets its count
    (its variable and ``read_when``, when its library reads it; its setter).
    """

    name: str = ""
    label: str = ""
    kind: LibraryKind = LibraryKind.NATIVE
    prefixes: tuple[str, ...] = ()
    not_prefixes: tuple[str, ...] = ()
    module: str | None = None
    user_api: str | None = None
    internal_api: str | None = None
    vendor: str | None = None
    env_prefixes: tuple[str, ...] = ()
    precedence: tuple[str, ...] = ()
    follows: type[Library] | None = None
    reads: tuple[str, ...] = ()
    cap_vars: tuple[str, ...] = ()
    refused: int | None = None
    profile_key: str | None = None
    profile_var: str | None = None
    push: Push = Push.THREADPOOLCTL
    calls: Calls | None = None
    pools: tuple[Pool, ...] = ()
    unread: str = "not readable without changing it"
    borrowed: tuple[str, ...] = ()
    thread_names: tuple[tuple[str, str], ...] = ()  # (thread group as threads.thread_group writes it, what)
    native_getter: str | None = None
    team_release: str | None = None
    scopes: tuple[ScopeFacts, ...] = ()  # measured: which threads a limit reaches (docs/scope.md)
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
    idle_wait: IdleWait | None = None
    preload: Preloadable | None = None  # how a profile's openmp: word preloads it (OpenMP runtimes)
    sized_at_use: str = ""  # no getter, sized when made or first used: what its count in the report is
    note: str = ""
    quota_rule: QuotaRule | None = None  # what its default does under a CPU quota, measured per version
    read_when: str = "before the program starts"  # when it reads its variables, as a fix says it
    own_rule: str | None = None  # the finding that judges its count, in place of the rules on CPU pools

    def __repr__(self) -> str:
        return f"<library {self.name}>"

    # -- the count a library takes by itself ---------------------------------------------------
    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        """Its count when no variable sets it: (count or None, the phrase the report prints)."""
        return None, f"parinfo has no model for {self.name}"

    @property
    def has_default(self) -> bool:
        """Whether parinfo knows its default (its family overrides :meth:`default`)."""
        return type(self).default is not Library.default

    def cap(self, facts: MachineFacts, env: Mapping[str, str],
            ctx: ModuleFacts | None = None) -> tuple[int | None, str]:
        """The cap on a variable's request: (cap or None for none, why)."""
        return None, ""

    def context(self, module: Any, env: Mapping[str, str]) -> ModuleFacts:
        """What only its loaded ``module`` can tell :meth:`default` and :meth:`cap`."""
        return NO_FACTS

    def imposed(self, env: Mapping[str, str], pool: str | None = None) -> tuple[int | None, Source] | None:
        """What the environment ``env`` imposes on its main count (on its other pool ``pool`` when
        named) before its precedence, as (count, or None when none runs, source); None when nothing
        does. A value it raises on instead of ignoring it (ONNX Runtime's), a switch that keeps its
        work in the calling thread (TOKENIZERS_PARALLELISM=false): the report gives this in place
        of the precedence's count."""
        return None

    def imposes(self, env: Mapping[str, str]) -> bool:
        """Whether ``env`` imposes something (:meth:`imposed`) on its main count or on any of its
        other pools' (a value it raises on, whichever pool reads it)."""
        return any(self.imposed(env, pool) is not None for pool in (None, *(p.name for p in self.pools)))

    def plan_note(self, counts: Mapping[str, int], values: Mapping[str, int],
                  env: Mapping[str, str], facts: MachineFacts | None = None,
                  written: Collection[str] = ()) -> str | None:
        """What a profile's counts (by profile key) mean for it on the machine (``values``: the
        machine's profile values, ``facts`` the machine; ``written``: the keys the profile wrote
        itself), or None when they mean what they say."""
        return None

    def uptake(self, module: Any, n: int) -> Uptake:
        """How a count ``n`` set now (``parinfo.apply()``) reaches its imported ``module``: through its
        setter when it has one, else through its first variable when its pool or object is made
        (families whose pool keeps its count once started, or that read no variable, say so)."""
        if self.set_in_module:
            return Uptake(Takes.SETTER)
        return Uptake(Takes.AT_USE, when="when its pool is made")

    # -- variables -----------------------------------------------------------------------------
    def count_in(self, var: str, env: Mapping[str, str]) -> int | None:
        """The count it takes from its variable ``var`` in ``env``; None when unset or a value it
        skips. Only a family whose library parses otherwise than parinfo validates (the OpenMP
        syntax) defines it (Arrow takes "2x" as 2, measured; :attr:`parses_itself`)."""
        raise TypeError(f"{self.name} reads its variables as parinfo validates them")

    def reading(self, var: str, value: str) -> Reading | None:
        """What it does with ``value`` of its variable ``var``, measured on the library: None when it
        parses as parinfo validates (the report keeps parinfo's verdict); else the count
        :meth:`count_in` takes, or its :meth:`refusal`."""
        if not self.parses_itself:
            return None
        n = self.count_in(var, {var: value})
        return Reading(Does.TAKES, n) if n is not None else self.refusal(var, value)

    def refusal(self, var: str, value: str) -> Reading:
        """What it does with a value of ``var`` it takes no count from (:meth:`count_in` gave None):
        by default it ignores it silently and uses its default."""
        return Reading(Does.IGNORES)

    @property
    def parses_itself(self) -> bool:
        """Whether its family says how its library parses its variables (:meth:`count_in`)."""
        return type(self).count_in is not Library.count_in

    def var(self, role: str) -> str:
        """The variable that plays ``role`` for this library (KeyError when none does)."""
        for name, var in self.roles:
            if name == role:
                return var
        raise KeyError(f"{self.name} has no variable for {role!r}")

    @property
    def count_vars(self) -> tuple[str, ...]:
        """All variables that decide its count, first wins (its own, then those it follows)."""
        return self.precedence + (self.follows().count_vars if self.follows is not None else ())

    @property
    def variables(self) -> tuple[str, ...]:
        """The variables it reads itself (not those of the library it follows): its own count
        variables, those of its other pools, then the other steering ones."""
        return tuple(dict.fromkeys(self.precedence + tuple(v for p in self.pools for v in p.precedence)
                                   + self.reads))

    def reader_shown(self, var: str, modules: Collection[str] | None = None) -> bool:
        """Whether a report names it among the readers of ``var``: not for a ``borrowed`` variable
        while its module is not imported (in ``modules``, default this process's)."""
        return var not in self.borrowed or self.is_loaded(modules)

    # -- its files and threading layer ---------------------------------------------------------
    def owns_file(self, file_name: str) -> bool:
        """Whether the shared object ``file_name`` (a base name, lower case) is a copy of it."""
        return bool(self.prefixes) and file_name.startswith(self.prefixes) and not (
            self.not_prefixes and file_name.startswith(self.not_prefixes))

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

    def read_direct(self, path: str) -> tuple[str | None, int | None]:
        """(version, count) of the loaded copy at ``path`` read through its own getters, for a
        library threadpoolctl does not see (``direct``); None parts when they cannot be read."""
        return None, None

    # -- how its count is set and read back ----------------------------------------------------
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

    def row_note(self, module: Any) -> str | None:
        """What its imported ``module`` says beyond its count, added to its settings row's note (numba's
        threading layer; a per-call count that overrides it); None by default. ``module`` may be a
        stand-in holding only ``module_facts`` (read inside another process): say nothing then."""
        return None

    def attach_getter(self) -> tuple[str, tuple[str, str] | None]:
        """The getter an attached reader calls inside another process, and the guard that must hold
        first: None, ("fact", dotted module attribute that must be true) or ("thread", the name prefix
        of a thread that must run). A getter that would start the pool is called only once it runs."""
        return self.quiet_getter(), None

    def quiet_getter(self) -> str:
        """The name of its module's getter that reads the count without changing anything ("" when
        there is none: numba's launches its threads)."""
        return "" if self.calls is None else self.calls.getter

    def how_to_set(self, n: int, pool: str | None = None) -> str:
        """How a fix says to give its count (its pool ``pool``'s, by name) ``n`` threads: set its
        first variable (in the loaded version) before it reads it, or call its module's setter."""
        found = self.count_vars if pool is None else self.pool_vars(pool)
        call = self.setter(n, pool)
        ways = [f"set {found[0]}={n} {self.read_when}"] if found else []
        ways += [f"call {call}"] if call else []
        return ", or ".join(ways) or f"set {self.name} to at most {plural(n, 'thread')}"

    def setter(self, n: int, pool: str | None = None) -> str | None:
        """The call that sets its count (its pool ``pool``'s) to ``n`` at run time
        (``pyarrow.set_cpu_count(2)``), or None when its module has none."""
        calls = self.calls if pool is None else self.pool(pool).calls
        return calls.call(str(self.module), n) if self.push is Push.SETTER and calls is not None else None

    # -- its other pools (``pools``) --------------------------------------------------------------
    def pool(self, name: str) -> Pool:
        """Its other pool called ``name`` (KeyError when it has none)."""
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(f"{self.name} has no pool {name!r}")

    def push_pool(self, name: str, module: Any, n: int) -> None:
        """Set the count of its pool ``name`` in its imported ``module``; raises what the module
        raises when it refuses. Only :mod:`parinfo.process.setter` calls it."""
        self._calls(self.pool(name).calls).set(module, n)

    def read_pool(self, name: str, module: Any) -> int | None:
        """The count in force of its pool ``name``, read without changing it; None when it cannot be
        read (or it has no getter)."""
        calls = self.pool(name).calls
        return None if calls is None else calls.get(module)

    def pool_vars(self, name: str) -> tuple[str, ...]:
        """The variables that decide the count of its pool ``name``, first wins, in the loaded
        version (as :attr:`count_vars` for the main pool): its ``precedence`` unless the family
        says otherwise."""
        return self.pool(name).precedence

    def pool_call(self, name: str, n: int | None = None) -> str:
        """How a report names the call that sets its pool ``name`` (``pyarrow.set_io_thread_count``);
        TypeError when it has no setter."""
        return self._calls(self.pool(name).calls).call(str(self.module), n)

    def pool_default(self, name: str, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        """The count of its pool ``name`` when no variable sets it, as :meth:`default`."""
        return None, f"parinfo has no model for {self.name}'s {name} pool"

    def pool_cap(self, name: str, facts: MachineFacts, env: Mapping[str, str],
                 ctx: ModuleFacts | None = None) -> tuple[int | None, str]:
        """The cap on a variable's request for its pool ``name``, as :meth:`cap`."""
        return None, ""

    @property
    def interop_calls(self) -> Calls | None:
        """A framework's inter-op calls (torch's): those of its pool "inter-op", or None."""
        return next((p.calls for p in self.pools if p.name == INTER_OP), None)

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

    def scope_facts(self, threading_layer: str | None = None, call: str = "") -> ScopeFacts | None:
        """The measured facts (:attr:`scopes`) for a loaded copy with this threading layer: of the
        call parinfo sets it through, or of ``call`` when named; None when none were measured."""
        return next((f for f in self.scopes if f.layer in ("", threading_layer or "")
                     and (not call or f.call == call)), None)

    @property
    def scope(self) -> Scope:
        """For whom a limit set on it holds, whatever its build: from its facts, PROCESS without any."""
        return self.scope_of(None)

    @property
    def per_thread(self) -> bool:
        """Whether a limit set on it holds for the calling thread only (whatever its build)."""
        return self.scope is Scope.THREAD

    def scope_of(self, threading_layer: str | None) -> Scope:
        """Whose limit a set count is for a loaded copy with this threading layer (OpenBLAS: one
        pool for the process with pthreads, the calling thread's OpenMP limit with openmp)."""
        facts = self.scope_facts(threading_layer)
        return Scope.PROCESS if facts is None else facts.scope

    def per_thread_in(self, threading_layer: str | None) -> bool:
        """Whether a limit set on a loaded copy with this threading layer holds per calling thread."""
        return self.scope_of(threading_layer) is Scope.THREAD

    def local_call(self, threading_layer: str | None) -> str | None:
        """The C call among its scopes for this layer that limits the calling thread alone, or None."""
        return next((f.call for f in self.scopes if not f.reaches_running and f.layer in ("", threading_layer or "")
                     and f.call.isidentifier()), None)

    # -- its Python module ---------------------------------------------------------------------
    def is_loaded(self, modules: Collection[str] | None = None) -> bool:
        """True when its Python module is imported (in ``modules``, default this process's; always
        False for a native library)."""
        return self.module is not None and self.module in (sys.modules if modules is None else modules)

    def loaded_module(self) -> ModuleType | None:
        """Its Python module when this process has imported it (never imports it), else None."""
        return sys.modules.get(self.module) if self.module is not None else None
