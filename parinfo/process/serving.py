"""Which malloc and which OpenMP runtime serve this process's calls, and who chose them.

A preloaded library wins because the dynamic loader looks a symbol up in the global scope first
(the program, then LD_PRELOAD's libraries, then the libraries loaded at start-up and those opened
RTLD_GLOBAL). So "which one serves" is asked the loader's way: the address ``dlsym(RTLD_DEFAULT,
"malloc")`` (``omp_get_max_threads``, ``GOMP_parallel``) gives, and the file ``dladdr`` names for
it. Neither call runs any code of the library or changes anything. ``/proc/self/maps`` adds every
file of the family that is loaded, used or not.

Who chose it comes from the launch environment: ``PARINFO_PRELOAD`` (what ``parinfo apply`` put
first in LD_PRELOAD) makes it the profile's choice, another LD_PRELOAD entry the user's, and
anything else the program's own (linked, or the C library's malloc).
"""
from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import field

from parinfo.process import preload as pre
from parinfo.process.preload import LaunchMarks, launch_marks
from parinfo.records.convert import OMIT_NONE, doc
from parinfo.records.record import record
from parinfo.records.source import Kind, Source, library_default, profile, unknown, variable
from parinfo.records.unknown import Unknown


@record
class ServedSetting:
    """A variable that configures the serving library: its ``value`` now and who set it."""

    name: str
    value: str
    source: Source | None = None


@record
class Served:
    """The library that serves one family of calls (``backend.allocator``, ``backend.openmp``).

    ``name`` is the record's name (jemalloc, tcmalloc, glibc; libiomp, libgomp, libomp) and
    ``label`` its words; ``path`` the file the loader resolves the family's entry point to;
    ``source`` who chose it; ``settings`` its variables that are set; ``loaded`` every file of the
    family mapped in the process (the serving one included); ``bypasses``: the other loaded files
    of the family, whose entry points the global scope resolves to this one instead (an OpenMP
    runtime: omp_* and GOMP_* both); ``note`` what else is true; ``unknown`` why it could not be told.
    """

    name: str | None = field(default=None, metadata=doc(
        "the allocator or OpenMP runtime it names, as the registry names it; null when unknown"))
    label: str | None = None
    path: str | None = field(default=None, metadata=doc(
        "the file the process's global scope resolves the family's entry point to (dlsym + dladdr)"))
    source: Source | None = field(default=None, metadata=doc(
        "profile (preloaded by parinfo apply), variable (the user's LD_PRELOAD), library default (linked, "
        "or the C library's malloc)"))
    settings: list[ServedSetting] = field(default_factory=list)
    loaded: list[str] = field(default_factory=list, metadata=doc("every file of the family loaded"))
    bypasses: list[str] = field(default_factory=list, metadata=doc(
        "other loaded files of the family whose entry points resolve to this one instead"))
    note: str | None = field(default=None, metadata=OMIT_NONE)
    unknown: str | None = field(default=None, metadata=OMIT_NONE)


#: Objects of the global scope looked at, at most, for the one that defines a symbol.
_MAX_SCOPE = 4096
_RTLD_LAZY, _RTLD_NOLOAD, _RTLD_DI_LINKMAP = 1, 4, 2


def _symbol_file(symbol: str) -> str | None:
    """The file whose definition of ``symbol`` calls through the global scope reach, or None when
    no loaded object of the global scope defines it.

    The loader's own lookup (dlsym + dladdr) answers, except where it names the main program
    and the program does not define the symbol: a program built without PIE that takes the
    function's address (Debian's python3, for malloc) holds only a jump slot for it, and calls
    reach the first other object of the global scope (in the loader's order: the preloaded ones
    first) that defines it.
    """
    import ctypes

    class _DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    scope = ctypes.CDLL(None)
    try:
        dladdr = scope.dladdr
    except AttributeError:
        return None
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    dladdr.restype = ctypes.c_int

    def file_of(lib: ctypes.CDLL) -> str | None:
        try:
            fn = getattr(lib, symbol)
        except AttributeError:
            return None
        info = _DlInfo()
        if not dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info)) or not info.dli_fname:
            return None
        return os.fsdecode(info.dli_fname)

    found = file_of(scope)
    if found is None or not _same_file(found, "/proc/self/exe") or _program_defines(symbol) is not False:
        return found
    for name in _global_scope(scope)[1:]:
        try:
            lib = ctypes.CDLL(name, mode=_RTLD_LAZY | _RTLD_NOLOAD)
        except OSError:
            continue
        own = file_of(lib)
        if own is not None and _same_file(own, name):
            return own
    return found


