"""The native thread pools loaded in this process, and their threading layers.

threadpoolctl finds the BLAS and OpenMP libraries it can control. What it cannot see comes from the
process's loaded objects (``/proc/self/maps``, read once): TBB, runtimes it has no controller for,
several copies of one runtime (numpy's and scipy's OpenBLAS), and MKL linked statically into torch.
Inspecting changes nothing: no count is set to probe a pool (``debugging_info`` stays off).
"""
from __future__ import annotations

import functools
import os
import re
import sys
from dataclasses import field
from typing import TYPE_CHECKING, Any

from parinfo.process import libraries as reg
from parinfo.records.convert import OMIT_NONE, doc
from parinfo.records.record import record
from parinfo.records.source import Source
from parinfo.records.unknown import describe

if TYPE_CHECKING:
    from parinfo.process.torch_config import TorchFacts

# Wheel folders that are not the distribution's import name.
_OWNER_ALIASES = {"sklearn": "scikit-learn", "scikit_learn": "scikit-learn", "torch_cpu": "torch"}


@record
class PoolRow:
    """One loaded copy of a thread runtime: a row of the report's ``pools`` section (its JSON).

    - ``library``: openblas, mkl, blis, flexiblas, libgomp, libiomp, libomp or tbb.
    - ``user_api``: blas, openmp or tbb.  ``internal_api``: threadpoolctl's name (openblas, mkl, blis,
      flexiblas, openmp) or tbb.
    - ``filepath``: the library file (for MKL inside torch: libtorch_cpu.so).  ``prefix``: the start
      of its file name (e.g. libscipy_openblas, libgomp).
    - ``version``: the library's version, or None when unknown.
    - ``num_threads``: the count in force (int), or None when it cannot be read without changing
      anything (TBB, runtimes without a threadpoolctl controller, another process's pools).
    - ``threading_layer``: BLAS only: pthreads, openmp, intel, gnu, tbb, sequential..., or None.
    - ``architecture``: BLAS kernel architecture (e.g. Haswell), or None.
    - ``owner``: the package the file ships in (numpy, scipy, torch, scikit-learn...), "system",
      "environment PREFIX", or "unknown".
    - ``seen_by``: "threadpoolctl", "loaded objects", or "/proc/PID/maps".
    - ``duplicate_of``: for the second and later copies of one library, the filepath of the first
      copy; None for the first.  ``copies``: how many copies of this library are loaded.
    - ``note``: a remark on how the row was found, or None.
    - For a process read from outside (``show --pid``) only, and left out of its JSON otherwise:
      ``count_source``: "in force (read from the process's memory)" when ``num_threads`` was read
      there, "from its launch environment; the process may have changed it" when only
      ``launch_count`` is known (``launch_from`` says which variable asked for it), or
      "unknown (why)". ``pid``: the process of the tree the row belongs to (``show --pid P
      --children``), else None.
    """

    library: str = field(metadata={"missing": "unknown"})
    user_api: str | None
    internal_api: str | None
    filepath: str | None
    prefix: str
    version: str | None = None
    num_threads: int | None = None
    threading_layer: str | None = None
    architecture: str | None = None
    owner: str = "unknown"  # NO_OWNER
    seen_by: str = field(default="loaded objects", metadata={"missing": "unknown"})
    duplicate_of: str | None = None
    copies: int = 1
    note: str | None = None
    count_source: Source | None = field(default=None, metadata={**OMIT_NONE, **doc(
        "a process read from outside only: where num_threads (or launch_count) comes from, or unknown (why)")})
    launch_count: int | None = field(default=None, metadata={**OMIT_NONE, **doc(
        "a process read from outside only: the count its launch environment asked for (never in force)")})
    launch_from: str | None = field(default=None, metadata=OMIT_NONE)
    pid: int | None = field(default=None, metadata={**OMIT_NONE, **doc(
        "show --pid P --children only: the process of the tree this pool belongs to")})

    @classmethod
    def of_file(cls, path: str, family: tuple[str, str, str], *, seen_by: str, note: str | None) -> PoolRow:
        """The row of runtime file ``path`` of ``family`` (:func:`classify`), before any count is read."""
        library, user_api, internal_api = family
        return cls(library, user_api, internal_api, path, re.split(r"[.-]", os.path.basename(path), maxsplit=1)[0],
                   owner=owner_of(path), seen_by=seen_by, note=note)


def loaded_objects(maps_text: str | None = None) -> list[str]:
    """Paths of the shared objects mapped into this process, in first-seen order, each once.

    ``maps_text`` replaces the content of /proc/self/maps (for tests). Returns [] when it cannot be read.
    """
    if maps_text is None:
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
                maps_text = fh.read()
        except OSError:
            return []
    seen: dict[str, None] = {}
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6:
            path = parts[5].strip()
            if path.startswith("/") and ".so" in path and path not in seen:
                seen[path] = None
    return list(seen)


