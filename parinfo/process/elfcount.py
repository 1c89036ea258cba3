"""Where a library file keeps its count getter and count variable: the file side of reading a count
in force from another process (:mod:`parinfo.outside.inforce`).

The file is hostile input (any local user can make a process map a file named like OpenBLAS). So
pyelftools reads only the ELF header and gives the record layouts; every table is located, checked
against the file's size and read here, in bounded pieces: the file's size, the number of section
and program headers, each section's extent, a symbol table's entries (:data:`MAX_ENTRIES`) and the
time spent (:data:`BUDGET_S`) are limited before the work they would cost is done. A symbol is found
by searching the string table and then the symbol table for its name's offset (two ``bytes.find``
passes, no walk over entries), so a table of any shape costs about its size to read.

Every failure, pyelftools' own included (a crafted file has given ``ZeroDivisionError`` and
``struct.error`` from inside it), becomes :attr:`Place.missing` in one place: :func:`locate`.
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from parinfo.process import getter_code, libraries as reg
from parinfo.records.record import record

__all__ = ["BUDGET_S", "MAX_ENTRIES", "MAX_FILE", "Place", "locate", "machine_name", "variable"]

#: Larger library files are not read (OpenBLAS builds are 20-40 MB).
MAX_FILE = 512 << 20
#: Symbol tables with more entries are not searched (numpy's OpenBLAS has 12,000 to 25,000).
MAX_ENTRIES = 1 << 19
#: Section or program header tables with more entries are not read (libraries have about 30).
MAX_HEADERS = 1024
#: String tables larger than this are not read.
MAX_STRINGS = 32 << 20
#: Offsets of one name tried, and misaligned matches skipped, before a table is given up.
MAX_CANDIDATES = 64
MAX_MISSES = 4096
#: Seconds of this thread's CPU time one file may take to locate; past it the count is unknown.
#: CPU time, not wall time: the work a crafted file can cost is what is bounded (its reads are
#: bounded by the sizes above), and a busy machine, which slows every process alike, does not
#: turn a count into "unknown".
BUDGET_S = 0.5
#: CPU seconds of locating shared by all files in any WINDOW_S (wall seconds): a flood of new
#: crafted files costs a long-running scan at most this much per window; the files past it are
#: tried on a later read.
SHARED_S = 1.0
WINDOW_S = 10.0

_SHT_NOBITS = "SHT_NOBITS"
_PF_X, _PF_W = 1, 2
_MACHINES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64"}


@record(frozen=True)
class Place:
    """Where a count lives in a file, as offsets from its load base (the start of its mapping at file
    offset 0): ``getter`` and ``getter_size`` (the bytes to decode), the ``variable`` a symbol
    names (None when none does: the getter's code then says), ``build_max`` when the file tells its
    build's maximum count, the ``writable`` segments' extents, the ``pointer`` size, the ``machine``
    and byte order; or
    ``missing``: why the file gives no count (``retry``: only for now, as the shared time is spent)."""

    getter: int = 0
    getter_size: int = 0
    getter_name: str = ""
    variable: int | None = None
    variable_name: str = ""
    build_max: int | None = None
    writable: tuple[tuple[int, int], ...] = ()
    pointer: int = 8
    machine: str = ""
    little: bool = True
    missing: str | None = None
    retry: bool = False

    def holds(self, offset: int, size: int) -> bool:
        """Whether ``size`` bytes at ``offset`` lie inside one writable segment."""
        return any(lo <= offset and offset + size <= hi for lo, hi in self.writable)


def machine_name(e_machine: str) -> str:
    """A machine as parinfo names it: pyelftools' ``EM_X86_64`` is ``x86_64`` (as ``uname -m``
    says), ``EM_AARCH64`` ``aarch64``; others keep pyelftools' name."""
    return _MACHINES.get(e_machine, e_machine)


class _Refused(Exception):
    """The file claims more than parinfo reads, or is not what it should be (the message says)."""


class _Window:
    """The locating time spent in the current window of :data:`WINDOW_S` seconds."""

    start = 0.0
    spent = 0.0

    @classmethod
    def left(cls) -> float:
        now = time.monotonic()
        if now - cls.start > WINDOW_S:
            cls.start, cls.spent = now, 0.0
        return SHARED_S - cls.spent