def _global_scope(scope: object) -> list[str]:
    """The files of the loader's link map (the main program first, then in lookup order)."""
    import ctypes

    class _LinkMap(ctypes.Structure):
        pass

    _LinkMap._fields_ = [("l_addr", ctypes.c_void_p), ("l_name", ctypes.c_char_p), ("l_ld", ctypes.c_void_p),
                         ("l_next", ctypes.POINTER(_LinkMap)), ("l_prev", ctypes.POINTER(_LinkMap))]
    try:
        dlinfo = ctypes.CDLL(None).dlinfo
    except AttributeError:
        return []
    dlinfo.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    dlinfo.restype = ctypes.c_int
    head = ctypes.POINTER(_LinkMap)()
    if dlinfo(ctypes.c_void_p(getattr(scope, "_handle", 0)), _RTLD_DI_LINKMAP, ctypes.byref(head)) != 0:
        return []
    names: list[str] = []
    node = head
    while node and len(names) < _MAX_SCOPE:
        raw = node.contents.l_name
        names.append(os.fsdecode(raw) if raw else "")
        node = node.contents.l_next
    return [n for i, n in enumerate(names) if i == 0 or n.startswith("/")]


def _program_defines(symbol: str) -> bool | None:
    """Whether this process's program file defines ``symbol`` (None: cannot be told)."""
    from parinfo.process.elfcount import defines

    try:
        fd = os.open("/proc/self/exe", os.O_RDONLY)
    except OSError:
        return None
    try:
        return defines(fd, symbol)
    finally:
        os.close(fd)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _names(entry: str, path: str) -> bool:
    """Whether the LD_PRELOAD ``entry`` names the loaded file ``path``. An entry with a slash is a
    path; a bare name ("libjemalloc.so.2") the loader searches for as it does a needed library, and
    an object it has loaded under that name answers for it after that: the file of that name, before
    links are followed (dladdr's path keeps the name the loader found) or after."""
    if "/" in entry:
        return _same_file(path, entry)
    return entry in (os.path.basename(path), os.path.basename(os.path.realpath(path)))


def _chooser(path: str, key: str, launch: Mapping[str, str] | Unknown, marks: LaunchMarks) -> Source:
    """Who put ``path`` in the process: the profile (parinfo's preload), the user's LD_PRELOAD, or
    nobody (linked, or the C library's own)."""
    if isinstance(launch, Unknown):
        return unknown(f"the launch environment: {launch}")
    if any(_names(p, path) for p in marks.preloaded):
        name = marks.profile or "?"
        return profile(name, key, f"profile {name} ({key}: preloaded by parinfo apply)")
    if any(_names(entry, path) for entry in pre.split_preload(launch.get(pre.PRELOAD_VAR), pre.MAX_READ_ENTRIES)):
        return variable(pre.PRELOAD_VAR)
    return library_default("loaded by the program or a library it links (nothing preloaded it)")


def _setting_source(name: str, value: str, launch: Mapping[str, str] | Unknown, marks: LaunchMarks) -> Source:
    """Who set a library's variable: the launch's profile, the user (at launch), or the process
    after launch (which a library loaded at start-up never read)."""
    if isinstance(launch, Unknown):
        return unknown(f"the launch environment: {launch}")
    if launch.get(name) != value:
        return Source(Kind.RUN_TIME, name, "set after launch by this process")
    if name in marks.set and marks.profile:
        return profile(marks.profile, name)
    return variable(name, value)


def _settings(names: tuple[str, ...], environ: Mapping[str, str], launch: Mapping[str, str] | Unknown,
              marks: LaunchMarks) -> list[ServedSetting]:
    return [ServedSetting(n, environ[n], _setting_source(n, environ[n], launch, marks)) for n in names if n in environ]


