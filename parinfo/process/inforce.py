"""Counts in force read from another process's memory, without stopping or tracing it.

Some libraries keep their count in force in an exported variable (the registry's
``Library.count_symbol``: OpenBLAS's, for one). For each such library mapped into the process:

1. the library file is opened as the process sees it (``/proc/PID/root`` + its path, else
   ``/proc/PID/map_files/START-END`` when the path is gone or another mount namespace hides it), and
   checked against the inode that ``/proc/PID/maps`` names;
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

import errno
import os
from typing import Any

from parinfo.process import libraries as reg
from parinfo.record import record

__all__ = ["IN_FORCE", "PERMISSION", "CountInForce", "MappedFile", "counts_in_force", "mapped_files", "reason",
           "unknown"]

#: The source of a count read from the process's memory.
IN_FORCE = "in force (read from the process's memory)"
#: Why a count of another user's process is unknown.
PERMISSION = "permission: run as the process's user or root"


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


def mapped_files(maps_text: str) -> list[MappedFile]:
    """Each file of a /proc/PID/maps text once, in first-seen order, with its load base (the start of
    its mapping at offset 0); files never mapped at offset 0 are left out."""
    found: dict[str, MappedFile] = {}
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5].rstrip("\n")
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
# Reading one process


class _Gone(Exception):
    """The process ended while it was read."""


def _open_file(pid: int, m: MappedFile) -> tuple[int | None, str]:
    """The library file as process ``pid`` sees it, open read-only (and checked to be the mapped
    inode), or (None, why not)."""
    ranges = f"{m.start:x}-{m.end:x}"
    candidates = [] if m.deleted else [f"/proc/{pid}/root{m.path}"]
    candidates += [f"/proc/{pid}/map_files/{ranges}"]
    why = "cannot open the library file as the process sees it"
    for candidate in candidates:
        try:
            fd = os.open(candidate, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except (ProcessLookupError, FileNotFoundError):
            if not os.path.isdir(f"/proc/{pid}"):
                raise _Gone from None
            continue
        except PermissionError:
            why = PERMISSION
            continue
        except OSError as exc:
            why = f"cannot open {candidate}: {exc.strerror or exc}"
            continue
        if m.inode and os.fstat(fd).st_ino != m.inode:
            os.close(fd)
            why = "the library file was replaced after the process loaded it"
            continue
        return fd, why
    return None, why


def _permission_reason(pid: int) -> str:
    """Why this user may not read ``pid``'s memory: another user's process, or (same user) the
    kernel's ptrace rules."""
    if os.geteuid() == 0:
        return "permission: refused even to root (a security module's rule)"
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Uid:"):
                    if os.geteuid() not in {int(x) for x in line.split()[1:]}:
                        return PERMISSION
                    break
    except OSError:
        return PERMISSION
    return ("permission: the kernel lets only root read this process's memory (kernel.yama.ptrace_scope, "
            "or a process that is not dumpable): run as root")


class _Memory:
    """/proc/PID/mem, opened on first use; a read that fails says why once for every later row."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd: int | None = None
        self.refused: str | None = None

    def read(self, address: int, size: int) -> bytes | str:
        """``size`` bytes at ``address``, or why they cannot be read."""
        if self.refused is not None:
            return self.refused
        if self.fd is None:
            try:
                self.fd = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except (ProcessLookupError, FileNotFoundError):
                raise _Gone from None
            except PermissionError:
                self.refused = _permission_reason(self.pid)
                return self.refused
            except OSError as exc:
                self.refused = f"cannot open /proc/{self.pid}/mem: {exc.strerror or exc}"
                return self.refused
        try:
            data = os.pread(self.fd, size, address)
        except ProcessLookupError:
            raise _Gone from None
        except PermissionError:
            return _permission_reason(self.pid)
        except OSError as exc:
            if exc.errno == errno.EIO and not os.path.isdir(f"/proc/{self.pid}"):
                raise _Gone from None
            return f"cannot read the process's memory at {address:#x}: {exc.strerror or exc}"
        if len(data) != size:
            if not os.path.isdir(f"/proc/{self.pid}"):
                raise _Gone
            return f"short read of the process's memory at {address:#x}"
        return data

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _row(pid: int, m: MappedFile, rec: reg.Library, spec: reg.CountSymbol, mem: _Memory) -> CountInForce:
    fd, why = _open_file(pid, m)
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
    from parinfo.process import tasks

    if maps_text is None:
        try:
            with open(f"/proc/{int(pid)}/maps", "rb") as fh:
                maps_text = fh.read().decode("utf-8", "surrogateescape")
        except (FileNotFoundError, ProcessLookupError):
            raise tasks.gone(pid) from None
        except OSError as exc:
            raise tasks.no_access(pid, f"/proc/{pid}/maps", exc) from None
    wanted = [(m, rec) for m in mapped_files(maps_text) if (rec := _library_of(m.path)) is not None]
    mem = _Memory(pid)
    try:
        return [_row(pid, m, rec, rec.count_symbol, mem) for m, rec in wanted if rec.count_symbol is not None]
    except _Gone:
        raise tasks.gone(pid) from None
    finally:
        mem.close()


def cache_size() -> int:
    """How many (file, symbol) lookups are cached (for tests and the host scan's figures)."""
    return len(_CACHE)

