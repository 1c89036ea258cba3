"""The one place parinfo sets a library's thread count, and reads it back.

Everything that wants a count changed calls this module: the runtime's push and lane budget, the
pinning of torch's pool threads, an in-process ``apply``, the start-up hook of a launched program,
the fleet probe and tune's measurers. How a count is set is the library's registry record's to say:

* a loaded native pool (OpenBLAS, MKL, BLIS, an OpenMP runtime) through threadpoolctl's controller
  for it, where the record says so (``set_by_threadpoolctl``); the limit holds for the calling
  thread where the record says (``per_thread_in`` the pool's threading layer: OpenMP runtimes, and
  OpenBLAS built with OpenMP);
* a Python-module library (numexpr, numba) through its module's functions (``record.push_count``,
  ``record.read_count``);
* torch the same way, and its inter-op pool through ``record.push_interop``/``read_interop``.

Each set is read back: an :class:`Outcome` says what was asked, what is in force now and for whom.
The start-up hook loads this file by path in interpreters that may not have parinfo, so it imports
only the standard library at load time; the registry is imported when a caller asks for records.
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

#: An Outcome's ``scope`` when the limit holds for the calling thread alone: the registry's word
#: (str(Scope.THREAD)), written here for the start-up hook; tests/test_library_names.py checks it.
THREAD_SCOPE = "thread"


class Outcome(NamedTuple):  # not a record: the start-up hook loads this module with the standard library alone
    """One count set: the library (record name), what was set (a pool's file, a module, torch's
    pool), the count asked, the count read back afterwards (None when it cannot be read), the count
    before, for whom it holds ("thread": the calling thread; "process"), and the error if the
    library refused."""

    library: str
    target: str
    asked: int
    now: int | None
    before: int | None
    scope: str
    error: str = ""

    @property
    def per_thread(self) -> bool:
        """Whether the limit holds for the calling thread alone (else for the whole process)."""
        return self.scope == THREAD_SCOPE

    @property
    def reached(self) -> bool:
        """Whether the asked count is in force now."""
        return not self.error and self.now == self.asked


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _refusal(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__


# ---------------------------------------------------------------------------------------------
# Native pools, through threadpoolctl


_IMPORT_LOCK = threading.Lock()
_THREADPOOLCTL: list[Any] = []  # the module, once imported whole


def _fresh_lock_in_child() -> None:
    global _IMPORT_LOCK
    _IMPORT_LOCK = threading.Lock()  # a fork while another thread imported must not deadlock the child


os.register_at_fork(after_in_child=_fresh_lock_in_child)


def import_threadpoolctl(undo: Iterable[str] | None = None) -> Any:
    """threadpoolctl, imported without leaving behind the variables its import sets.

    threadpoolctl's import sets a variable of Intel OpenMP's that hides a real conflict between two
    OpenMP runtimes; parinfo must not change the environment, so what it set is removed again unless
    the user had set it. ``undo`` names those variables (from the registry when not given).
    """
    if _THREADPOOLCTL:
        return _THREADPOOLCTL[0]
    # Pool workers reach this at once on their first task. A module merely found in sys.modules
    # may still be initialising in another thread (its ThreadpoolController not yet defined); the
    # import statement waits for that thread, and the lock keeps the undo to one thread.
    with _IMPORT_LOCK:
        if _THREADPOOLCTL:
            return _THREADPOOLCTL[0]
        if "threadpoolctl" in sys.modules:
            undo = ()  # imported by the program: what its import set is the program's
        elif undo is None:
            from parinfo.process.libraries import set_on_import

            undo = set_on_import("threadpoolctl")
        had = {name for name in undo if name in os.environ}
        import threadpoolctl as module

        for name in undo:
            if name not in had:
                os.environ.pop(name, None)
        _THREADPOOLCTL.append(module)
    return module


class NativePool:
    """One loaded native pool: threadpoolctl's controller for it, and the record that knows it."""

    __slots__ = ("_local", "_release", "_set", "controller", "per_thread", "record", "scope")

    def __init__(self, controller: Any, record: Any) -> None:
        self.controller = controller
        self.record = record
        layer = getattr(controller, "threading_layer", None)
        self.per_thread: bool = record.per_thread_in(layer)
        self.scope = str(record.scope_of(layer))  # for whom a limit set on it holds: "thread" or "process"
        # threadpoolctl lets one "controlling" thread change a process-wide OpenBLAS pool; callers of
        # this module serialise their own changes, so the library's setter is called directly where
        # threadpoolctl keeps it, and otherwise control is taken for the call and handed back.
        real = getattr(controller, "_real_set_num_threads", None)
        self._set: Callable[[int], Any] = real if real is not None else self._take_control_and_set
        self._release: Callable[[int], Any] | None = None
        # the call that sets the calling thread's count alone, where the record's scopes name one the
        # loaded copy exports (MKL's MKL_Set_Num_Threads_Local); a per-thread pool's own setter already is
        self._local: Callable[[int], Any] | None = None
        local = None if self.per_thread else record.local_call(layer)
        if local:
            self._local = getattr(getattr(controller, "dynlib", None), local, None)
        if record.team_release:
            self._release = getattr(getattr(controller, "dynlib", None), record.team_release, None)

    @property
    def path(self) -> str:
        return str(getattr(self.controller, "filepath", "") or "")

    @property
    def internal_api(self) -> str:
        return str(getattr(self.controller, "internal_api", "") or "")

    @property
    def name(self) -> str:
        """How a report names it: ``openblas pool (libscipy_openblas.so)``."""
        return f"{self.internal_api} pool ({os.path.basename(self.path) or '?'})"

    def _take_control_and_set(self, n: int) -> None:
        lib = self.controller
        clear = getattr(lib, "clear_controlling_thread", None)
        if clear is None:
            lib.set_num_threads(n)
            return
        clear(force=True)
        try:
            lib.set_num_threads(n)
        finally:
            clear()

    def set(self, n: int) -> None:
        """Set the count (for the calling thread when the pool is per-thread); a library that
        refuses must not break the caller's work, so nothing is raised. The hot path's call."""
        try:
            self._set(n)
        except Exception:
            pass

    def get(self) -> int | None:
        """The count in force (for the calling thread when per-thread); None when unreadable."""
        try:
            return _count(self.controller.get_num_threads())
        except Exception:
            return None

    def set_checked(self, n: int) -> Outcome:
        """Set the count and read it back."""
        before = self.get()
        error = ""
        try:
            self._set(n)
        except Exception as exc:
            error = _refusal(exc)
        return Outcome(self.record.name, self.path, n, self.get(), before, self.scope, error)

    @property
    def holds_per_thread(self) -> bool:
        """Whether :meth:`set_here` can limit the calling thread alone (a per-thread pool, or a
        thread-local call in the loaded copy)."""
        return self.per_thread or self._local is not None

    def set_here(self, n: int) -> Outcome:
        """Set the count for the calling thread alone where the pool allows it (its own setter in a
        per-thread pool, its thread-local call otherwise), read it back; a pool without either is
        set for the process, and the Outcome's scope says "process"."""
        if self._local is None:
            return self.set_checked(n)
        before = self.get()
        error = ""
        try:
            self._local(n)
        except Exception as exc:
            error = _refusal(exc)
        return Outcome(self.record.name, self.path, n, self.get(), before, THREAD_SCOPE, error)

    def release_team(self) -> bool:
        """Free the OpenMP team the calling thread's regions made, where the record says how
        (libgomp's ``omp_pause_resource_all(omp_pause_soft)``); True when a call freed it."""
        return self._release is not None and self._release(1) == 0