def allocator_served(objects: list[str], environ: Mapping[str, str], launch: Mapping[str, str] | Unknown) -> Served:
    """The malloc that serves this process (``objects``: the loaded files, /proc/self/maps)."""
    marks = launch_marks(launch) if not isinstance(launch, Unknown) else LaunchMarks()
    loaded = [p for p in objects if pre.allocator_of_file(p) is not None and pre.allocator_of_file(p) is not
              pre.allocator("glibc")]
    try:
        path = _symbol_file("malloc")
    except (OSError, TypeError, ValueError) as exc:  # no loader to ask (a platform without dlopen(NULL))
        return Served(loaded=loaded, unknown=f"the loader could not be asked ({exc})")
    if path is None:
        return Served(loaded=loaded, unknown="no object of the global scope defines malloc")
    rec = pre.allocator_of_file(os.path.realpath(path)) or pre.allocator_of_file(path)
    if rec is None:
        return Served(None, os.path.basename(path), path, _chooser(path, "allocator", launch, marks), loaded=loaded,
                      note="an allocator parinfo has no record of")
    names = (rec.conf_var,) if rec.conf_var else ()
    unused = [p for p in loaded if not _same_file(p, path)]
    note = (f"also loaded, not called: {', '.join(unused)} (malloc resolves to {rec.label})" if unused else None)
    if rec.name == "glibc":
        source = (_chooser(path, "allocator", launch, marks) if not isinstance(launch, Unknown)
                  else unknown(f"the launch environment: {launch}"))
        if source.kind is Kind.LIBRARY_DEFAULT:
            source = library_default("the C library's own, nothing preloaded another malloc")
    else:
        source = _chooser(path, "allocator", launch, marks)
    return Served(rec.name, rec.label, path, source, _settings(names, environ, launch, marks), loaded, unused, note)


def openmp_served(objects: list[str], environ: Mapping[str, str], launch: Mapping[str, str] | Unknown) -> Served | None:
    """The OpenMP runtime that serves the omp_* and GOMP_* calls looked up in the global scope, or
    None when no OpenMP runtime is loaded."""
    from parinfo.process import libraries as reg

    runtimes = set(reg.openmp_runtimes())

    def family(path: str) -> reg.Library | None:
        rec = reg.by_prefix(_file_name(path))
        return rec if rec is not None and rec.name in runtimes else None

    loaded = [p for p in objects if family(p) is not None]
    marks = launch_marks(launch) if not isinstance(launch, Unknown) else LaunchMarks()
    if not loaded and not marks.preloaded:
        return None
    try:
        path, gomp = (_symbol_file(name) for name in reg.OPENMP_ENTRY_POINTS)
    except (OSError, TypeError, ValueError) as exc:
        return Served(loaded=loaded, unknown=f"the loader could not be asked ({exc})")
    if path is None:
        return Served(loaded=loaded, unknown=f"no runtime of the global scope defines {reg.OPENMP_ENTRY_POINTS[0]}: "
                      "each library calls the runtime it loaded itself")
    rec = family(path)
    if rec is None:
        return Served(None, os.path.basename(path), path, None, loaded=loaded,
                      note=f"{reg.OPENMP_ENTRY_POINTS[0]} is defined outside any OpenMP runtime parinfo knows")
    rt = next((r for r in pre.OPENMP_RUNTIMES if r.library == rec.name), None)
    names = rt.variables if rt else ()
    others = [p for p in loaded if not _same_file(p, path)]
    note, bypasses = None, []
    if others:
        if gomp is not None and _same_file(gomp, path):
            bypasses = others
            note = (f"also loaded, not called: {', '.join(others)} (every omp_* and GOMP_* entry point resolves "
                    f"to {rec.label} first)")
        else:
            note = f"also loaded: {', '.join(others)}"
    return Served(rec.name, rec.label, path, _chooser(path, "openmp", launch, marks),
                  _settings(names, environ, launch, marks), loaded, bypasses, note)


@functools.lru_cache(maxsize=4096)
def _file_name(path: str) -> str:
    """The lower-case name of the file ``path`` leads to (a loaded object's links resolved once: a
    report asks for every loaded object each time). Only a link in the last step can change the name,
    so a path that is not a link (every path of the maps file, which the kernel resolved) costs one
    lstat instead of one per directory."""
    return os.path.basename(os.path.realpath(path) if os.path.islink(path) else path).lower()


def bypassed_by_parinfo(served: Served | None) -> list[str]:
    """The loaded files that a library preloaded by a launch's profile stands in for (the report's
    rules keep quiet about a set-up parinfo made); [] when parinfo preloaded none."""
    if served is None or served.source is None or served.source.kind is not Kind.PROFILE:
        return []
    return list(served.bypasses)
