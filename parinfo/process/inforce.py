"""Counts in force read from another process's memory, without stopping or tracing it.

Some libraries keep their count in force in an exported variable (the registry's
``Library.count_symbol``: OpenBLAS's, for one). For each such library mapped into the process:

1. the library file is opened as the process sees it: ``/proc/PID/map_files/START-END`` (the
   mapped file itself, for root), else ``/proc/PID/root`` + its path (another mount namespace or
   container), checked against the inode that ``/proc/PID/maps`` names;
2. the symbol's offset from the library's load base is resolved from the file's dynamic symbol
   table with pyelftools (imported here only), cached per (device, inode, size, mtime): a scan over
   many processes that share one numpy parses each file once;
3. the load base is the start of the file's mapping at file offset 0 in ``/proc/PID/maps``;
4. the variable's bytes are read with ``os.pread`` on ``/proc/PID/mem``: no ptrace attach, no signal,
   the process runs on.

Reading memory needs the same rights as a debugger (the process's user, or root; the kernel may ask
more). Without them the row says ``unknown (permission: run as the process's user or root)``.
"""
from __future__ import annotations

import functools
import os
from typing import Any

from parinfo.machine.procfs import PERMISSION, Memory, Proc, gone
from parinfo.process import libraries as reg
from parinfo.record import record

__all__ = ["IN_FORCE", "PERMISSION", "CountInForce", "MappedFile", "counts_in_force", "mapped_files", "reason",
           "unknown"]

#: The source of a count read from the process's memory.
IN_FORCE = "in force (read from the process's memory)"


def unknown(why: str) -> str:
    """The source of a count that could not be read, with its reason."""
    return f"unknown ({why})"


def reason(source: str) -> str:
    """The reason inside an ``unknown (reason)`` source (the source itself otherwise)."""
    if source.startswith("unknown (") and source.endswith(")"):
        return source[len("unknown ("):-1]
    return source


@record(frozen=True)
class CountInForce:
    """The count in force of one library file mapped into a process.

    ``library``: the registry record's name (openblas); ``path``: the mapped file as the process
    names it; ``count``: the count read from the process's memory, or None when unknown; ``source``:
    :data:`IN_FORCE`, or ``unknown (reason)``.
    """

    library: str
    path: str
    count: int | None
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"library": self.library, "path": self.path, "count": self.count, "source": self.source}


@record(frozen=True)
class MappedFile:
    """A file mapped into a process: its first mapping at file offset 0 (the load base) and the inode
    the kernel says it is."""

    path: str
    start: int
    end: int
    inode: int
    deleted: bool


def mapped_files(maps_text: str, prefixes: tuple[str, ...] | None = None) -> list[MappedFile]:
    """Each file of a /proc/PID/maps text once, in first-seen order, with its load base (the start of
    its mapping at offset 0); files never mapped at offset 0 are left out. With ``prefixes`` (lower
    case), only files whose base name starts with one of them: their lines are found by a text
    search, so the hundreds of other lines of a numpy process cost no Python work."""
    found: dict[str, MappedFile] = {}
    for line in _lines(maps_text, prefixes):
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5]
        deleted = path.endswith(" (deleted)")
        if deleted:
            path = path[: -len(" (deleted)")]
        if path in found:
            continue
        try:
            if int(parts[2], 16) != 0:
                continue
            lo, _, hi = parts[0].partition("-")
            found[path] = MappedFile(path, int(lo, 16), int(hi, 16), int(parts[4]), deleted)
        except ValueError:
            continue
    return list(found.values())


def _lines(maps_text: str, prefixes: tuple[str, ...] | None) -> list[str]:
    """The lines of ``maps_text`` (with ``prefixes``: only those whose file's base name starts with
    one of them), in order."""
    if prefixes is None:
        return maps_text.splitlines()
    low = maps_text.lower()
    starts: set[int] = set()
    for prefix in prefixes:
        pos = 0
        while (i := low.find("/" + prefix, pos)) != -1:
            end = low.find("\n", i)
            end = len(low) if end == -1 else end
            if "/" not in low[i + 1:end]:  # the prefix starts the base name, not a folder's name
                starts.add(low.rfind("\n", 0, i) + 1)
            pos = end
    return [maps_text[a:(b if (b := maps_text.find("\n", a)) != -1 else len(maps_text))] for a in sorted(starts)]


# ---------------------------------------------------------------------------------------------
# The symbol's place in the file, parsed once per file version


@record(frozen=True)
class _Symbol:
    """Where a count variable sits: ``offset`` from the load base, ``size`` in bytes, ``little``
    endian; or ``missing``: why the file gives none."""

    offset: int = 0
    size: int = 0
    little: bool = True
    missing: str | None = None


_CACHE: dict[tuple[int, int, int, int, tuple[str, ...]], _Symbol] = {}


