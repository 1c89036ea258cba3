"""The process's thread counts, where each came from, and the rules for changing them.

This module is the one place the counting rules are enforced:

* Intra-op count (parallel_for and native pools): process-wide, changeable any time from any
  thread; a change applies to parallel regions that start after it, regions already running keep
  their count.
* Inter-op count (fork/wait): set once, before the inter-op pool starts; afterwards the
  reference's RuntimeError.
* Resolution with provenance: explicit call > applied profile (``configure``) > PARINFO_* variable >
  MKL_NUM_THREADS > OMP_NUM_THREADS (intra only) > default from the machine's usable CPUs.
"""
from __future__ import annotations

import operator
import os
import threading
from typing import Any

from parinfo.process.libraries import library
from parinfo.process.variables import THREAD_VARS, count_from_env

INTEROP_ERROR = ("Error: cannot set number of interop threads after parallel work has started "
                 "or set_num_interop_threads called")

EXPLICIT = "explicit call"

# The variables each count reads, first wins (after an explicit call and a profile).
INTRA_VARS = library("parinfo").count_vars  # PARINFO_NUM_THREADS, then torch's variables
INTER_VARS = ("PARINFO_NUM_INTEROP_THREADS",)

_lock = threading.RLock()

# (count, source) chosen by an explicit call or a profile; None means "resolve the default".
_intra_set: tuple[int, str] | None = None
_inter_set: tuple[int, str] | None = None
_intra_default: tuple[int, str] | None = None
_inter_default: tuple[int, str] | None = None
_intra_ignored: list[dict[str, Any]] = []  # invalid variables met while resolving the default
_intra_overridden: list[str] = []  # profile requests an explicit call outranked
_inter_set_called = False
_inter_started = False
_backend: tuple[str, str] | None = None
_facts: tuple[int, int] | None = None

# Fast path for hot code: the current intra-op count, or None before the first resolution.
intra_now: int | None = None
# Bumped on every change of the intra-op count; pools and the native layer compare it cheaply.
generation = 0


def check_count(n: object, what: str) -> int:
    """Validate a thread count given to the API: a positive int (bool, float and str are refused)."""
    if isinstance(n, bool):
        raise TypeError(f"{what} expects an int, but got bool ({n!r})")
    try:
        value = operator.index(n)  # int and integer-like types (numpy integers), never float/str
    except TypeError:
        raise TypeError(f"{what} expects an int, but got {type(n).__name__} ({n!r})") from None
    if value < 1:
        raise ValueError(f"{what} expects a positive integer, but got {value}")
    return value


def _machine() -> tuple[int, int]:
    """(usable physical cores, usable CPUs) from the topology layer, read once."""
    global _facts
    if _facts is None:
        try:
            from parinfo.machine.topology import machine_facts

            f = machine_facts()
            _facts = (max(1, int(f.usable_physical_cores)), max(1, int(f.usable_cpus)))
        except Exception:  # an odd environment must not stop the runtime
            n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            _facts = (max(1, n), max(1, n))
    return _facts


def usable_cpus() -> int:
    """CPUs this process may use (affinity and quota respected)."""
    return _machine()[1]


def _from_env(names: tuple[str, ...], default: int, default_source: str,
              environ: dict[str, str]) -> tuple[int, str, list[dict[str, Any]]]:
    ignored: list[dict[str, Any]] = []
    for name in names:
        raw = environ.get(name)
        if raw is None:
            continue
        n = count_from_env(name, environ)
        if n is None:
            ignored.append({"variable": name, "value": raw, "why": "invalid"})
            continue
        profile = environ.get("PARINFO_PROFILE")
        if name.startswith("PARINFO_") and profile:
            source = f"profile {profile} ({name})"
        else:
            source = f"env {name}"
        return n, _with_ignored(source, ignored), ignored
    return default, _with_ignored(default_source, ignored), ignored


def _with_ignored(source: str, ignored: list[dict[str, Any]]) -> str:
    if not ignored:
        return source
    what = ", ".join(f"{i['variable']}={i['value']!r}" for i in ignored)
    return f"{source} (ignored invalid {what})"


def _resolve_intra_default() -> tuple[int, str]:
    global _intra_default, _intra_ignored
    if _intra_default is None:
        phys, _ = _machine()
        n, src, ign = _from_env(INTRA_VARS, phys, "default: usable physical cores", dict(os.environ))
        _intra_default, _intra_ignored = (n, src), ign
    return _intra_default


def _resolve_inter_default() -> tuple[int, str]:
    global _inter_default
    if _inter_default is None:
        _, cpus = _machine()
        n, src, _ign = _from_env(INTER_VARS, cpus, "default: usable CPUs", dict(os.environ))
        _inter_default = (n, src)
    return _inter_default


def intra() -> tuple[int, str]:
    """The current intra-op (count, source)."""
    global intra_now
    with _lock:
        cur = _intra_set or _resolve_intra_default()
        intra_now = cur[0]
        return cur


def inter() -> tuple[int, str]:
    """The current inter-op (count, source); reading never starts the pool."""
    with _lock:
        return _inter_set or _resolve_inter_default()


def intra_count() -> int:
    """The intra-op count, cheap after the first call."""
    n = intra_now
    return n if n is not None else intra()[0]


def set_intra(n: int, source: str) -> None:
    """Record a new intra-op count. An explicit call wins over a profile (see docs/runtime.md)."""
    global _intra_set, intra_now, generation
    with _lock:
        if source != EXPLICIT and _intra_set is not None and _intra_set[1] == EXPLICIT:
            _intra_overridden.append(f"{source} asked {n}; the explicit call ({_intra_set[0]}) "
                                     "takes precedence")
            return
        _intra_set = (n, source)
        intra_now = n
        generation += 1


def set_inter(n: int, source: str) -> None:
    """Record the inter-op count, enforcing the set-once rule."""
    global _inter_set, _inter_set_called
    with _lock:
        if _inter_set_called or _inter_started:
            raise RuntimeError(INTEROP_ERROR)
        _inter_set = (n, source)
        _inter_set_called = True


def check_inter_settable() -> None:
    """Raise the set-once RuntimeError if the inter-op count may no longer change."""
    with _lock:
        if _inter_set_called or _inter_started:
            raise RuntimeError(INTEROP_ERROR)


def mark_inter_started() -> int:
    """Called by the inter-op pool when it starts (first fork); returns the count to use."""
    global _inter_started
    with _lock:
        _inter_started = True
        return (_inter_set or _resolve_inter_default())[0]


def inter_started() -> bool:
    return _inter_started


def intra_overridden() -> list[str]:
    """Profile requests for the intra-op count that an explicit call outranked."""
    with _lock:
        return list(_intra_overridden)


def backend() -> tuple[str, str]:
    """(backend, source): PARINFO_BACKEND=native|sequential, read once at first use."""
    global _backend
    if _backend is None:
        raw = os.environ.get("PARINFO_BACKEND")
        if raw is None:
            _backend = ("native", "default")
        else:
            value = raw.strip().lower()
            if value in THREAD_VARS["PARINFO_BACKEND"].choices:
                _backend = (value, "env PARINFO_BACKEND")
            else:
                _backend = ("native", f"default (ignored invalid PARINFO_BACKEND={raw!r})")
    return _backend


def after_fork_in_child() -> None:
    """Fresh lock in a forked child; counts and rules carry over from the parent."""
    global _lock
    _lock = threading.RLock()


def inter_locked() -> bool:
    """True once the inter-op count can no longer change (set once, or the pool started)."""
    return _inter_set_called or _inter_started