@functools.cache
def _runtime_paths() -> re.Pattern[bytes]:
    """Lines of a maps file whose path's file name starts like a thread runtime's (the registry's
    prefixes): a text search, so the hundreds of other lines of a numpy process cost no Python work."""
    prefixes = sorted({p for r in reg.records() for p in r.prefixes})
    names = b"|".join(re.escape(p.encode()) for p in prefixes)
    return re.compile(rb"(/[^\n]*/(?:" + names + rb")[^/\n]*\.so[^/\n]*)$", re.MULTILINE | re.IGNORECASE)


#: What the kernel appends in /proc/PID/maps to a mapped file that was deleted after it was mapped.
DELETED = " (deleted)"


def runtimes_in_maps(maps: bytes, seen_by: str) -> list[PoolRow]:
    """One row per thread runtime file mapped (copies marked), from the
    bytes of a process's maps. A file deleted after it was loaded (what a package upgrade does to
    every running process) keeps its path, with a note saying so."""
    rows = []
    seen: set[str] = set()
    for raw in dict.fromkeys(m.group(1) for m in _runtime_paths().finditer(maps)):
        path = raw.decode("utf-8", "surrogateescape")
        deleted = path.endswith(DELETED)
        path = path.removesuffix(DELETED)
        if path in seen:
            continue
        seen.add(path)
        family = classify(path)
        if family is not None:
            note = "deleted or replaced on disk since the process loaded it" if deleted else None
            rows.append(PoolRow.of_file(path, family, seen_by=seen_by, note=note))
    mark_duplicates(rows)
    return rows


@functools.lru_cache(maxsize=4)
def runtimes_among(objects: tuple[str, ...]) -> tuple[tuple[str, tuple[str, str, str]], ...]:
    """(path, family) of each thread runtime among ``objects``, in their order (kept for the last
    few lists: a report asks it of the same some hundreds of loaded objects each time)."""
    found = ((path, classify(path)) for path in objects)
    return tuple((path, family) for path, family in found if family is not None)


@functools.lru_cache(maxsize=256)
def _realpath(path: str) -> str:
    """A loaded runtime's real path (kept: it names a file mapped in, which stays the same file)."""
    return os.path.realpath(path)


def classify(path: str) -> tuple[str, str, str] | None:
    """(library, user_api, internal_api) of a runtime file, or None when the file is not one."""
    lib = reg.by_prefix(os.path.basename(path).lower())
    if lib is None or lib.user_api is None or lib.internal_api is None:
        return None
    return lib.name, lib.user_api, lib.internal_api


#: The owner of a file no package is known to ship (a pool row's ``owner``).
NO_OWNER = "unknown"


def owner_of(path: str) -> str:
    """The package a library file ships in, from its path: numpy, scipy, torch, scikit-learn... ;
    "system" for files under /usr or /lib, "unknown" otherwise."""
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        if part in ("site-packages", "dist-packages") and i + 1 < len(parts) - 1:
            top = parts[i + 1]
            top = top[:-5] if top.endswith(".libs") else top
            return _OWNER_ALIASES.get(top, top)
    if path.startswith(("/usr/", "/lib/", "/lib64/")):
        return "system"
    if "/lib/" in path:  # a conda or venv prefix: name the environment's folder
        return "environment " + path.split("/lib/", 1)[0]
    return NO_OWNER


#: The OpenMP runtimes that cannot share a process (the registry's ``conflicts``).
CONFLICTING_OPENMP = tuple(r.name for r in reg.conflicting_openmp())


def openmp_conflict(objects: list[str] | None = None) -> list[str]:
    """The loaded files of Intel libiomp and LLVM libomp when both are loaded, else [].

    Read from the loaded objects only (``objects``, default /proc/self/maps): no OpenMP call is made,
    because the first call into the second runtime is what aborts or hangs the process.
    """
    objects = loaded_objects() if objects is None else objects
    found: dict[str, list[str]] = {name: [] for name in CONFLICTING_OPENMP}
    for path, family in runtimes_among(tuple(objects)):
        if family[0] in found:
            found[family[0]].append(path)
    if all(found.values()):
        return [path for name in CONFLICTING_OPENMP for path in found[name]]
    return []


CONFLICT_NOTE = (f"count not read: {' and '.join(r.vendor or r.name for r in reg.conflicting_openmp())} are both "
                 "loaded, and a call into either runtime can abort the process (OMP Error #15) or hang it at exit")


#: threadpoolctl's controller of the libraries it found, with the loaded objects it was made for.
_CONTROLLER: list[tuple[tuple[str, ...], Any]] = []


