"""What a thread's stack words say, read from another process: its maps (:func:`parse_maps`,
:class:`Maps`), its stack pointer (:func:`stack_pointer`), its C library thread block
(:func:`block_at`, :func:`thread_block_end`) and the library its outermost frames start in
(:func:`owner_by_stack`, :func:`owner_of_file`). :mod:`parinfo.process.thread_owners` (threads
that wait) and :mod:`parinfo.process.thread_blocks` (threads that keep running) both read stacks
with them.
"""
from __future__ import annotations

import bisect
import os
import re
import struct
from typing import NamedTuple

from parinfo.process import libraries as reg
from parinfo.process.pools import owner_of
from parinfo.records.unknown import Unknown

#: Owner of threads the interpreter started (and of a stack that starts in the interpreter).
PYTHON = "python"

#: The most of a stack read, from its top: the outermost frames and glibc's thread block fit in a
#: few KiB; a deep stack is not read further.
WINDOW = 1 << 16

#: Files the start of every thread passes through, which own none: the C and C++ runtimes, the loader
#: (patterns compiled at first use, by re's cache: `parinfo show` of a one-thread process needs none).
_RUNTIME_FILES = (r"(libc|libpthread|ld-linux[-\w.]*|ld-musl[-\w.]*|libstdc\+\+|libc\+\+|libc\+\+abi"
                   r"|libgcc_s|libdl|libm)([-.].*)?$")
_INTERPRETER_FILES = r"(python[\d.]*|libpython[\d.]+.*)$"

#: Top-level folders of site-packages whose name is not their library's module name.
_PACKAGE_ALIASES = {"opencv_python_headless": "opencv", "opencv_python": "opencv", "cv2": "opencv", "jaxlib": "jax"}


class Region(NamedTuple):
    """One line of /proc/PID/maps: an address range, whether it is executable, the file it maps, its
    permissions ("rw-p") (a NamedTuple: a maps file of a large process has thousands of lines)."""

    start: int
    end: int
    executable: bool
    path: str
    perms: str = ""


def parse_maps(raw: bytes) -> list[Region]:
    """The mappings of a maps file, sorted by start; malformed lines are skipped."""
    out = []
    for line in raw.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        lo, _, hi = parts[0].partition(b"-")
        try:
            start, end = int(lo, 16), int(hi, 16)
        except ValueError:
            continue
        path = parts[5].strip().decode("utf-8", "surrogateescape") if len(parts) > 5 else ""
        out.append(Region(start, end, b"x" in parts[1], path, parts[1].decode("ascii", "replace")))
    out.sort(key=lambda m: m.start)
    return out


class Maps:
    """A process's mappings, searched by address."""

    def __init__(self, mappings: list[Region]) -> None:
        self.mappings = mappings
        self._starts = [m.start for m in mappings]

    def at(self, address: int) -> Region | None:
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0 and self.mappings[i].start <= address < self.mappings[i].end:
            return self.mappings[i]
        return None


class Running(Unknown):
    """A thread that was running when asked: its stack pointer is known only while it waits."""


def stack_pointer(raw: bytes | None) -> int | Unknown:
    """The stack pointer in a thread's ``syscall`` file ("NR args... SP PC", "-1 SP PC", "running")."""
    if raw is None:
        return Unknown("its syscall file cannot be read")
    words = raw.split()
    if words[:1] == [b"running"]:
        return Running("it was running, and a stack is read only while its thread waits")
    try:
        return int(words[-2], 16)
    except (IndexError, ValueError):
        return Unknown("its syscall file is not in the kernel's format")


def owner_of_file(path: str) -> str:
    """The library that owns code in ``path``: a native family ("openblas (numpy)"), a Python
    module's family ("pyarrow"), or "other (package)"."""
    base = os.path.basename(path)
    native = reg.by_prefix(base.lower())
    if native is not None and native.kind is reg.LibraryKind.NATIVE:
        return f"{native.name} ({owner_of(path)})"
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        if part in ("site-packages", "dist-packages"):
            top = parts[i + 1].split(".", 1)[0].lstrip("_")
            top = _PACKAGE_ALIASES.get(top, top)
            for lib in reg.python_libraries():
                if top in (lib.name, lib.module) or top.startswith(f"{lib.name}_"):
                    return lib.name
            return _printable(f"other ({top})")
    return _printable(f"other ({base})")


def owner_library(owner: str) -> str:
    """The library part of an owner :func:`owner_of_file` wrote ("libgomp (scikit-learn)" -> "libgomp")."""
    return owner.split(" (", 1)[0]


def _printable(label: str) -> str:
    """``label`` with the bytes of a file name that are not UTF-8 as U+FFFD (JSON and text take it)."""
    return label.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


#: How far above its thread block (glibc's ``struct pthread``, which begins with its own address
#: twice: ``tcb`` and ``self``) a thread's own words may lie: the block itself (about 2.3 KiB, the
#: start routine among its fields) and its alignment.
BLOCK_SPAN = 4096


def block_at(words: bytes, base: int) -> int | None:
    """The address of the first C library thread block in ``words`` (read from address ``base``): the
    first address A whose word is A and whose third word is A again (glibc's ``tcb`` and ``self``)."""
    count = len(words) // 8
    values = struct.unpack(f"<{count}Q", words[:count * 8])
    for i in range(count - 2):
        address = base + 8 * i
        if values[i] == address and values[i + 2] == address:
            return address
    return None


def thread_block_end(words: bytes, base: int, mapping_end: int) -> int | None:
    """The end of the thread's own words in ``words`` (read from address ``base``, its stack
    pointer, upward): its C library thread block (:func:`block_at`) plus :data:`BLOCK_SPAN`, at
    most ``mapping_end``. None where no such block is in ``words`` (another C library, or frames
    deeper than the window). Thread stacks without guard pages are merged by the kernel into one
    mapping, whose top is then another thread's block: the stack pointer, not the mapping, finds a
    thread's own."""
    address = block_at(words, base)
    if address is None:
        return None
    return min(mapping_end, address + BLOCK_SPAN, base + len(words) // 8 * 8)


def owner_by_stack(words: bytes, maps: Maps, interpreter: str | None) -> str | Unknown:
    """The owner of the first file, from the top of a stack window down, that code is mapped from
    and that is neither the C or C++ runtime nor the interpreter met too early. The top of a
    thread's stack holds the C library's thread block (the start routine among its fields) and its
    static TLS, where a word may point into the interpreter without being code it runs (a size that
    falls in a non-PIE interpreter's text: Python 3.14's); below lie the thread's own frames, the
    outermost first. So the interpreter decides only once a runtime word has been met (the start
    routine of a C++ std::thread, or the C library's start_thread frame): a library met first, in the
    block or in the frames, owns the thread."""
    count = len(words) // 8
    seen_interpreter = past_runtime = False
    for word in reversed(struct.unpack(f"<{count}Q", words[:count * 8])):
        m = maps.at(word)
        if m is None or not m.executable or not m.path.startswith("/"):
            continue
        base = os.path.basename(m.path)
        if re.match(_RUNTIME_FILES, base):
            past_runtime = True
            continue
        if m.path == interpreter or re.match(_INTERPRETER_FILES, base):
            if past_runtime:
                return PYTHON
            seen_interpreter = True
            continue
        return owner_of_file(m.path)
    return PYTHON if seen_interpreter else Unknown("no library code at the top of its stack")
