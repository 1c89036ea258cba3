"""Counts in force read from another process's memory, without stopping or tracing it.

Some libraries keep their count in force in a variable that their exported getter returns (the
registry's ``Library.count_symbol``: OpenBLAS's, for one). For each such library mapped into the process:

1. the library file is opened as the process sees it: ``/proc/PID/map_files/START-END`` (the
   mapped file itself, for root: right even when the file was deleted or replaced after load, as
   ``pip install -U`` does), else ``/proc/PID/root`` + its path (another mount namespace or
   container), checked against the inode that ``/proc/PID/maps`` names;
2. the file says where the library's count getter and count variable lie
   (:mod:`parinfo.process.elfcount`: bounded work, every failure a reason), cached by the mapping's
   identity (device and inode as maps names them, size, and a digest of the file's head and tail):
   a scan over many processes that share one numpy parses each file once, and touching a file does
   not force a parse;
3. the load base is the start of the file's mapping at file offset 0 in ``/proc/PID/maps``;
4. the getter's machine code is read from the process's memory and decoded
   (:mod:`parinfo.process.getter_code`): the variable it loads is the count (where the file names
   the variable, it must be that one: a library is believed only when it is what its name says);
5. the variable's bytes are read with ``os.pread`` on ``/proc/PID/mem`` (no ptrace attach, no signal,
   the process runs on) and believed only from 1 to the build's maximum (the registry's bound).

Reading memory needs the same rights as a debugger (the process's user, or root; the kernel may ask
more). Without them the row says ``unknown (permission: run as the process's user or root)``.
"""
from __future__ import annotations

import functools
import os
from dataclasses import field
from typing import Any

from parinfo.machine.procfs import PERMISSION, Denied, Memory, Proc, gone
from parinfo.process import libraries as reg
from parinfo.records.convert import LOCAL
from parinfo.records.record import record
from parinfo.records.source import Kind, Source, unknown
from parinfo.records.unknown import Unknown

__all__ = ["IN_FORCE", "PERMISSION", "CountInForce", "MappedFile", "counts_in_force", "mapped_files",
           "process_machine", "reason", "unknown"]

#: The source of a count read from the process's memory.
IN_FORCE = Source(Kind.MEMORY, "", "in force (read from the process's memory)")


def reason(source: Source) -> str:
    """Why a count is unknown: the detail of an unknown source (its words otherwise)."""
    return source.detail if source.kind is Kind.UNKNOWN else source.text


@record(frozen=True)
class CountInForce:
    """The count in force of one library file mapped into a process.

    ``library``: the registry record's name (openblas); ``path``: the mapped file as the process
    names it; ``count``: the count read from the process's memory, or None when unknown; ``source``:
    :data:`IN_FORCE`, or ``unknown (reason)``; ``deleted``: maps says the file was deleted or replaced
    after load; ``denied``: the kernel's permission rules refused the read (the reason says which).
    """

    library: str
    path: str
    count: int | None
    source: Source
    deleted: bool = field(default=False, metadata=LOCAL)
    denied: bool = field(default=False, metadata=LOCAL)


@record(frozen=True)
class MappedFile:
    """A file mapped into a process: its first mapping at file offset 0 (the load base) and the inode
    the kernel says it is."""

    path: str
    start: int
    end: int
    inode: int
    deleted: bool
    device: str = ""


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
            found[path] = MappedFile(path, int(lo, 16), int(hi, 16), int(parts[4]), deleted, parts[3])
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
# Where the count lies in the file, located once per mapped file

_CACHE: dict[tuple[Any, ...], Any] = {}
#: Located files kept; the oldest is forgotten past this (files come and go on a long-running host).
_CACHE_MAX = 512
_HEAD_TAIL = 1 << 14


def _place(fd: int, m: MappedFile, spec: reg.CountSymbol) -> Any:
    """Where ``spec``'s getter and variable lie in the file open on ``fd`` (an
    :class:`parinfo.process.elfcount.Place`), cached by the mapping's identity: the device and inode
    maps names, the size, and a digest of the file's first and last 16 KiB (the headers and, in the
    files the linker writes, the section table): a new file or version gets its own entry, a touch
    does not. What the place says is checked against the process's memory on every read, so a change
    the digest misses cannot make a wrong count believed."""
    import hashlib

    from parinfo.process import elfcount

    try:
        size = os.fstat(fd).st_size
        digest = hashlib.blake2b(os.pread(fd, _HEAD_TAIL, 0) + os.pread(fd, _HEAD_TAIL, max(size - _HEAD_TAIL, 0)),
                                 digest_size=16).digest()
    except OSError as exc:
        return elfcount.Place(missing=f"cannot read the library file: {exc.strerror or exc}")
    key = (m.device, m.inode, size, digest, spec)
    found = _CACHE.get(key)
    if found is None:
        found = elfcount.locate(fd, spec)
        if found.retry:
            return found
        while len(_CACHE) >= _CACHE_MAX:
            del _CACHE[next(iter(_CACHE))]
        _CACHE[key] = found
    return found


# ---------------------------------------------------------------------------------------------
# Reading one process (its files through the /proc front)