def native_pools(controller: Any = None) -> list[NativePool]:
    """Every loaded native pool that has a registry record, in threadpoolctl's order.

    ``controller`` is a ``ThreadpoolController`` (a fresh one when not given: it reads the loaded
    objects, 0.5-10 ms)."""
    from parinfo.process.libraries import by_internal_api, by_prefix

    if controller is None:
        controller = import_threadpoolctl().ThreadpoolController()
    pools = []
    for lib in controller.lib_controllers:
        # the file tells the runtime (libgomp, libiomp and libomp share the internal_api "openmp")
        name = os.path.basename(str(getattr(lib, "filepath", "") or getattr(lib, "prefix", "") or "")).lower()
        record = by_prefix(name) or by_internal_api(getattr(lib, "internal_api", None))
        if record is not None and record.set_by_threadpoolctl:
            pools.append(NativePool(lib, record))
    return pools


# ---------------------------------------------------------------------------------------------
# Python-module libraries and torch


def set_module(record: Any, n: int) -> Outcome | None:
    """Set an imported Python-module library's count through its module's functions, as its record
    says; None when the module is not imported or its record does not set it that way."""
    module = sys.modules.get(record.module or "")
    if module is None or not record.set_in_module:
        return None
    before = record.read_count(module)
    error = ""
    try:
        record.push_count(module, n)
    except Exception as exc:
        error = _refusal(exc)
    return Outcome(record.name, str(record.module), n, record.read_count(module), before, str(record.scope), error)


