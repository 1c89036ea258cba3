"""The count torch.set_num_threads last set in this process, in any thread, or that it was never
called: what a thread takes at its first torch op (else torch's default), and which no getter gives.

torch keeps it in a variable of its own library (``Torch.last_set``, in ``libtorch_cpu``'s symbol
table); this module finds it there (:func:`parinfo.process.elfcount.variable`: bounded reads of the
file, its large tables allowed since this process loaded and runs it) and reads its four bytes
through ``/proc/self/mem`` (an address outside the mapping is an error there, never a crash). The
place is found once per file; the value is read on every call. Every failure is an
:class:`~parinfo.records.unknown.Unknown` with its reason.
"""
from __future__ import annotations

import os
import sys

from parinfo.process import libraries as reg
from parinfo.process.elfcount import Place
from parinfo.records.unknown import Unknown
from parinfo.safe_file import open_file

#: The torch library file's tables are far larger than a count-holding library's (torch 2.13:
#: 530,000 symbols, 76 MB of names); parinfo reads them only for the file this process loaded.
MAX_ENTRIES = 1 << 21
MAX_STRINGS = 256 << 20
BUDGET_S = 2.0

_PLACES: dict[tuple[str, int, int], Place] = {}


def _mapped(stem: str) -> tuple[str, int] | Unknown:
    """The path of the loaded file whose name starts with ``stem`` and the address it is loaded at
    (its mapping at file offset 0), from /proc/self/maps."""
    try:
        with open("/proc/self/maps", "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        return Unknown.of(exc)
    for line in raw.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or int(parts[2], 16) != 0:
            continue
        path = parts[5].strip().decode("utf-8", "surrogateescape")
        if os.path.basename(path).startswith(stem):
            return path, int(parts[0].partition(b"-")[0], 16)
    return Unknown(f"no {stem} file is loaded")


def _place(path: str, spec: reg.CountSymbol) -> Place:
    from parinfo.process.elfcount import variable

    try:
        st = os.stat(path)
    except OSError as exc:
        return Place(missing=str(Unknown.of(exc)))
    key = (path, st.st_ino, int(st.st_mtime))
    if key not in _PLACES:
        try:
            fd = open_file(path, follow=True)  # a regular file, never a FIFO or device put in its place
        except OSError as exc:
            return Place(missing=str(Unknown.of(exc)))
        try:
            _PLACES[key] = variable(fd, spec.names[0], spec.size, max_entries=MAX_ENTRIES,
                                    max_strings=MAX_STRINGS, budget_s=BUDGET_S)
        finally:
            os.close(fd)
    return _PLACES[key]


def last_set_count() -> int | Unknown | None:
    """The count torch.set_num_threads last set in this process (any thread), None when it was
    never called, or why it cannot be told (torch not imported, another build)."""
    torch = reg.family(reg.Torch)
    if str(torch.module) not in sys.modules:
        return Unknown("torch is not imported")
    mapped = _mapped(torch.last_set_file)
    if isinstance(mapped, Unknown):
        return mapped
    path, base = mapped
    place = _place(path, torch.last_set)
    if place.missing is not None or place.variable is None:
        return Unknown(place.missing or "no place found")
    try:
        fd = os.open("/proc/self/mem", os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw = os.pread(fd, torch.last_set.size, base + place.variable)
        finally:
            os.close(fd)
    except OSError as exc:
        return Unknown.of(exc)
    if len(raw) != torch.last_set.size:
        return Unknown("short read of torch's count")
    value = int.from_bytes(raw, "little" if place.little else "big", signed=True)
    if value == torch.last_set.unset:
        return None
    return value if 0 < value <= torch.last_set.max_count else Unknown(f"torch's count reads {value}")