def _row(proc: Proc, m: MappedFile, rec: reg.Library, spec: reg.CountSymbol, mem: Memory,
         machine: str) -> CountInForce:
    fd, why = proc.open_mapping(m.start, m.end, m.path, m.inode, m.deleted)
    if fd is None:
        return CountInForce(rec.name, m.path, None, unknown(why), m.deleted, isinstance(why, Denied))
    try:
        place = _place(fd, m, spec)
    finally:
        os.close(fd)
    if place.missing is not None:
        found: int | Unknown = Unknown(place.missing)
    elif place.machine != machine:  # mapped as data: the process never runs its code
        found = Unknown(f"a library built for {place.machine}, not this process's {machine}")
    else:
        found = _count(m, rec, spec, place, mem)
    if isinstance(found, Unknown):
        return CountInForce(rec.name, m.path, None, unknown(found.why), m.deleted, isinstance(found.why, Denied))
    return CountInForce(rec.name, m.path, found, IN_FORCE, m.deleted)


def _count(m: MappedFile, rec: reg.Library, spec: reg.CountSymbol, place: Any, mem: Memory) -> int | Unknown:
    """The count in force, or why it is not believed: the getter's code in the process's memory
    must load the variable (the one the file names, when it names one) from the library's own data,
    and the value must lie between 1 and the build's maximum."""
    from parinfo.process.getter_code import loaded_address

    entry = m.start + place.getter
    code = mem.read(entry, place.getter_size)
    if isinstance(code, Unknown):
        return code
    load = loaded_address(code, entry, place.machine, place.little)
    if isinstance(load, Unknown):
        return Unknown(f"{place.getter_name}: {load.why}; not believed to be {rec.label}")
    address, through = load
    if through:  # a GOT slot of the library's own data, holding the variable's address
        if not place.holds(address - m.start, place.pointer):
            return Unknown(f"{place.getter_name} loads through a slot outside the library's data: "
                           f"not believed to be {rec.label}")
        slot = mem.read(address, place.pointer)
        if isinstance(slot, Unknown):
            return slot
        address = int.from_bytes(slot, "little" if place.little else "big")
    offset = address - m.start
    if place.variable is not None and offset != place.variable:
        return Unknown(f"{place.getter_name} loads another variable than the file's {place.variable_name}: "
                       f"not believed to be {rec.label}")
    if not place.holds(offset, spec.size):
        return Unknown(f"{place.getter_name} loads from outside the library's data: not believed to be {rec.label}")
    data = mem.read(address, spec.size)
    if isinstance(data, Unknown):
        return data
    value = int.from_bytes(data, "little" if place.little else "big", signed=True)
    if value == spec.unset:
        return Unknown("the library has not set its count up yet")
    top = min(place.build_max or spec.max_count, spec.max_count)
    if not 1 <= value <= top:
        bound = "the build's maximum" if place.build_max and place.build_max <= spec.max_count else "parinfo's bound"
        return Unknown(f"the variable holds {value}, beyond 1..{top}: {bound} for {rec.label}")
    return value


@functools.cache
def _symbol_prefixes() -> tuple[str, ...]:
    """The file name prefixes of the libraries whose record names a count variable."""
    return tuple(p for rec in reg.records() if rec.count_symbol is not None for p in rec.prefixes)


def _library_of(path: str) -> reg.Library | None:
    rec = reg.by_prefix(os.path.basename(path).lower())
    return rec if rec is not None and rec.count_symbol is not None else None


def counts_in_force(proc: Proc, maps_text: str | None = None) -> list[CountInForce]:
    """One row per library file mapped into process ``proc`` whose registry record names a count
    variable (``Library.count_symbol``), in load order: its count in force read from the process's
    memory, or None with the reason in ``source``. The process is neither stopped nor traced.

    ``maps_text`` is the process's /proc/PID/maps when the caller has read it already. Raises
    :class:`parinfo.process.tasks.ProcessGone` when the process does not exist or ends during the
    read, and :class:`parinfo.process.tasks.NoAccess` when its maps cannot be read (then nothing
    about its libraries is known).
    """
    if maps_text is None:
        proc.check()
        maps_text = proc.maps().decode("utf-8", "surrogateescape")
    elif not proc.exists():
        raise gone(proc.pid or 0)
    wanted = [(m, rec) for m in mapped_files(maps_text, _symbol_prefixes())
              if (rec := _library_of(m.path)) is not None]
    if not wanted:
        return []
    if proc.stat().dead:
        proc.follow_live_thread()
    with proc.memory() as mem:
        machine = process_machine(maps_text, mem)
        return [_row(proc, m, rec, rec.count_symbol, mem, machine) for m, rec in wanted
                if rec.count_symbol is not None]


def process_machine(maps_text: str, mem: Memory) -> str:
    """The machine whose code the process runs, named as :class:`parinfo.process.elfcount.Place`
    names it: that of the vDSO the kernel mapped into it (made for the process's ABI, so a 32-bit
    process's is 32-bit), else this machine's."""
    import platform

    from elftools.elf.enums import ENUM_E_MACHINE

    from parinfo.process.elfcount import machine_name

    at = maps_text.find("[vdso]")
    if at != -1:
        line = maps_text[maps_text.rfind("\n", 0, at) + 1:at]
        try:
            head = mem.read(int(line.partition("-")[0], 16), 20)
        except ValueError:
            head = b""
        if isinstance(head, bytes) and head.startswith(b"\x7fELF") and head[5] in (1, 2):
            number = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
            name = next((k for k, v in ENUM_E_MACHINE.items() if v == number and k.startswith("EM_")), None)
            if name is not None:
                return machine_name(name)
    return platform.machine()


def cache_size() -> int:
    """How many located files are cached (for tests and the host scan's figures)."""
    return len(_CACHE)