#: torch's module name (its family's ``module`` and ``name`` in the registry), for code that cannot
#: import the registry (the start-up hook loads this file by path) and for the runtime's hot paths
#: (is torch imported?, the key the runtime's push files torch's count under);
#: tests/test_library_names.py checks that it is the registry's.
TORCH = "torch"


class ByName:
    """A framework's record where the registry cannot be imported (the start-up hook): the names
    of its intra-op and inter-op setters and getters, as the registry passed them
    (``libraries.hook_facts``), answering what this module asks of a record."""

    def __init__(self, name: str, setter: str, getter: str, interop_setter: str, interop_getter: str,
                 scope: str = "thread") -> None:
        self.name, self.module, self.scope = name, name, scope
        self.setter, self.getter = setter, getter
        self.interop_setter, self.interop_getter = interop_setter, interop_getter

    def push_count(self, module: Any, n: int) -> None:
        getattr(module, self.setter)(n)

    def read_count(self, module: Any) -> int | None:
        return _read(lambda: getattr(module, self.getter)())

    def push_interop(self, module: Any, n: int) -> None:
        getattr(module, self.interop_setter)(n)

    def read_interop(self, module: Any) -> int | None:
        return _read(lambda: getattr(module, self.interop_getter)())

    def set_call(self, n: int | None = None) -> str:
        return f"{self.module}.{self.setter}" + ("" if n is None else f"({n})")


def _read(get: Callable[[], Any]) -> int | None:
    try:
        return _count(get())
    except Exception:
        return None


def _torch_record(record: Any) -> Any:
    if record is not None:
        return record
    from parinfo.process.libraries import library

    return library(TORCH)


def torch_call(n: int, record: Any = None) -> str:
    """How a report names setting torch's intra-op count to ``n``."""
    return str(_torch_record(record).set_call(n))


def torch_intra(n: int, record: Any = None) -> None:
    """Set torch's intra-op count (when torch is imported), raising nothing: the hot path's call.
    It holds for the calling thread and is the default threads copy at their first op."""
    torch = sys.modules.get(TORCH)
    if torch is not None:
        try:
            _torch_record(record).push_count(torch, n)
        except Exception:
            pass


def torch_intra_now(record: Any = None) -> int | None:
    """torch's intra-op count for the calling thread (None when torch is not imported)."""
    torch = sys.modules.get(TORCH)
    return None if torch is None else _torch_record(record).read_count(torch)


def torch_counts(record: Any = None) -> tuple[int | None, int | None]:
    """torch's (intra-op, inter-op) counts now; (None, None) when torch is not imported."""
    torch = sys.modules.get(TORCH)
    if torch is None:
        return None, None
    rec = _torch_record(record)
    return rec.read_count(torch), rec.read_interop(torch)