def locate(fd: int, spec: reg.CountSymbol, budget_s: float = BUDGET_S) -> Place:
    """Where the file open on ``fd`` keeps ``spec``'s getter and variable, or why it cannot be
    told. Never raises: whatever the file makes the parse raise is turned into ``missing`` here."""
    left = _Window.left()
    if left <= 0:
        return Place(missing=f"parinfo spent its {SHARED_S} s for reading library files in the last "
                             f"{WINDOW_S:.0f} s: read again later", retry=True)
    started = time.thread_time()
    try:
        return _Reader(fd, min(budget_s, left)).locate(spec)
    except _Refused as exc:
        return Place(missing=str(exc))
    except Exception as exc:  # hostile input: any error of the parse, pyelftools' included, is a reason
        text = " ".join(str(exc).split())[:120]
        return Place(missing=f"cannot parse the library file ({type(exc).__name__}{': ' + text if text else ''})")
    finally:
        _Window.spent += time.thread_time() - started


def variable(fd: int, name: str, size: int, *, max_entries: int = MAX_ENTRIES, max_strings: int = MAX_STRINGS,
             budget_s: float = BUDGET_S) -> Place:
    """Where the file open on ``fd`` keeps the ``size``-byte variable ``name`` (its symbol tables,
    the local one too; ``variable`` as an offset from the load base, with the ``writable``
    extents), or why it cannot be told. For a file this process loaded itself, whose code it runs:
    no getter is checked, and a large file's tables may be read up to ``max_entries`` and
    ``max_strings``. Never raises."""
    started = time.thread_time()
    try:
        reader = _Reader(fd, budget_s)
        reader.max_entries, reader.max_strings = max_entries, max_strings
        return reader.variable(name, size)
    except _Refused as exc:
        return Place(missing=str(exc))
    except Exception as exc:  # any error of the parse is a reason
        return Place(missing=f"cannot parse the library file ({type(exc).__name__})")
    finally:
        _Window.spent += time.thread_time() - started


def defines(fd: int, name: str, budget_s: float = BUDGET_S) -> bool | None:
    """Whether the file open on ``fd`` defines the function ``name`` in its dynamic symbol table, or
    None when it cannot be told. An executable built without PIE that takes a function's address
    (Debian's python3 does, for malloc) exports an undefined entry for it, whose address is only a
    jump slot: the loader's lookup then names the executable, though calls reach another file."""
    try:
        return _Reader(fd, budget_s).defines(name)
    except Exception:  # the same bounded reading as locate(): any failure is "cannot be told"
        return None


@record(frozen=True)
class _Table:
    """A symbol table's raw entries and its string table."""

    entries: bytes
    strings: bytes