def _controller(objects: list[str]) -> Any:
    """threadpoolctl's controller of this process's libraries, made again only when the loaded objects
    differ from those it was made for: its search (every loaded object, each library opened and its
    version and layer asked) finds the same libraries while the same objects are loaded, and each
    report still asks every library for its count (``info()``)."""
    from parinfo.process.setter import import_threadpoolctl

    key = tuple(objects)
    if _CONTROLLER and _CONTROLLER[0][0] == key and key:
        return _CONTROLLER[0][1]
    controller = import_threadpoolctl().ThreadpoolController()
    _CONTROLLER[:] = [(key, controller)]
    return controller


def _tpc_rows(objects: list[str]) -> list[PoolRow]:
    rows = []
    for info in _controller(objects).info():
        prefix = info.get("prefix") or ""
        family = classify(info.get("filepath") or "") or classify(prefix)
        library = family[0] if family else (info.get("internal_api") or prefix)
        path = info.get("filepath")
        rows.append(PoolRow(
            library, info.get("user_api"), info.get("internal_api"), path, prefix,
            version=info.get("version"), num_threads=info.get("num_threads"),
            threading_layer=info.get("threading_layer"), architecture=info.get("architecture"),
            owner=owner_of(path or ""), seen_by="threadpoolctl"))
    return rows


def _object_row(path: str, library: str, user_api: str, internal_api: str, note: str) -> PoolRow:
    return PoolRow.of_file(path, (library, user_api, internal_api), seen_by="loaded objects", note=note)




def _torch_facts(owner: str) -> TorchFacts | None:
    """torch's raw facts (:func:`parinfo.process.torch_config.torch_facts`) when it is imported, else None."""
    torch = sys.modules.get(owner)
    if torch is None:
        return None
    from parinfo.process.torch_config import torch_facts

    try:
        return torch_facts(torch)
    except Exception:  # a torch without backends.mkl, or one still importing
        return None


def torch_mkl_row(objects: list[str], rows: list[PoolRow], facts: TorchFacts | None) -> PoolRow | None:
    """A row for MKL linked inside torch's library, when torch reports MKL: from torch's raw facts
    (:func:`parinfo.process.torch_config.torch_facts`, read in this process or inside another) and
    the process's loaded objects."""
    mkl = reg.family(reg.Mkl)
    (prefix, owner), = mkl.linked_into
    if facts is None or not facts.mkl_available:
        return None
    if any(r.library == mkl.name and r.owner == owner for r in rows):
        return None  # a torch build with a separate MKL runtime file: threadpoolctl already shows it
    lib = next((p for p in objects if os.path.basename(p).startswith(prefix)), None)
    if lib is None:
        return None
    from parinfo.process.torch_config import parse_parallel_info

    parsed = parse_parallel_info(facts.parallel_info or "")
    row = _object_row(lib, mkl.name, str(mkl.user_api), str(mkl.internal_api),
                      f"MKL linked into {prefix}; count is {mkl.native_getter} from "
                      "torch.__config__.parallel_info(), which changes nothing")
    row.prefix, row.owner = prefix, owner
    row.version, row.num_threads = parsed.mkl_version, parsed.mkl_max_threads
    layer = mkl.layer_in(objects)
    if layer is None and (parsed.aten_backend or "").lower() == "openmp":
        runtimes = {r.library for r in rows if r.user_api == "openmp" and r.owner == owner}
        layer = mkl.layer_given_openmp(runtimes)
        if layer is not None:
            row.note = (f"{row.note}; layer inferred from torch's OpenMP runtime "
                        f"({reg.library(runtimes.pop()).vendor})")
    row.threading_layer = layer
    return row


def mark_duplicates(rows: list[PoolRow]) -> None:
    """Fill ``copies`` and ``duplicate_of`` of pool rows: the copies of one library, first seen first."""
    groups: dict[str, list[PoolRow]] = {}
    for row in rows:
        groups.setdefault(row.library, []).append(row)
    for group in groups.values():
        for row in group:
            row.copies = len(group)
        for row in group[1:]:
            row.duplicate_of = group[0].filepath


