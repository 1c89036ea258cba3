"""A process's maps file, read at most once a report, and the loader's count of loads in this process.

The maps file of a process holding ONNX Runtime, Arrow, Polars and the rest is some 1,500 lines the
kernel writes out on each read (about 2 ms): one report reads it once, for the pools and the thread
owners alike (:class:`MapsOnce`), and only when something may have changed. What tells that here is
the dynamic loader: glibc and musl count every object loaded and unloaded (``dlpi_adds`` and
``dlpi_subs`` of ``dl_iterate_phdr``); while both stay the same, no library was loaded or unloaded
since the last read (:func:`loader_generation`).
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from parinfo.records.unknown import Unknown

if TYPE_CHECKING:
    from parinfo.machine.procfs import Proc


class MapsOnce:
    """The maps file of one process, read on first use and kept for one report."""

    def __init__(self, proc: Proc) -> None:
        self.proc = proc
        self._raw: bytes | Unknown | None = None

    def raw(self) -> bytes | Unknown:
        """Its bytes, or Unknown(why) when they may not be read; ProcessGone when it has ended."""
        if self._raw is None:
            from parinfo.machine.procfs import NoAccess

            try:
                self._raw = self.proc.maps()
            except NoAccess as exc:
                self._raw = Unknown(str(exc))
        return self._raw


@functools.cache
def _iterate() -> tuple[Any, Any, Any] | None:
    """(dl_iterate_phdr, the callback type, the info struct) from the C library, or None where there is none."""
    import ctypes

    class Info(ctypes.Structure):
        _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p), ("phdr", ctypes.c_void_p),
                    ("phnum", ctypes.c_uint16), ("adds", ctypes.c_ulonglong), ("subs", ctypes.c_ulonglong)]

    callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Info), ctypes.c_size_t, ctypes.c_void_p)
    try:
        func = ctypes.CDLL(None).dl_iterate_phdr
    except (OSError, AttributeError):
        return None
    func.argtypes = [callback, ctypes.c_void_p]
    func.restype = ctypes.c_int
    return func, callback, Info


def loader_generation() -> tuple[int, int] | None:
    """(objects loaded, objects unloaded) since this process started, by its dynamic loader; None
    where the loader does not count them (the answer is then to read the maps again)."""
    found = _iterate()
    if found is None:
        return None
    func, callback_type, info_type = found
    import ctypes

    out: list[tuple[int, int]] = []
    end = info_type.subs.offset + info_type.subs.size

    def first(info: Any, size: int, _: Any) -> int:
        if size >= end:
            out.append((info.contents.adds, info.contents.subs))
        return 1  # the counters are the same in every entry: the first is enough

    func(callback_type(first), ctypes.c_void_p())
    return out[0] if out else None
