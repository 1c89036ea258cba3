"""Counts ``parinfo.apply()`` puts in force in a framework imported after it: torch's, at import.

torch's intra-op count follows MKL_NUM_THREADS, which apply() sets, but its inter-op count reads no
variable: a profile applied before ``import torch`` reaches it only when torch is imported. This
module watches for that import with the start-up hook's own mechanism
(parinfo/profiles/hook/_parinfo_import_watch.py, loaded by path as the hook loads it), sets both
counts the moment torch's module has executed, before any op can run; the watch records them, so
reports name the profile as their source (:func:`parinfo.process.provenance.set_at_import`). A count
torch refuses then is one ``parinfo: not in force: ...`` line on stderr, as in a launched program.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import threading
from types import ModuleType
from typing import Any

from parinfo.process import libraries as reg
from parinfo.process.provenance import WATCH_MODULE
from parinfo.profiles.applied import AtImport
from parinfo.records.source import Kind, Source

_WATCH_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hook", WATCH_MODULE + ".py")
# Who set torch's inter-op count, and what else a program that wants its own count can do.
_HOW = ("parinfo.apply()", "call torch.set_num_interop_threads before parinfo.apply()")

_lock = threading.Lock()
_pending: list[Any] = []  # the watcher the last apply() installed, until torch is imported


def watch_module() -> ModuleType:
    """The watch-on-import module, loaded once by path (the start-up hook may have loaded it already)."""
    loaded = sys.modules.get(WATCH_MODULE)
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(WATCH_MODULE, _WATCH_PATH)
    if spec is None or spec.loader is None:
        raise ImportError(f"parinfo's import watch is missing: {_WATCH_PATH}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[WATCH_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[WATCH_MODULE]
        raise
    return module


def _torch_names() -> tuple[str, str, str, str]:
    """torch's setter, getter, inter-op setter and inter-op getter, as its registry record names them."""
    rec = reg.family(reg.Torch)
    calls, interop = rec.calls or reg.Calls(), rec.interop_calls or reg.Calls()
    return calls.setter, calls.getter, interop.setter, interop.getter


def source(profile: str, key: str) -> Source:
    """The source of a torch count that profile ``profile`` (its key ``key``) set through apply()
    with torch imported (at torch's import, the watch's record says so: provenance.set_at_import)."""
    detail = f"{profile} ({key})"
    return Source(Kind.PROFILE, detail, f"profile {detail}, set by parinfo.apply in this process")


def torch_when_imported(profile: str, intra: int | None, inter: int) -> AtImport:
    """Set torch's counts (``intra`` None: leave it to its variables) as soon as ``import torch``
    finishes; replaces what an earlier apply() asked for. Returns what apply() reports."""
    watch = watch_module()

    def fire(torch: ModuleType) -> None:
        from parinfo.process import setter

        with _lock:
            _pending.clear()
        watch.set_torch(torch, intra, inter, _torch_names(), setter, profile, _HOW)  # it records what it set

    rec = reg.family(reg.Torch)
    with _lock:
        for old in _pending:
            old.cancel()
        _pending[:] = [watch.watch(str(rec.module), fire)]
    return AtImport(rec.name, inter, rec.interop_call(), intra, rec.set_call())
