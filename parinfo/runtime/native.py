"""Native pools (OpenBLAS, MKL, BLIS, OpenMP runtimes) and torch: the push and the budget.

Push: after ``set_num_threads``/``configure`` the intra-op count goes into every loaded native pool
through one cached threadpoolctl controller, and into torch when torch is imported. Libraries
loaded later get it at the next parallel region or task (the controller is rebuilt when
``sys.modules`` grew).

Budget: every thread running an inter-op task or taking part in a parallel region is a *lane*.
While two or more lanes run, each lane's native threads are capped at ``usable_cpus // lanes``
(at least 1) so lanes x native threads stays within the usable CPUs. Two kinds of pools need two
mechanisms:

* per-thread pools (OpenMP runtimes and torch: the limit is an ICV of the calling thread): each
  lane sets its own thread's limit when it starts, only if it differs from what that thread has;
* process-wide pools (OpenBLAS with pthreads, MKL, BLIS): the cap is set once when the lane count
  rises and restored when the last lane ends (not on every dip, so busy pools do not flap).
"""
from __future__ import annotations

import sys
import threading
from typing import Any

from parinfo.runtime import settings

_lock = threading.RLock()  # serialises changes of native limits
_ctrl: Any = None
_ctrl_modules = -1
_torch_base: int | None = None  # torch's count when the current cap began

_pushed: int | None = None  # the intra-op count pushed by set_num_threads/configure
_push_record: dict[str, Any] | None = None
_pushed_to: set[str] = set()  # library paths (and "torch") that have the pushed count
_push_ctrl: Any = None  # the controller the last push went through
_global_orig: dict[str, int] = {}  # library path -> count before parinfo touched it
_global_applied: dict[str, int] = {}

_running = 0  # lanes now running
_level: int | None = None  # current cap per lane, None when not capped
_key = object()  # replaced whenever the pushed count or the cap changes
_usable = 0
_blk = threading.Lock()

_tl = threading.local()


def _controller() -> Any:
    """threadpoolctl's controller, built once and rebuilt when new modules were imported."""
    global _ctrl, _ctrl_modules
    n = len(sys.modules)
    if _ctrl is None or n != _ctrl_modules:
        from parinfo.process.tpc import threadpoolctl

        _ctrl = threadpoolctl().ThreadpoolController()
        _ctrl_modules = n
    return _ctrl


_split: tuple[Any, tuple[list[Any], list[Any]]] = (None, ([], []))


def _libs() -> tuple[list[Any], list[Any]]:
    """(per-thread libraries, process-wide libraries) of the cached controller."""
    global _split
    try:
        ctrl = _controller()
    except Exception:  # no threadpoolctl view of this process: nothing to steer
        return [], []
    if _split[0] is not ctrl:
        per_thread, process = [], []
        for lib in ctrl.lib_controllers:
            layer = getattr(lib, "threading_layer", None)
            if lib.user_api == "openmp" or layer == "openmp":
                per_thread.append(lib)
            else:
                process.append(lib)
        _split = (ctrl, (per_thread, process))
    return _split[1]


def _torch() -> Any:
    return sys.modules.get("torch")


def _describe(lib: Any, n: int) -> dict[str, Any]:
    return {"user_api": lib.user_api, "internal_api": lib.internal_api, "prefix": lib.prefix,
            "filepath": lib.filepath, "num_threads": n}


def push(count: int, source: str) -> None:
    """Put ``count`` into every loaded native pool and into torch (when imported)."""
    global _pushed, _push_record, _key, _pushed_to
    with _lock:
        _pushed = count
        _key = object()
        _pushed_to = set()
        _push_record = {"count": count, "source": source, "pools": [], "torch": None}
        _push_new()


def _push_new() -> None:
    """Give the pushed count to the pools and torch that have not had it yet (call with _lock)."""
    global _key, _push_ctrl
    count = _pushed
    if count is None or _push_record is None:
        return
    per_thread, process = _libs()
    _push_ctrl = _ctrl
    pools = _push_record["pools"]
    for lib in process:
        if lib.filepath in _pushed_to:
            continue
        _pushed_to.add(lib.filepath)
        want = count
        if _level is not None:  # capped now: the count is what the pool gets back afterwards
            _global_orig[lib.filepath] = count
            want = max(1, min(count, _level))
            _global_applied[lib.filepath] = want
        _set(lib, want)
        pools.append(_describe(lib, want))
    for lib in per_thread:
        if lib.filepath in _pushed_to:
            continue
        _pushed_to.add(lib.filepath)
        _set(lib, count)
        pools.append({**_describe(lib, count), "scope": "calling thread; pools sync their threads"})
    if _torch() is not None and "torch" not in _pushed_to:
        _pushed_to.add("torch")
        _torch_set(count)
        _push_record["torch"] = f"torch.set_num_threads({count})"
        _key = object()  # other threads sync torch at their next task or region
    _tl.key = _key


def push_record() -> dict[str, Any] | None:
    """What the last push did (for ``info()``), or None when nothing was pushed."""
    with _lock:
        if _push_record is None:
            return None
        return {**_push_record, "pools": [dict(p) for p in _push_record["pools"]]}


