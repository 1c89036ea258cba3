"""The version a library file states in its own bytes, read without loading it.

OpenBLAS keeps the text its ``openblas_get_config`` returns ("OpenBLAS 0.3.29 DYNAMIC_ARCH ...") in
the file, the word after the registry's ``version_after`` (:class:`~parinfo.process.library_parts.
NativeReads`). A process read from outside (``show --pid``, ``host``) and the pytest plugin's header
cannot ask the loaded copy, so they read this: the same version threadpoolctl reports inside. The
file is mapped, not read into memory (a scipy-openblas build is some 25 MB), and each file is read
once while its inode, size and modification time stay the same.
"""
from __future__ import annotations

import mmap
import os
import re

import parinfo.safe_file as safe_file
from parinfo.process import libraries as reg

_VERSION = rb" (\d+\.\d+[\w.+-]*)"  # "OpenBLAS 0.3.29", "OpenBLAS 0.3.31.188.0", "OpenBLAS 0.3.21.dev"


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


def _read(path: str, marker: str) -> str | None:
    try:
        fd = safe_file.open_file(path, follow=True)
    except OSError:
        return None
    try:
        with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as view:
            found = re.search(re.escape(marker.encode()) + _VERSION, view)
            return found.group(1).decode() if found else None
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
