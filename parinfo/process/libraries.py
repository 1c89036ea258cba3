"""The library registry: one :class:`Library` record per library, and the thread variables they read.

The registry is the only place in parinfo that knows a library: which files it ships as, which
variables carry its count and in what order, its default and its cap, the profile key that sets it,
how a count is pushed and read back, and whether its limit holds per calling thread or for the whole
process. Every other module asks this one (:func:`library`, :func:`records`, :data:`THREAD_VARS`...).

It is four modules, by what each holds: the parts a record is made of
(:mod:`~parinfo.process.library_parts`), the record (:mod:`~parinfo.process.library_record`), the
entries and their rules (:mod:`~parinfo.process.library_entries`) and the thread variables
(:mod:`~parinfo.process.thread_vars`); this module holds the questions other modules ask and names
the public parts of the others.

Importing it is cheap (the standard library and :mod:`parinfo.process.defaults`, the default rules
over the machine's facts alone): the launcher runs it on the start-up path of ``parinfo apply P -- CMD``.

Adding a library: append one :class:`Library` to ``RECORDS`` in :mod:`parinfo.process.library_entries`
(and its variables to ``VARIABLES`` in :mod:`parinfo.process.thread_vars` when it brings its own).
Nothing else needs editing; docs/process.md says more.
"""
from __future__ import annotations

from collections.abc import Collection

from parinfo.process.library_entries import RECORDS
from parinfo.process.library_parts import (
    FALSE_WORDS,
    OPENMP_ENTRY_POINTS,
    TRUE_WORDS,
    Calls,
    CountSymbol,
    DirectRead,
    LibraryKind,
    NativeReads,
    Preloadable,
    Push,
    Scope,
    SetAlong,
    is_false,
)
from parinfo.process.library_record import Library
from parinfo.process.thread_vars import THREAD_VARS, VARIABLES, Var

__all__ = [
    "FALSE_WORDS", "LIBRARY_VARS", "OPENMP_ENTRY_POINTS", "RUNTIME_VARS", "THREAD_PREFIXES", "THREAD_VARS",
    "TRUE_WORDS", "Calls", "CountSymbol", "DirectRead", "Library", "LibraryKind", "NativeReads", "Preloadable",
    "Push", "Scope", "SetAlong", "Var", "by_internal_api", "by_prefix", "conflicting_openmp", "find",
    "hook_facts", "is_false", "library", "listed_unset", "openmp_runtimes", "profile_keys", "python_libraries",
    "records", "role_var", "set_on_import", "warns_invalid",
]

_BY_NAME: dict[str, Library] = {r.name: r for r in RECORDS}

# ---------------------------------------------------------------------------------------------
# Questions other modules ask


def records() -> tuple[Library, ...]:
    """Every library record, in registry order."""
    return RECORDS


def library(name: str) -> Library:
    """The record named ``name`` (KeyError when there is none)."""
    return _BY_NAME[name]


def find(name: str) -> Library | None:
    """The record named ``name``, or None."""
    return _BY_NAME.get(name)


def by_prefix(file_name: str) -> Library | None:
    """The native library whose shared object ``file_name`` (a base name, lower case) is, or None."""
    for rec in RECORDS:
        if rec.prefixes and file_name.startswith(rec.prefixes):
            return None if rec.not_prefixes and file_name.startswith(rec.not_prefixes) else rec
    return None


def by_internal_api(internal_api: str | None) -> Library | None:
    """The first record for a threadpoolctl ``internal_api`` (openblas, mkl, blis, flexiblas, openmp)."""
    return next((r for r in RECORDS if internal_api and r.internal_api == internal_api), None)


def python_libraries() -> tuple[Library, ...]:
    """Libraries that are Python modules with their own count (numexpr...), read when imported."""
    return tuple(r for r in RECORDS if r.kind is LibraryKind.PYTHON)


def openmp_runtimes() -> tuple[str, ...]:
    """Names of the OpenMP runtimes (libgomp, libiomp, libomp)."""
    return tuple(r.name for r in RECORDS if r.user_api == "openmp")


def profile_keys() -> tuple[str, ...]:
    """The keys of a profile's ``libraries`` section, in the order the language lists them."""
    keys = [r.profile_key for r in RECORDS if r.profile_key]
    first = ("blas", "openmp", "mkl", "torch")
    return tuple(dict.fromkeys([k for k in first if k in keys] + keys))


def _library_vars() -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for rec in RECORDS:
        if rec.profile_key:
            have = out.get(rec.profile_key, ())
            add = (rec.profile_var,) if rec.profile_var and rec.profile_var not in have else ()
            out[rec.profile_key] = have + add
    return out



#: parinfo's runtime counts: (intra-op variable, inter-op variable).
RUNTIME_VARS: tuple[str, str] = (library("parinfo").precedence[0], library("parinfo").var("inter_op"))

#: The variables that carry each profile key's count (torch has none of its own).
LIBRARY_VARS: dict[str, tuple[str, ...]] = _library_vars()

#: Name prefixes of variables that steer some runtime's threads: a set variable with one of these
#: prefixes is reported even when it is not in THREAD_VARS.
THREAD_PREFIXES: tuple[str, ...] = tuple(dict.fromkeys(p for r in RECORDS for p in r.env_prefixes))


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
    for rec in RECORDS:
        for name, var in rec.roles:
            if name == role:
                return var
    raise KeyError(f"no library has a variable for {role!r}")


def conflicting_openmp() -> tuple[Library, Library]:
    """The two OpenMP runtimes that cannot share a process (Intel libiomp, LLVM libomp)."""
    first = next(r for r in RECORDS if r.conflicts)
    return first, library(first.conflicts[0])


def warns_invalid() -> tuple[str, ...]:
    """The libraries that print a warning for an invalid count variable (the others are silent)."""
    return tuple(r.name for r in RECORDS if r.warns_invalid)


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
