"""The version a library file states in its own bytes, read without loading it.

OpenBLAS keeps the text its ``openblas_get_config`` returns ("OpenBLAS 0.3.29 DYNAMIC_ARCH ...") in
the file, the word after the registry's ``version_after`` (:class:`~parinfo.process.library_parts.
NativeReads`). A process read from outside (``show --pid``, ``host``) and the pytest plugin's header
cannot ask the loaded copy, so they read this: the same version threadpoolctl reports inside. The
file may be anyone's: it is read in bounded pieces (at most :data:`MAX_FILE` bytes, never mapped),
the version is at most 40 characters of ``[A-Za-z0-9_.+-]``, and each file is read once while its
inode, size and modification time stay the same.
"""
from __future__ import annotations

import os
import re

import parinfo.safe_file as safe_file
from parinfo.process import libraries as reg

_VERSION = rb" (\d+\.\d+[\w.+-]{0,40})"  # "OpenBLAS 0.3.29", "OpenBLAS 0.3.31.188.0", "OpenBLAS 0.3.21.dev"


def version_in_file(path: str | None, library: str) -> str | None:
    """The version ``library``'s file at ``path`` states, or None (a library whose version the
    registry cannot find in its file, a file gone or unreadable, no version text in it)."""
    rec = reg.find(library)
    marker = rec.native.version_after if rec is not None and rec.native is not None else ""
    if not path or not marker:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (marker, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)  # one file seen through many /proc/PID/root
    if key not in _READ:
        if len(_READ) >= _KEPT:
            _READ.clear()
        _READ[key] = _read(path, marker) if st.st_size > 0 else None
    return _READ[key]


_READ: dict[tuple[str, int, int, int, int], str | None] = {}
_KEPT = 256


#: Larger files are not read (an OpenBLAS build is 20-40 MB); the file is read in pieces of CHUNK.
MAX_FILE = 512 << 20
CHUNK = 4 << 20


def _read(path: str, marker: str) -> str | None:
    """The version after ``marker`` in the file, read in bounded pieces through one descriptor
    (never mapped: a file another user shortens while it is read would kill a mapped reader with
    SIGBUS; here it only ends the read)."""
    try:
        fd = safe_file.open_file(path, follow=True)
    except OSError:
        return None
    pattern = re.compile(re.escape(marker.encode()) + _VERSION)
    keep = len(marker) + 64  # a match across two pieces is found in the next
    try:
        size = os.fstat(fd).st_size
        if size > MAX_FILE:
            return None
        offset, tail = 0, b""
        while offset < size:
            piece = os.pread(fd, CHUNK, offset)
            if not piece:
                return None
            found = pattern.search(tail + piece)
            if found:
                return found.group(1).decode()
            tail, offset = (tail + piece)[-keep:], offset + len(piece)
        return None
    except OSError:
        return None
    finally:
        os.close(fd)