def refresh_if_new_modules() -> None:
    """Give the pushed count to native libraries and torch imported since the last push only."""
    if _pushed is not None and (len(sys.modules) != _ctrl_modules or _ctrl is not _push_ctrl):
        with _lock:
            _push_new()


def _set(lib: Any, n: int) -> None:
    # threadpoolctl lets only one "controlling" thread change a process-wide OpenBLAS pool. parinfo
    # serialises its own changes under _lock, so it calls the library's setter directly where
    # threadpoolctl has one, and otherwise takes control for the call and hands it back.
    try:
        real = getattr(lib, "_real_set_num_threads", None)
        if real is not None:
            real(n)
            return
        clear = getattr(lib, "clear_controlling_thread", None)
        if clear is None:
            lib.set_num_threads(n)
            return
        clear(force=True)
        try:
            lib.set_num_threads(n)
        finally:
            clear()
    except Exception:  # a library that refuses must not break the caller's work
        pass


def _torch_set(n: int) -> None:
    torch = _torch()
    if torch is not None:
        try:
            torch.set_num_threads(n)
        except Exception:
            pass


def _apply_process(process: list[Any]) -> None:
    """Give process-wide pools ``min(base, cap)``; base is the count the pool had when the cap
    began (the pushed count, or what a profile or the user set since), given back when it ends."""
    for lib in process:
        k = lib.filepath
        if k not in _global_orig:
            _global_orig[k] = lib.num_threads or 1
        base = _global_orig[k]
        want = base if _level is None else max(1, min(base, _level))
        if _global_applied.get(k) != want:
            _set(lib, want)
            _global_applied[k] = want
    if _level is None:  # the user may change the pools until the next cap: forget what we saw
        _global_orig.clear()
        _global_applied.clear()
        # torch keeps a process-wide default that new threads copy on their first op; give it back
        base = _pushed if _pushed is not None else _torch_base
        if base is not None and _torch() is not None:
            _torch_set(base)


def _capture_torch_base() -> None:
    """torch's count before a cap, read on a thread parinfo has not capped (call with _blk held)."""
    global _torch_base
    torch = _torch()
    if torch is not None and not getattr(_tl, "capped", False):
        try:
            _torch_base = torch.get_num_threads()
        except Exception:
            pass


def _sync_thread(in_lane: bool) -> None:
    """Bring this thread's per-thread pools (OpenMP runtimes, torch) to the current count and cap."""
    per_thread, _ = _libs()
    level = _level if in_lane else None
    saved = getattr(_tl, "saved", None)
    if saved is None:
        saved = _tl.saved = {}
    if level is not None:  # the thread's own counts before the cap, read before changing any
        for lib in per_thread:
            if lib.filepath not in saved:
                saved[lib.filepath] = lib.get_num_threads() or 1
    for lib in per_thread:
        base = _pushed if _pushed is not None else saved.get(lib.filepath)
        if base is not None:
            _set(lib, base if level is None else max(1, min(base, level)))
    base = _pushed if _pushed is not None else _torch_base
    if base is not None and _torch() is not None:
        _torch_set(base if level is None else max(1, min(base, level)))
    _tl.key = _key if in_lane else None
    _tl.capped = level is not None
    if level is None:
        _tl.saved = None


def lane_enter(queued: int = 0) -> None:
    """A thread starts an inter-op task or its share of a parallel region.

    ``queued`` is how many more lanes are about to start (tasks waiting for idle workers), so the
    cap is in place before the first of a batch of tasks runs its native calls.
    """
    global _running, _level, _key, _usable
    depth = getattr(_tl, "depth", 0)
    _tl.depth = depth + 1
    if depth:  # nested work on a thread that already is a lane
        return
    changed = False
    with _blk:
        _running += 1
        lanes = _running + queued
        if lanes >= 2:
            if not _usable:
                _usable = settings.usable_cpus()
            cap = max(1, _usable // lanes)
            if _level is None or cap < _level:
                if _level is None:
                    _capture_torch_base()
                _level = cap
                _key = object()
                changed = True
    if changed:
        with _lock:
            _apply_process(_libs()[1])
    if _pushed is not None:
        refresh_if_new_modules()
    if getattr(_tl, "key", None) is not _key and (
            _pushed is not None or _level is not None or getattr(_tl, "capped", False)):
        with _lock:
            _sync_thread(True)


def lane_exit(restore: bool) -> None:
    """The lane ends; ``restore`` for threads that are not parinfo's (give back their own limits)."""
    global _running, _level, _key
    depth = _tl.depth - 1
    _tl.depth = depth
    if depth:
        return
    changed = False
    with _blk:
        _running -= 1
        if _running == 0 and _level is not None:
            _level = None
            _key = object()
            changed = True
    if changed:
        with _lock:
            _apply_process(_libs()[1])
    if restore and getattr(_tl, "capped", False):
        with _lock:
            _sync_thread(False)


def state() -> dict[str, Any]:
    """The budget now: lanes running and the cap per lane (None when not capped)."""
    return {"lanes": _running, "cap_per_lane": _level, "usable_cpus": _usable or None}


def after_fork_in_child() -> None:
    global _lock, _blk, _running, _level, _key
    _lock = threading.RLock()
    _blk = threading.Lock()
    _running = 1 if getattr(_tl, "depth", 0) else 0  # the forking thread may be inside a task
    _level = None
    _key = object()
