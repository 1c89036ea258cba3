"""The record of one library (:class:`Library`): everything parinfo knows about it, in one place.

The registry's entries (:mod:`parinfo.process.library_entries`) are instances of it; other modules
ask the registry (:mod:`parinfo.process.libraries`), never build one.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Mapping
from typing import Any

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
)
from parinfo.records.record import record


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
    follows: Library | None = None
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
        return self.precedence + self.follows.count_vars

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