def _find_symbol(elf: Any, names: tuple[str, ...]) -> tuple[str, Any] | None:
    """The first of ``names`` in the file's dynamic symbols: through its hash table when it has one
    (fast: no walk over thousands of symbols), else the dynamic symbol table or segment."""
    from elftools.elf.dynamic import DynamicSegment
    from elftools.elf.hash import ELFHashSection, GNUHashSection
    from elftools.elf.sections import SymbolTableSection

    tables: list[Any] = [s for s in elf.iter_sections() if isinstance(s, (GNUHashSection, ELFHashSection))]
    tables += [s for s in elf.iter_sections() if isinstance(s, SymbolTableSection) and s.name == ".dynsym"]
    if not tables:  # section headers stripped: the dynamic segment has the same table
        tables = [s for s in elf.iter_segments() if isinstance(s, DynamicSegment)]
    for name in names:
        for table in tables:
            getter = table.get_symbol if isinstance(table, (GNUHashSection, ELFHashSection)) else None
            if getter is not None:
                sym = getter(name)
            else:
                syms = table.get_symbol_by_name(name)
                sym = syms[0] if syms else None
            if sym is not None and sym["st_shndx"] != "SHN_UNDEF":
                return name, sym
    return None


def _parse(fd: int, spec: reg.CountSymbol) -> _Symbol:
    """Resolve ``spec`` in the ELF file open on ``fd``."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    with os.fdopen(os.dup(fd), "rb") as fh:
        try:
            elf = ELFFile(fh)
            hit = _find_symbol(elf, spec.names)
            if hit is None:
                return _Symbol(missing=f"the file exports no {' or '.join(spec.names)}: a single-threaded "
                                       f"build, or one parinfo does not know")
            name, sym = hit
            if sym["st_info"]["type"] != "STT_OBJECT" or sym["st_size"] not in (0, spec.size):
                return _Symbol(missing=f"{name} in this file is not a {spec.size}-byte variable")
            # the load base maps the segment at file offset 0; its address in the file is usually 0
            first = next((seg for seg in elf.iter_segments()
                          if seg["p_type"] == "PT_LOAD" and seg["p_offset"] == 0), None)
            if first is None:
                return _Symbol(missing="the file has no segment loaded from its start")
            page = max(int(first["p_align"]), 1)
            vaddr0 = int(first["p_vaddr"]) - int(first["p_vaddr"]) % page
            return _Symbol(int(sym["st_value"]) - vaddr0, spec.size, bool(elf.little_endian))
        except (ELFError, ValueError, KeyError, OSError, AttributeError) as exc:
            return _Symbol(missing=f"cannot parse the library file: {exc}")


def _symbol(fd: int, spec: reg.CountSymbol) -> _Symbol:
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, spec.names)
    found = _CACHE.get(key)
    if found is None:
        found = _CACHE[key] = _parse(fd, spec)
    return found


# ---------------------------------------------------------------------------------------------
# Reading one process (its files through the /proc front)


def _row(proc: Proc, m: MappedFile, rec: reg.Library, spec: reg.CountSymbol, mem: Memory) -> CountInForce:
    fd, why = proc.open_mapping(m.start, m.end, m.path, m.inode, m.deleted)
    if fd is None:
        return CountInForce(rec.name, m.path, None, unknown(why))
    try:
        sym = _symbol(fd, spec)
    finally:
        os.close(fd)
    if sym.missing is not None:
        return CountInForce(rec.name, m.path, None, unknown(sym.missing))
    data = mem.read(m.start + sym.offset, sym.size)
    if isinstance(data, str):
        return CountInForce(rec.name, m.path, None, unknown(data))
    value = int.from_bytes(data, "little" if sym.little else "big", signed=True)
    if value == spec.unset:
        return CountInForce(rec.name, m.path, None, unknown("the library has not set its count up yet"))
    if value < 1:
        return CountInForce(rec.name, m.path, None, unknown(f"the variable holds {value}, not a count"))
    return CountInForce(rec.name, m.path, value, IN_FORCE)


@functools.cache
def _symbol_prefixes() -> tuple[str, ...]:
    """The file name prefixes of the libraries whose record names a count variable."""
    return tuple(p for rec in reg.records() if rec.count_symbol is not None for p in rec.prefixes)


def _library_of(path: str) -> reg.Library | None:
    rec = reg.by_prefix(os.path.basename(path).lower())
    return rec if rec is not None and rec.count_symbol is not None else None


def counts_in_force(pid: int, maps_text: str | None = None) -> list[CountInForce]:
    """One row per library file mapped into process ``pid`` whose registry record names a count
    variable (``Library.count_symbol``), in load order: its count in force read from the process's
    memory, or None with the reason in ``source``. The process is neither stopped nor traced.

    ``maps_text`` is the process's /proc/PID/maps when the caller has read it already. Raises
    :class:`parinfo.process.tasks.ProcessGone` when the process does not exist or ends during the
    read, and :class:`parinfo.process.tasks.NoAccess` when its maps cannot be read (then nothing
    about its libraries is known).
    """
    proc = Proc(int(pid))
    if maps_text is None:
        proc.check()
        maps_text = proc.maps().decode("utf-8", "surrogateescape")
    elif not proc.exists():
        raise gone(int(pid))
    wanted = [(m, rec) for m in mapped_files(maps_text, _symbol_prefixes())
              if (rec := _library_of(m.path)) is not None]
    if not wanted:
        return []
    if proc.stat().dead:
        proc.follow_live_thread()
    with proc.memory() as mem:
        return [_row(proc, m, rec, rec.count_symbol, mem) for m, rec in wanted if rec.count_symbol is not None]


def cache_size() -> int:
    """How many (file, symbol) lookups are cached (for tests and the host scan's figures)."""
    return len(_CACHE)