def native_pools(maps_text: str | None = None, objects: list[str] | None = None) -> list[PoolRow]:
    """Every native thread pool loaded in this process, one row per loaded copy of a runtime.

    Rows from threadpoolctl's ``threadpool_info()`` come first (in load order), then runtimes seen only
    among the loaded objects, then MKL inside torch. ``maps_text`` replaces /proc/self/maps (tests);
    ``objects`` is :func:`loaded_objects` when the caller has just read it (the maps file of a numpy
    process is some 25 KB the kernel writes out on each read).
    When Intel libiomp and LLVM libomp are both loaded (:func:`openmp_conflict`), nothing is asked of
    any library: every row comes from the loaded objects, with its count unknown.
    """
    if objects is None or maps_text is not None:
        objects = loaded_objects(maps_text)
    conflict = bool(openmp_conflict(objects))
    tpc_error: str | None = None
    if conflict:  # threadpoolctl would call omp_get_max_threads() in both runtimes
        rows: list[PoolRow] = []
    else:
        try:
            rows = _tpc_rows(objects)
        except Exception as exc:  # a library threadpoolctl cannot handle must not break inspection
            rows, tpc_error = [], describe(exc)
    known = {_realpath(r.filepath) for r in rows if r.filepath}
    known |= {r.filepath for r in rows if r.filepath}
    for path, family in runtimes_among(tuple(objects)):
        if path in known:
            continue
        library, user_api, internal_api = family
        rec = reg.library(library)
        if rec.direct is not None:  # read through its own getters (TBB)
            note = rec.direct.unread
        else:
            note = "loaded, but threadpoolctl has no controller for it; count not readable"
        if tpc_error is not None:
            note = f"threadpoolctl failed ({tpc_error}); count not read"
        if conflict:
            note = CONFLICT_NOTE
        row = _object_row(path, library, user_api, internal_api, note)
        if rec.direct is not None and maps_text is None and not conflict:
            row.version, row.num_threads = rec.read_direct(path)
            if row.num_threads is not None:
                row.note = rec.direct.how
        if rec.layer_files:  # its threading layer is told by the files loaded beside it (MKL)
            row.threading_layer = rec.layer_in(objects)
        rows.append(row)
        known.add(path)
    for rec in reg.records():  # a library linked without the file threadpoolctl controls (MKL's core)
        if not rec.static_prefixes or any(r.library == rec.name for r in rows):
            continue
        core = next((p for p in objects if os.path.basename(p).startswith(rec.static_prefixes)), None)
        if core is not None:
            row = _object_row(core, rec.name, str(rec.user_api), str(rec.internal_api), rec.static_note)
            if rec.layer_files:
                row.threading_layer = rec.layer_in(objects)
            rows.append(row)
    torch_row = None if conflict else torch_mkl_row(objects, rows, _torch_facts(reg.family(reg.Mkl).linked_into[0][1]))
    if torch_row is not None:
        rows.append(torch_row)
    mark_duplicates(rows)
    return rows


@record
class ThreadingLayers:
    """The threading layer of each native library family loaded, in words (part of the report's
    ``backend`` section):

    - ``openmp``: the OpenMP runtimes loaded, e.g. "GNU libgomp" or "GNU libgomp + Intel libiomp";
      None when none is loaded.  ``openmp_vendors``: the same as a list, each vendor once.
    - ``mkl``: MKL's layer(s): "intel", "gnu", "tbb", "sequential" (joined with ", " when copies
      differ), "unknown" when MKL is loaded but its layer is not known; None without MKL.
    - ``openblas``: OpenBLAS's layer(s): "pthreads", "openmp", "disabled"...; None without OpenBLAS.
    - ``blis``: BLIS's layer(s), or None.
    - ``tbb``: True when TBB is loaded.
    - ``summary``: one line, e.g. "OpenMP: GNU libgomp; MKL: gnu; OpenBLAS: pthreads (2 copies); TBB: no".
    """

    openmp: str | None = None
    openmp_vendors: list[str] = field(default_factory=list)
    mkl: str | None = None
    openblas: str | None = None
    blis: str | None = None
    tbb: bool = False
    summary: str = "unknown"


def threading_layers(pools: list[PoolRow]) -> ThreadingLayers:
    """The threading layer of each native library family loaded among ``pools`` (rows of
    :func:`native_pools`)."""
    vendors: list[str] = []
    for row in pools:
        lib = reg.find(row.library)
        name = lib.vendor if lib is not None else None
        if name and name not in vendors:
            vendors.append(name)

    def layers(library: str) -> str | None:
        found = [r.threading_layer or "unknown" for r in pools if r.library == library]
        if not found:
            return None
        return ", ".join(dict.fromkeys(found))

    def copies(library: str) -> str:
        n = sum(1 for r in pools if r.library == library)
        return f" ({n} copies)" if n > 1 else ""

    mkl, openblas, blis = reg.family(reg.Mkl), reg.family(reg.OpenBLAS), reg.family(reg.Blis)
    out = ThreadingLayers(" + ".join(vendors) if vendors else None, vendors, layers(mkl.name), layers(openblas.name),
                          layers(blis.name), any(r.library == reg.family(reg.OneTBB).name for r in pools))
    parts = [f"OpenMP: {out.openmp or 'none'}"]
    for lib, label, layer in ((mkl, "MKL", out.mkl), (openblas, "OpenBLAS", out.openblas), (blis, "BLIS", out.blis)):
        if layer is not None:
            parts.append(f"{label}: {layer}{copies(lib.name)}")
    parts.append("TBB: " + ("yes" if out.tbb else "no"))
    out.summary = "; ".join(parts)
    return out
