"""A process's maps file, read at most once a report, and the loader's count of loads in this process.

The maps file of a process holding ONNX Runtime, Arrow, Polars and the rest is some 1,500 lines the
kernel writes out on each read (about 2 ms): one report reads it once, for the pools and the thread
owners alike (:class:`MapsOnce`), and only when something may have changed. What tells that here is
the dynamic loader: glibc and musl count every object loaded and unloaded (``dlpi_adds`` and
``dlpi_subs`` of ``dl_iterate_phdr``); while both stay the same, no library was loaded or unloaded
since the last read (:func:`loader_generation`). :func:`current_objects` is this process's loaded
objects, read again only then.
"""
from __future__ import annotations

import functools
import os
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


#: This process's loaded objects at the loader generation they were read at, with the identity
#: (device, inode) of each thread runtime among them then (see :func:`current_objects`).
_OBJECTS: list[tuple[tuple[int, int], list[str], dict[str, tuple[int, int]]]] = []


def current_objects(maps: MapsOnce | None = None) -> list[str]:
    """This process's loaded objects (:func:`parinfo.process.pools.loaded_objects`), read from
    ``maps`` (this report's read of /proc/self/maps, default a read of its own) only when the
    dynamic loader has loaded or unloaded an object since the last read (:func:`loader_generation`),
    or a thread runtime's file was replaced on disk since (a package upgrade: the maps then mark it
    deleted, and its pool row says so)."""
    from parinfo.machine.procfs import Proc
    from parinfo.process.pools import DELETED, loaded_objects, runtimes_among

    generation = loader_generation()
    if generation is not None and _OBJECTS and _OBJECTS[0][0] == generation and \
            _file_ids(_OBJECTS[0][2]) == _OBJECTS[0][2]:
        return list(_OBJECTS[0][1])
    raw = (maps or MapsOnce(Proc.of(None))).raw()
    objects = [] if isinstance(raw, Unknown) else loaded_objects(raw.decode("utf-8", "replace"))
    if generation is not None and not isinstance(raw, Unknown):
        runtimes = [path for path, _ in runtimes_among(tuple(objects)) if not path.endswith(DELETED)]
        _OBJECTS[:] = [(generation, objects, _file_ids(dict.fromkeys(runtimes, (0, 0))))]
    return list(objects)


def _file_ids(paths: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """(device, inode) of each file of ``paths`` now ((0, 0): gone)."""
    out = {}
    for path in paths:
        try:
            st = os.stat(path)
            out[path] = (st.st_dev, st.st_ino)
        except OSError:
            out[path] = (0, 0)
    return out
