"""The one place parinfo sets a library's thread count, and reads it back.

Everything that wants a count changed calls this module: the runtime's push and lane budget, the
pinning of torch's pool threads, an in-process ``apply``, the start-up hook of a launched program,
the fleet probe and tune's measurers. How a count is set is the library's registry record's to say:

* a loaded native pool (OpenBLAS, MKL, BLIS, an OpenMP runtime) through threadpoolctl's controller
  for it; the limit holds for the calling thread where the record's scope is "thread", or where
  the pool's threading layer is an OpenMP runtime (OpenBLAS built with OpenMP);
* a Python-module library (numexpr, numba) through the setter its record names;
* torch through its own setters (``setter``/``getter``, ``interop_setter``/``interop_getter``).

Each set is read back: an :class:`Outcome` says what was asked, what is in force now and for whom.
The start-up hook loads this file by path in interpreters that may not have parinfo, so it imports
only the standard library at load time; the registry is imported when a caller asks for records.
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass  # not parinfo.record: the start-up hook loads this module with the standard library alone
class Outcome:
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

    __slots__ = ("_release", "_set", "controller", "per_thread", "record")

    def __init__(self, controller: Any, record: Any) -> None:
        self.controller = controller
        self.record = record
        self.per_thread = record.scope_of(getattr(controller, "threading_layer", None)) == "thread"
        # threadpoolctl lets one "controlling" thread change a process-wide OpenBLAS pool; callers of
        # this module serialise their own changes, so the library's setter is called directly where
        # threadpoolctl keeps it, and otherwise control is taken for the call and handed back.
        real = getattr(controller, "_real_set_num_threads", None)
        self._set: Callable[[int], Any] = real if real is not None else self._take_control_and_set
        self._release: Callable[[int], Any] | None = None
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

    @property
    def scope(self) -> str:
        return "thread" if self.per_thread else "process"

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
        if record is not None and record.push == "threadpoolctl":
            pools.append(NativePool(lib, record))
    return pools


# ---------------------------------------------------------------------------------------------
# Python-module libraries and torch


def set_module(record: Any, n: int) -> Outcome | None:
    """Set an imported Python-module library's count through its record's setter; None when the
    module is not imported or has no setter."""
    module = sys.modules.get(record.module or "")
    if module is None or record.push != "setter" or not record.setter:
        return None
    before = record.read_count(module)
    error = ""
    try:
        getattr(module, record.setter)(n)
    except Exception as exc:
        error = _refusal(exc)
    return Outcome(record.name, str(record.module), n, record.read_count(module), before, record.scope, error)


#: torch's record name (the registry's): what the runtime's push keys torch's count by.
TORCH = "torch"


def _torch_record(record: Any) -> Any:
    if record is not None:
        return record
    from parinfo.process.libraries import library

    return library(TORCH)


def torch_call(n: int, record: Any = None) -> str:
    """How a report names setting torch's intra-op count to ``n``."""
    return f"torch.{_torch_record(record).setter}({n})"


def torch_intra(n: int, record: Any = None) -> None:
    """Set torch's intra-op count (when torch is imported), raising nothing: the hot path's call.
    It holds for the calling thread and is the default threads copy at their first op."""
    torch = sys.modules.get(TORCH)
    if torch is not None:
        try:
            getattr(torch, _torch_record(record).setter)(n)
        except Exception:
            pass


def _torch_get(torch: Any, name: str) -> int | None:
    try:
        return _count(getattr(torch, name)())
    except Exception:
        return None


def torch_intra_now(record: Any = None) -> int | None:
    """torch's intra-op count for the calling thread (None when torch is not imported)."""
    torch = sys.modules.get(TORCH)
    return None if torch is None else _torch_get(torch, _torch_record(record).getter)


def torch_counts(record: Any = None) -> tuple[int | None, int | None]:
    """torch's (intra-op, inter-op) counts now; (None, None) when torch is not imported."""
    torch = sys.modules.get(TORCH)
    if torch is None:
        return None, None
    rec = _torch_record(record)
    return _torch_get(torch, rec.getter), _torch_get(torch, rec.interop_getter)


def set_torch(intra: int | None = None, inter: int | None = None, *, record: Any = None,
              torch: Any = None, inter_if_changed: bool = True) -> list[Outcome]:
    """Set torch's intra-op and inter-op counts (each when not None) and read them back.

    The inter-op count is set first, and by default only when it differs from torch's: torch
    accepts one call, before its pool starts, and refuses a second even with the same value (with
    ``inter_if_changed`` False the call is made anyway, so its refusal tells that the pool was
    started or sized). ``torch`` defaults to the imported module (none: nothing is set);
    ``record`` to the registry's torch record.
    """
    torch = torch if torch is not None else sys.modules.get(TORCH)
    if torch is None:
        return []
    rec = _torch_record(record)
    out = []
    if inter is not None:
        before = _torch_get(torch, rec.interop_getter)
        error = ""
        if before != inter or not inter_if_changed:
            try:
                getattr(torch, rec.interop_setter)(inter)
            except Exception as exc:
                error = _refusal(exc)
        out.append(Outcome(rec.name, "inter-op", inter, _torch_get(torch, rec.interop_getter), before,
                           "process", error))
    if intra is not None:
        before = _torch_get(torch, rec.getter)
        error = ""
        try:
            getattr(torch, rec.setter)(intra)
        except Exception as exc:
            error = _refusal(exc)
        out.append(Outcome(rec.name, "intra-op", intra, _torch_get(torch, rec.getter), before, rec.scope, error))
    return out


# ---------------------------------------------------------------------------------------------
# Every loaded library at once


def set_counts(counts: Mapping[str, int] | int, *, scope: str | None = None, torch: bool = True,
               pools: list[NativePool] | None = None) -> list[Outcome]:
    """Set the count of every loaded library: ``counts`` by profile key (blas, openmp, mkl, torch,
    numexpr...) or one count for all; ``scope`` "thread" keeps only the limits that hold per
    calling thread. Native pools first, then Python-module libraries, then torch's intra-op count
    (when ``torch``). Returns one Outcome per count set; libraries not loaded are left alone."""
    from parinfo.process.libraries import python_libraries

    def wanted(record: Any) -> int | None:
        if isinstance(counts, int):
            return counts
        return counts.get(record.profile_key) if record.profile_key else None

    out = []
    for pool in native_pools() if pools is None else pools:
        n = wanted(pool.record)
        if n is not None and (scope is None or pool.scope == scope):
            out.append(pool.set_checked(n))
    for lib in python_libraries():
        n = wanted(lib)
        if n is not None and (scope is None or lib.scope == scope):
            done = set_module(lib, n)
            if done is not None:
                out.append(done)
    if torch:
        rec = _torch_record(None)
        n = wanted(rec)
        if n is not None and (scope is None or rec.scope == scope):
            out += set_torch(intra=n, record=rec)
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
            by_path[done.target].set(done.before)
            continue
        record = find(done.library)
        if record is None:
            continue
        if record.kind == "python":
            set_module(record, done.before)
        elif done.target == "intra-op":
            torch_intra(done.before, record)
