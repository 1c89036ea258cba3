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

import errno
import functools
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
    deleted: bool = False

    @property
    def mapped_as(self) -> str:
        """The file's name as /proc/PID/maps shows it (" (deleted)" added when it was deleted or
        replaced after load): the key of the pool rows made from maps."""
        return f"{self.path} (deleted)" if self.deleted else self.path

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
# Reading one process


class _Gone(Exception):
    """The process ended while it was read."""


def _open_file(pid: int, m: MappedFile) -> tuple[int | None, str]:
    """The library file as process ``pid`` sees it, open read-only (and checked to be the mapped
    inode), or (None, why not)."""
    # map_files is the mapped file itself (root only): no path is resolved, so a container cannot
    # point parinfo elsewhere with a symlink. Through /proc/PID/root the inode must match the one
    # maps names (not the device: overlayfs shows the underlying file's device there).
    candidates = [f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}"]
    candidates += [] if m.deleted else [f"/proc/{pid}/root{m.path}"]
    why = "cannot open the library file as the process sees it"
    for candidate in candidates:
        try:
            fd = os.open(candidate, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except (ProcessLookupError, FileNotFoundError):
            if not os.path.isdir(f"/proc/{pid}"):
                raise _Gone from None
            continue
        except PermissionError:
            why = PERMISSION if not m.deleted else ("the library file was deleted or replaced after load: only root "
                                                    "can open the copy the process maps")
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
        return CountInForce(rec.name, m.path, None, unknown(why), m.deleted)
    try:
        place = _place(fd, m, spec)
    finally:
        os.close(fd)
    found = place.missing if place.missing is not None else _count(m, rec, spec, place, mem)
    if isinstance(found, str):
        return CountInForce(rec.name, m.path, None, unknown(found), m.deleted)
    return CountInForce(rec.name, m.path, found, IN_FORCE, m.deleted)


def _count(m: MappedFile, rec: reg.Library, spec: reg.CountSymbol, place: Any, mem: _Memory) -> int | str:
    """The count in force, or why it is not believed: the getter's code in the process's memory
    must load the variable (the one the file names, when it names one) from the library's own data,
    and the value must lie between 1 and the build's maximum."""
    from parinfo.process.getter_code import loaded_address

    entry = m.start + place.getter
    code = mem.read(entry, place.getter_size)
    if isinstance(code, str):
        return code
    load = loaded_address(code, entry, place.machine, place.little)
    if isinstance(load, str):
        return f"{place.getter_name}: {load}; not believed to be {rec.label}"
    address, through = load
    if through:  # a GOT slot of the library's own data, holding the variable's address
        if not place.holds(address - m.start, place.pointer):
            return (f"{place.getter_name} loads through a slot outside the library's data: "
                    f"not believed to be {rec.label}")
        slot = mem.read(address, place.pointer)
        if isinstance(slot, str):
            return slot
        address = int.from_bytes(slot, "little" if place.little else "big")
    offset = address - m.start
    if place.variable is not None and offset != place.variable:
        return (f"{place.getter_name} loads another variable than the file's {place.variable_name}: "
                f"not believed to be {rec.label}")
    if not place.holds(offset, spec.size):
        return f"{place.getter_name} loads from outside the library's data: not believed to be {rec.label}"
    data = mem.read(address, spec.size)
    if isinstance(data, str):
        return data
    value = int.from_bytes(data, "little" if place.little else "big", signed=True)
    if value == spec.unset:
        return "the library has not set its count up yet"
    top = min(place.build_max or spec.max_count, spec.max_count)
    if not 1 <= value <= top:
        bound = "the build's maximum" if place.build_max and place.build_max <= spec.max_count else "parinfo's bound"
        return f"the variable holds {value}, beyond 1..{top}: {bound} for {rec.label}"
    return value


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
    from parinfo.process import tasks

    if maps_text is None:
        try:
            with open(f"/proc/{int(pid)}/maps", "rb") as fh:
                maps_text = fh.read().decode("utf-8", "surrogateescape")
        except (FileNotFoundError, ProcessLookupError):
            raise tasks.gone(pid) from None
        except OSError as exc:
            raise tasks.no_access(pid, f"/proc/{pid}/maps", exc) from None
    wanted = [(m, rec) for m in mapped_files(maps_text, _symbol_prefixes())
              if (rec := _library_of(m.path)) is not None]
    mem = _Memory(pid)
    try:
        return [_row(pid, m, rec, rec.count_symbol, mem) for m, rec in wanted if rec.count_symbol is not None]
    except _Gone:
        raise tasks.gone(pid) from None
    finally:
        mem.close()


def cache_size() -> int:
    """How many located files are cached (for tests and the host scan's figures)."""
    return len(_CACHE)