def set_torch(intra: int | None = None, inter: int | None = None, *, record: Any = None,
              torch: Any = None, inter_if_changed: bool = True) -> list[Outcome]:
    """Set torch's intra-op and inter-op counts (each when not None) and read them back.

    The inter-op count is set first, and by default only when it differs from torch's: torch
    accepts one call, before its pool starts, and refuses a second even with the same value (with
    ``inter_if_changed`` False the call is made anyway, so its refusal tells that the pool was
    started or sized). ``torch`` defaults to the imported module (none: nothing is set);
    ``record`` to the registry's torch record (the start-up hook gives a :class:`ByName`).
    """
    torch = torch if torch is not None else sys.modules.get(TORCH)
    if torch is None:
        return []
    rec = _torch_record(record)
    out = []
    if inter is not None:
        before = rec.read_interop(torch)
        error = ""
        if before != inter or not inter_if_changed:
            try:
                rec.push_interop(torch, inter)
            except Exception as exc:
                error = _refusal(exc)
        out.append(Outcome(rec.name, "inter-op", inter, rec.read_interop(torch), before, "process", error))
    if intra is not None:
        before = rec.read_count(torch)
        error = ""
        try:
            rec.push_count(torch, intra)
        except Exception as exc:
            error = _refusal(exc)
        out.append(Outcome(rec.name, "intra-op", intra, rec.read_count(torch), before, str(rec.scope), error))
    return out


# ---------------------------------------------------------------------------------------------
# Every loaded library at once


def set_counts(counts: Mapping[str, int] | int, *, per_thread_only: bool = False, torch: bool = True,
               pools: list[NativePool] | None = None, here: bool = False) -> list[Outcome]:
    """Set the count of every loaded library: ``counts`` by profile key (blas, openmp, mkl, torch,
    numexpr...) or one count for all; ``per_thread_only`` keeps only the limits that hold per
    calling thread; ``here`` sets each native pool through its thread-local call where it has one
    (:meth:`NativePool.set_here`). Native pools first, then Python-module libraries, then torch's
    intra-op count (when ``torch``). Returns one Outcome per count set; libraries not loaded are
    left alone."""
    from parinfo.process.libraries import python_libraries

    def wanted(record: Any) -> int | None:
        if isinstance(counts, int):
            return counts
        return counts.get(record.profile_key) if record.profile_key else None

    out = []
    pools = native_pools() if pools is None else pools
    # every count before any is set: torch's (in its OpenMP build) and MKL's (its Intel OpenMP layer)
    # follow the OpenMP runtime's, which the first pools change
    befores = [pool.get() for pool in pools]
    torch_before = torch_intra_now() if torch else None
    for pool, before in zip(pools, befores, strict=True):
        n = wanted(pool.record)
        if n is None:
            continue
        if here and pool.holds_per_thread:
            out.append(pool.set_here(n)._replace(before=before))
        elif pool.per_thread or not per_thread_only:
            out.append(pool.set_checked(n)._replace(before=before))
    for lib in python_libraries():
        n = wanted(lib)
        if n is not None and (lib.per_thread or not per_thread_only):
            done = set_module(lib, n)
            if done is not None:
                out.append(done)
    if torch:
        rec = _torch_record(None)
        n = wanted(rec)
        if n is not None and (rec.per_thread or not per_thread_only):
            out += [o._replace(before=torch_before) for o in set_torch(intra=n, record=rec)]
    return out


def restore(outcomes: Iterable[Outcome], pools: list[NativePool] | None = None) -> None:
    """Give back the counts ``outcomes`` found before they were set (native pools by file, the
    Python-module libraries and torch's intra-op count); an inter-op count cannot be given back."""
    by_path = {p.path: p for p in (pools if pools is not None else native_pools())}
    from parinfo.process.libraries import find

    for done in outcomes:
        if done.before is None or done.before == done.now:
            continue
        if done.target in by_path:
            pool = by_path[done.target]
            if done.per_thread and pool.holds_per_thread:
                pool.set_here(done.before)
            else:
                pool.set(done.before)
            continue
        record = find(done.library)
        if record is None:
            continue
        if done.target == record.module:  # a Python-module library's count (set_module)
            set_module(record, done.before)
        elif done.target == "intra-op":
            torch_intra(done.before, record)