class _Reader:
    """One bounded reading of one file."""

    def __init__(self, fd: int, budget_s: float) -> None:
        self.fd = fd
        self.budget = budget_s
        self.deadline = time.thread_time() + budget_s
        self.size = os.fstat(fd).st_size
        self.max_entries, self.max_strings = MAX_ENTRIES, MAX_STRINGS

    def tick(self) -> None:
        if time.thread_time() > self.deadline:
            raise _Refused(f"the library file took more than {self.budget} s of CPU to read")

    def read(self, offset: int, size: int, what: str) -> bytes:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise _Refused(f"the file's {what} points past its end")
        data = os.pread(self.fd, size, offset)
        if len(data) != size:
            raise _Refused(f"short read of the file's {what}")
        self.tick()
        return data

    def _layout(self) -> tuple[Any, Any, int, list[Any], dict[str, Mapping[str, Any]], int]:
        """The file's header, record layouts, class (32 or 64), loaded segments, sections and load
        base (the address its segment at file offset 0 starts at, aligned down)."""
        from elftools.elf.elffile import ELFFile

        if self.size > MAX_FILE:
            raise _Refused(f"the library file is {self.size} bytes, beyond the {MAX_FILE} parinfo reads")
        with os.fdopen(os.dup(self.fd), "rb") as fh:
            elf = ELFFile(fh)  # reads the fixed-size header only
            header, structs = elf.header, elf.structs
            self.little = bool(elf.little_endian)
            loads = self._segments(header, structs)
            sections = self._sections(header, structs)
        first = next((p for p in loads if p["p_offset"] == 0), None)
        if first is None:
            raise _Refused("the file has no segment loaded from its start")
        base = int(first["p_vaddr"]) - int(first["p_vaddr"]) % max(int(first["p_align"]), 1)
        return header, structs, int(elf.elfclass), loads, sections, base

    @staticmethod
    def _extents(loads: list[Any], base: int, flag: int) -> tuple[tuple[int, int], ...]:
        """The extents, from the load base, of the segments with ``flag`` (executable, writable)."""
        return tuple((int(p["p_vaddr"]) - base, int(p["p_vaddr"]) + int(p["p_memsz"]) - base)
                     for p in loads if int(p["p_flags"]) & flag)

    def locate(self, spec: reg.CountSymbol) -> Place:
        header, structs, elfclass, loads, sections, base = self._layout()

        def extents(flag: int) -> tuple[tuple[int, int], ...]:
            return self._extents(loads, base, flag)

        dynsym = self._table(sections, ".dynsym", structs)
        symtab = self._table(sections, ".symtab", structs)
        if dynsym is None:
            raise _Refused("the file has no dynamic symbol table")
        getter = next(((n, s) for n in spec.getters if (s := self._symbol(dynsym, n, structs, "STT_FUNC"))), None)
        if getter is None:
            raise _Refused(f"the file exports none of {', '.join(spec.getters)}: a build or library parinfo "
                           f"does not know")
        name, gsym = getter
        code = extents(_PF_X)
        goff = int(gsym["st_value"]) - base
        if not any(lo <= goff < hi for lo, hi in code):
            raise _Refused(f"{name} does not lie in the file's code")
        tables = [t for t in (dynsym, symtab) if t is not None]
        var = next(((n, s) for n in spec.names for t in tables if (s := self._symbol(t, n, structs, "STT_OBJECT"))),
                    None)
        if var is not None and int(var[1]["st_size"]) not in (0, spec.size):
            raise _Refused(f"{var[0]} in this file is not a {spec.size}-byte variable")
        bound = self._symbol(symtab, spec.max_symbol, structs, "STT_OBJECT") if symtab and spec.max_symbol else None
        build_max = int(bound["st_size"]) // (elfclass // 8) if bound is not None else None
        return Place(getter=goff, getter_size=min(int(gsym["st_size"]) or getter_code.MAX_BYTES, getter_code.MAX_BYTES),
                     getter_name=name, variable=None if var is None else int(var[1]["st_value"]) - base,
                     variable_name="" if var is None else var[0], build_max=build_max or None,
                     writable=extents(_PF_W), pointer=elfclass // 8,
                     machine=machine_name(str(header["e_machine"])), little=self.little)

    def variable(self, name: str, size: int) -> Place:
        header, structs, elfclass, loads, sections, base = self._layout()
        writable = self._extents(loads, base, _PF_W)
        tables = [t for t in (self._table(sections, n, structs) for n in (".dynsym", ".symtab")) if t is not None]
        sym = next((s for t in tables if (s := self._symbol(t, name, structs, "STT_OBJECT")) is not None), None)
        if sym is None:
            raise _Refused(f"the file does not name {name}: a build parinfo does not know")
        if int(sym["st_size"]) != size:
            raise _Refused(f"{name} in this file is not a {size}-byte variable")
        place = Place(variable=int(sym["st_value"]) - base, variable_name=name, writable=writable,
                      pointer=elfclass // 8, machine=machine_name(str(header["e_machine"])), little=self.little)
        if not place.holds(place.variable or 0, size):
            raise _Refused(f"{name} does not lie in the file's writable data")
        return place

    def defines(self, name: str) -> bool:
        from elftools.elf.elffile import ELFFile

        if self.size > MAX_FILE:
            raise _Refused(f"the file is {self.size} bytes, beyond the {MAX_FILE} parinfo reads")
        with os.fdopen(os.dup(self.fd), "rb") as fh:
            elf = ELFFile(fh)
            header, structs = elf.header, elf.structs
            self.little = bool(elf.little_endian)
            sections = self._sections(header, structs)
        dynsym = self._table(sections, ".dynsym", structs)
        return any(self._symbol(dynsym, name, structs, kind) is not None for kind in ("STT_FUNC", "STT_LOOS"))

    def _segments(self, header: Any, structs: Any) -> list[Any]:
        count, entsize = int(header["e_phnum"]), int(header["e_phentsize"])
        if count > MAX_HEADERS or (count and entsize != structs.Elf_Phdr.sizeof()):
            raise _Refused(f"the file claims {count} program headers of {entsize} bytes")
        raw = self.read(int(header["e_phoff"]), count * entsize, "program header table")
        loads = [structs.Elf_Phdr.parse(raw[i:i + entsize]) for i in range(0, len(raw), entsize)]
        return [p for p in loads if p["p_type"] == "PT_LOAD"]

    def _sections(self, header: Any, structs: Any) -> dict[str, Mapping[str, Any]]:
        """{name: header} of the file's sections (first of a name wins), each checked to lie inside
        the file."""
        count, entsize = int(header["e_shnum"]), int(header["e_shentsize"])
        if count == 0:
            raise _Refused("the file has no section headers (stripped): parinfo finds symbols through them")
        if count > MAX_HEADERS or entsize != structs.Elf_Shdr.sizeof():
            raise _Refused(f"the file claims {count} section headers of {entsize} bytes")
        raw = self.read(int(header["e_shoff"]), count * entsize, "section header table")
        headers = [structs.Elf_Shdr.parse(raw[i:i + entsize]) for i in range(0, len(raw), entsize)]
        index = int(header["e_shstrndx"])
        if not 0 < index < count:
            raise _Refused("the file's section names are missing")
        names = self._strings(headers[index], "section names")
        found: dict[str, Mapping[str, Any]] = {}  # a section's header: its fields by name
        for i, sh in enumerate(headers):
            name = _string(names, int(sh["sh_name"]))
            if name is not None and name not in found:
                found[name] = sh
            found.setdefault(f"#{i}", sh)
        return found

    def _strings(self, sh: Any, what: str) -> bytes:
        size = int(sh["sh_size"])
        if size > self.max_strings or sh["sh_type"] == _SHT_NOBITS:
            raise _Refused(f"the file's {what} are {size} bytes, beyond the {self.max_strings} parinfo reads")
        return self.read(int(sh["sh_offset"]), size, what)

    def _table(self, sections: Mapping[str, Mapping[str, Any]], name: str, structs: Any) -> _Table | None:
        sh = sections.get(name)
        if sh is None:
            return None
        entsize, size = int(sh["sh_entsize"]), int(sh["sh_size"])
        if entsize != structs.Elf_Sym.sizeof() or sh["sh_type"] == _SHT_NOBITS:
            raise _Refused(f"the file's {name} is not a symbol table")
        if size // entsize > self.max_entries:
            raise _Refused(f"the file's {name} claims {size // entsize} entries, beyond the {self.max_entries} "
                           f"parinfo reads")
        strings = sections.get(f"#{int(sh['sh_link'])}")
        if strings is None:
            raise _Refused(f"the file's {name} names no string table")
        return _Table(self.read(int(sh["sh_offset"]), size - size % entsize, name),
                      self._strings(strings, f"{name} names"))

    def _symbol(self, table: _Table | None, name: str, structs: Any, kind: str) -> Any | None:
        """The first defined symbol ``name`` of type ``kind`` in ``table``, or None. Its name's
        offsets in the string table are found first, then an entry that starts with one of them."""
        if table is None or not name:
            return None
        entsize = structs.Elf_Sym.sizeof()
        key, pos = name.encode() + b"\0", 0
        offsets: list[int] = []
        while len(offsets) < MAX_CANDIDATES and (pos := table.strings.find(key, pos)) != -1:
            offsets.append(pos)
            pos += 1
        misses = 0
        for offset in offsets:
            needle, pos = offset.to_bytes(4, "little" if self.little else "big"), 0
            while (pos := table.entries.find(needle, pos)) != -1:  # st_name opens an entry in both classes
                if pos % entsize == 0:
                    sym = structs.Elf_Sym.parse(table.entries[pos:pos + entsize])
                    if sym["st_shndx"] != "SHN_UNDEF" and sym["st_info"]["type"] == kind:
                        return sym
                misses += 1
                if misses > MAX_MISSES:
                    raise _Refused(f"the file's symbol table has too many near-matches for {name}")
                self.tick()
                pos += 1
        return None


def _string(strings: bytes, offset: int) -> str | None:
    end = strings.find(b"\0", offset)
    if offset >= len(strings) or end == -1:
        return None
    return strings[offset:end].decode("ascii", "replace")
