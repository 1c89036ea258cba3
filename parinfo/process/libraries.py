"""The library registry: one instance of each library family (a small :class:`Library` subclass),
and the thread variables they read.

The registry is the only place in parinfo that knows a library: which files it ships as, which
variables carry its count and in what order, its default and its cap, the profile key that sets it,
how a count is pushed and read back, and whether its limit holds per calling thread or for the whole
process. Every other module asks it: by name (:func:`find`, for a name read from a pool row), by
file (:func:`by_prefix`), by kind or role (:func:`of_kind`, :func:`role_var`), or for a family's
instance by its class (:func:`family`, where the code is about that library: torch's block), and
then asks the instance its questions (methods and attributes), never compares its name.

The families live in :mod:`~parinfo.process.library_runtimes`, :mod:`~parinfo.process.library_blas`
and :mod:`~parinfo.process.library_modules` (their base, :mod:`~parinfo.process.library_base`; their
parts, :mod:`~parinfo.process.library_parts`); :mod:`~parinfo.process.library_entries` lists one
instance of each in order; :mod:`~parinfo.process.thread_vars` holds the variables. A
:class:`Registry` answers over any such list (a test builds a fresh one); this module's functions
are those of the one over the entries.

Importing it is cheap (the standard library and :mod:`parinfo.process.defaults`, the default rules
over the machine's facts alone): the launcher runs it on the start-up path of ``parinfo apply P -- CMD``.

Adding a library: write its class (a subclass of :class:`Library` or of its kin, data as class
attributes, what it does differently as methods) and put one instance in ``RECORDS`` of
:mod:`parinfo.process.library_entries` (and its variables in ``VARIABLES`` of
:mod:`parinfo.process.thread_vars` when it brings its own). Nothing else needs editing.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import TypeVar

from parinfo.process.library_base import Library
from parinfo.process.library_blas import Accelerate, Blis, FlexiBLAS, Mkl, OpenBLAS
from parinfo.process.library_entries import RECORDS
from parinfo.process.library_frames import Arrow, DuckDB, Polars
from parinfo.process.library_modules import Inductor, Interpreter, Numba, Numexpr, ParinfoRuntime, Torch
from parinfo.process.library_parts import (
    FALSE_WORDS,
    OPENMP_ENTRY_POINTS,
    TRUE_WORDS,
    Calls,
    CountSymbol,
    DirectRead,
    LibraryKind,
    NativeReads,
    Pool,
    Preloadable,
    Push,
    Scope,
    SetAlong,
    is_false,
)
from parinfo.process.library_runtimes import GnuOpenMP, IntelOpenMP, LlvmOpenMP, OneTBB, OpenMPLibrary
from parinfo.process.thread_vars import THREAD_VARS, VARIABLES, Var

__all__ = [
    "FALSE_WORDS", "LIBRARY_VARS", "OPENMP_ENTRY_POINTS", "POOL_VARS", "REGISTRY", "RUNTIME_VARS", "THREAD_PREFIXES",
    "THREAD_VARS", "TRUE_WORDS", "Accelerate", "Arrow", "Blis", "Calls", "CountSymbol", "DirectRead", "DuckDB",
    "FlexiBLAS",
    "GnuOpenMP", "Inductor", "IntelOpenMP", "Interpreter", "Library", "LibraryKind", "LlvmOpenMP", "Mkl", "NativeReads",
    "Numba", "Numexpr", "OneTBB", "OpenBLAS", "OpenMPLibrary", "ParinfoRuntime", "Polars", "Pool", "Preloadable",
    "Push",
    "Registry", "Scope", "SetAlong", "Torch", "Var", "apart_rows", "by_internal_api", "by_prefix", "conflicting_openmp",
    "family", "find", "hook_facts", "is_false", "library", "listed_unset", "of_kind", "openmp_runtimes",
    "profile_keys", "python_libraries", "records", "role_var", "set_on_import", "warns_invalid",
]

L = TypeVar("L", bound=Library)


class Registry:
    """The questions asked of a list of library families (one instance each), in registry order."""

    def __init__(self, families: tuple[Library, ...]) -> None:
        self._all = families
        self._by_name = {f.name: f for f in families}
        self._by_file: dict[str, Library | None] = {}  # by_prefix's answers: a report asks for every loaded file

    def records(self) -> tuple[Library, ...]:
        """Every library, in registry order."""
        return self._all

    def library(self, name: str) -> Library:
        """The library named ``name`` (KeyError when there is none)."""
        return self._by_name[name]

    def find(self, name: str) -> Library | None:
        """The library named ``name`` (read from a pool row, a reader list...), or None."""
        return self._by_name.get(name)

    def family(self, cls: type[L]) -> L:
        """The registered instance of family ``cls`` (torch's, for code about torch)."""
        for lib in self._all:
            if type(lib) is cls:
                return lib
        raise KeyError(f"no library of family {cls.__name__}")

    def of_kind(self, kind: LibraryKind) -> tuple[Library, ...]:
        """The libraries of ``kind`` (the Python modules, the frameworks, the interpreter...)."""
        return tuple(r for r in self._all if r.kind is kind)

    def by_prefix(self, file_name: str) -> Library | None:
        """The native library whose shared object ``file_name`` (a base name, lower case) is, or None."""
        if file_name not in self._by_file:
            if len(self._by_file) >= 4096:  # a process that loads ever more files: the answers are kept, not hoarded
                self._by_file.clear()
            self._by_file[file_name] = next((r for r in self._all if r.owns_file(file_name)), None)
        return self._by_file[file_name]

    def by_internal_api(self, internal_api: str | None) -> Library | None:
        """The first library for a threadpoolctl ``internal_api`` (openblas, mkl, blis, flexiblas, openmp)."""
        return next((r for r in self._all if internal_api and r.internal_api == internal_api), None)

    def python_libraries(self) -> tuple[Library, ...]:
        """Libraries that are Python modules with their own count (numexpr...), read when imported."""
        return self.of_kind(LibraryKind.PYTHON)

    def io_rows(self) -> frozenset[str]:
        """The report rows of I/O pools ("pyarrow io"): threads that wait on I/O, not CPU pools."""
        return frozenset(f"{r.name} {p.name}" for r in self._all for p in r.pools if p.io)

    def apart_rows(self) -> frozenset[str]:
        """The report rows the rules on CPU pools leave out: the I/O pools (:meth:`io_rows`) and the
        libraries judged by a finding of their own (``own_rule``: Inductor's compile workers)."""
        return self.io_rows() | frozenset(r.name for r in self._all if r.own_rule)

    def openmp_runtimes(self) -> tuple[str, ...]:
        """Names of the OpenMP runtimes (libgomp, libiomp, libomp)."""
        return tuple(r.name for r in self._all if isinstance(r, OpenMPLibrary))

    def profile_keys(self) -> tuple[str, ...]:
        """The keys of a profile's ``libraries`` section, in the order the language lists them."""
        keys = [r.profile_key for r in self._all if r.profile_key]
        first = ("blas", "openmp", "mkl", "torch")
        return tuple(dict.fromkeys([k for k in first if k in keys] + keys))

    def role_var(self, role: str) -> str:
        """The variable that plays ``role`` (wait_policy, duplicate_ok, dynamic, inter_op, backend,
        verify, adaptive, follow, gil, profile...) for the first library that has one."""
        for rec in self._all:
            for name, var in rec.roles:
                if name == role:
                    return var
        raise KeyError(f"no library has a variable for {role!r}")

    def wait_settings(self, policy: str) -> dict[str, str]:
        """The variables a profile's ``wait_policy`` sets for every runtime at once: ``passive``, each
        runtime's first setting that makes its idle threads sleep; ``active``, those that keep them
        spinning; anything else, none."""
        out: dict[str, str] = {}
        for rec in self._all:
            wait = rec.idle_wait
            if wait is not None:
                chosen = wait.sleep[:1] if policy == "passive" else wait.spin if policy == "active" else ()
                out.update((var, value) for var, value in chosen if var not in out)
        return out

    def conflicting_openmp(self) -> tuple[Library, Library]:
        """The two OpenMP runtimes that cannot share a process (Intel libiomp, LLVM libomp)."""
        first = next(r for r in self._all if r.conflicts)
        return first, self.library(first.conflicts[0])

    def warns_invalid(self) -> tuple[str, ...]:
        """The libraries that print a warning for an invalid count variable (the others are silent)."""
        return tuple(r.name for r in self._all if r.warns_invalid)


#: The registry over the entries; the functions below are its questions.
REGISTRY = Registry(RECORDS)
records = REGISTRY.records
library = REGISTRY.library
find = REGISTRY.find
family = REGISTRY.family
of_kind = REGISTRY.of_kind
by_prefix = REGISTRY.by_prefix
by_internal_api = REGISTRY.by_internal_api
python_libraries = REGISTRY.python_libraries
io_rows = REGISTRY.io_rows
apart_rows = REGISTRY.apart_rows
openmp_runtimes = REGISTRY.openmp_runtimes
profile_keys = REGISTRY.profile_keys
role_var = REGISTRY.role_var
conflicting_openmp = REGISTRY.conflicting_openmp
warns_invalid = REGISTRY.warns_invalid
wait_settings = REGISTRY.wait_settings


def _library_vars() -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for rec in RECORDS:
        if rec.profile_key:
            have = out.get(rec.profile_key, ())
            add = (rec.profile_var,) if rec.profile_var and rec.profile_var not in have else ()
            out[rec.profile_key] = have + add
    return out


_OWN = family(ParinfoRuntime)

#: parinfo's runtime counts: (intra-op variable, inter-op variable).
RUNTIME_VARS: tuple[str, str] = (_OWN.precedence[0], _OWN.var("inter_op"))

#: The variables that carry each profile key's count (torch has none of its own).
LIBRARY_VARS: dict[str, tuple[str, ...]] = _library_vars()

#: The variables of other pools that take one of the profile's top-level counts (ONNX Runtime's
#: ORT_INTER_OP_NUM_THREADS takes ``inter_op``): variable -> the count's key.
POOL_VARS: dict[str, str] = {pool.precedence[0]: pool.profile_key for rec in RECORDS for pool in rec.pools
                             if pool.profile_key and pool.precedence}

#: Name prefixes of variables that steer some runtime's threads: a set variable with one of these
#: prefixes is reported even when it is not in THREAD_VARS.
THREAD_PREFIXES: tuple[str, ...] = tuple(dict.fromkeys(p for r in RECORDS for p in r.env_prefixes))


def listed_unset(name: str, modules: Collection[str] | None = None) -> bool:
    """Whether the report lists ``name`` while it is unset: always, unless every reader asks to be
    listed only when its module is loaded and none of those is (in ``modules``, the modules the
    process imported; default: this process's)."""
    if name in THREAD_VARS and not THREAD_VARS[name].listed_unset:
        return False
    readers = [library(n) for n in THREAD_VARS[name].readers] if name in THREAD_VARS else []
    return not readers or any(r.listed == "always" or r.is_loaded(modules) for r in readers)


def set_on_import(module: str) -> tuple[str, ...]:
    """The variables whose value importing ``module`` sets (``os.environ.setdefault``)."""
    return tuple(v.name for v in VARIABLES if any(m == module for m, _ in v.set_on_import))


def hook_facts() -> str:
    """The registry's facts the start-up hook needs (it imports nothing of parinfo), for its
    instruction variable, as space-separated fields: ``pool.API=VAR,VAR`` the precedence of each
    threadpoolctl ``internal_api``; ``runtime=INTRA,INTER`` parinfo's runtime variables;
    ``verify=VAR`` the variable that says what the hook checks; ``profile=VAR`` the one that names
    the profile; ``preload=VAR`` the one that lists the files a launch preloaded; ``undo=VAR,...`` the variables
    threadpoolctl's import sets; ``torch=SET,GET,SET_INTEROP,GET_INTEROP`` torch's setters."""
    fields: dict[str, str] = {}
    for rec in RECORDS:
        if rec.internal_api and rec.set_by_threadpoolctl and rec.count_vars:
            fields.setdefault(f"pool.{rec.internal_api}", ",".join(rec.count_vars))
    torch = family(Torch)
    calls = (torch.calls or Calls(), torch.interop_calls or Calls())
    fields.update({
        "runtime": ",".join(RUNTIME_VARS),
        "verify": _OWN.var("verify"),
        "profile": _OWN.var("profile"),
        "preload": _OWN.var("preload"),
        "undo": ",".join(set_on_import("threadpoolctl")),
        "torch": ",".join(name for c in calls for name in (c.setter, c.getter)),
    })
    return " ".join(f"{k}={v}" for k, v in fields.items())
