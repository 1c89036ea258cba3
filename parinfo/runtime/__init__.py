"""parinfo's runtime: the process's intra-op and inter-op pools and their counts.

Public API: counts (``set_num_threads`` ...), ``configure`` for profiles, ``fork``/``wait`` and
``Future``, ``parallel_for``/``parallel_reduce``, ``in_parallel_region``, ``get_thread_num``,
``profile`` and ``info``. Importing this package starts no thread and changes no count; it only
registers an os.fork handler that gives children fresh pools.
"""
from __future__ import annotations

import os
from typing import Any

from parinfo.runtime import interop as _interop, intraop as _intraop
from parinfo.runtime.adaptive import ADAPT
from parinfo.runtime.future import LEDGER, Future
from parinfo.runtime.interop import fork, wait
from parinfo.runtime.intraop import (
    get_thread_num,
    in_parallel_region,
    parallel_for,
    parallel_reduce,
)
from parinfo.runtime.native import LIMITS
from parinfo.runtime.settings import COUNTS, EXPLICIT, check_count
from parinfo.runtime.torchfork import FORKS
from parinfo.runtime.tracing import RECORDERS, Profile, profile
from parinfo.runtime.workers import SETUP, on_every_worker

__all__ = [
    "Future", "Profile", "configure", "fork", "get_num_interop_threads", "get_num_threads",
    "get_thread_num", "in_parallel_region", "info", "on_every_worker", "parallel_for", "parallel_reduce", "profile",
    "set_num_interop_threads", "set_num_threads", "wait",
]


def set_num_threads(n: int) -> None:
    """Set the intra-op count: threads per parallel region, and the count pushed into native pools.

    The rule: the count is process-wide (not per calling thread), may be changed any time from any
    thread, and applies to parallel regions that start after the call; regions already running
    keep their count. The count then goes into the loaded native pools (OpenBLAS, MKL, OpenMP
    runtimes, through threadpoolctl) and into torch when torch is imported. An explicit call takes
    precedence over a profile. ``n`` must be a positive int (TypeError/ValueError otherwise);
    counts above the usable CPUs are allowed.
    """
    _set_intra(check_count(n, "set_num_threads"), EXPLICIT)


def get_num_threads() -> int:
    """The intra-op count now in force (resolved from the environment on first use)."""
    return COUNTS.intra()[0]


def set_num_interop_threads(n: int) -> None:
    """Set the inter-op pool size, once, before the first ``fork``.

    A second call, or a call after parallel work started, raises RuntimeError("Error: cannot set
    number of interop threads after parallel work has started or set_num_interop_threads called").
    """
    COUNTS.set_inter(check_count(n, "set_num_interop_threads"), EXPLICIT)


def get_num_interop_threads() -> int:
    """The inter-op pool size; reading it never starts the pool."""
    return COUNTS.inter()[0]


def configure(*, intra_op: int | None = None, inter_op: int | None = None,
              libraries: dict[str, int | None] | None = None, source: str) -> None:
    """Set counts on behalf of ``source`` (e.g. "profile latency"), with the setters' rules.

    Both values are checked before either is applied. The inter-op count follows the set-once
    rule; an intra-op count from a profile does not replace one set by an explicit call.
    ``libraries`` (record name -> count, from a profile's ``libraries``; None leaves that library
    alone) go into the native pools and torch with the push, each pool once, in place of the
    intra-op count.
    """
    if not isinstance(source, str) or not source.strip():
        raise TypeError("configure() expects source to be a non-empty str")
    if intra_op is not None:
        check_count(intra_op, "configure intra_op")
    if inter_op is not None:
        check_count(inter_op, "configure inter_op")
        COUNTS.check_inter_settable()
    if inter_op is not None:
        COUNTS.set_inter(inter_op, source)
    if intra_op is not None or libraries:
        _set_intra(intra_op, source, libraries)


# How long a push waits for busy pool workers; they take the count before their next job anyway.
PUSH_WAIT_S = 2.0


def _set_intra(n: int | None, source: str, libraries: dict[str, int | None] | None = None) -> None:
    """Record ``n`` (None: keep the count) and push it, with ``libraries`` over it per library.
    An intra-op count an explicit call outranks is not taken, but the libraries' counts still are."""
    taken = n is not None and COUNTS.set_intra(n, source)
    if taken or libraries:
        LIMITS.push(n if taken and n is not None else COUNTS.intra()[0], source, libraries)
        # OpenMP limits (and torch's, in its OpenMP build) hold per thread: each worker sets its own
        reach = on_every_worker("parinfo.intra_op", LIMITS.sync_worker, timeout=PUSH_WAIT_S)
        if reach["ran"] or reach["pending"]:
            LIMITS.note_workers(reach)


def info() -> dict[str, Any]:
    """The runtime's state as plain JSON-ready data; starts no pool and imports nothing heavy."""
    backend, backend_source = COUNTS.backend()
    intra, intra_src = COUNTS.intra()
    inter, inter_src = COUNTS.inter()
    intra_d: dict[str, Any] = {"count": intra, "source": intra_src}
    notes = COUNTS.intra_outranked()
    if notes:
        intra_d["not_applied"] = notes
    inter_d: dict[str, Any] = {"count": inter, "source": inter_src, "locked": COUNTS.inter_locked()}
    for d in (intra_d, inter_d):
        if d["count"] > COUNTS.ceiling:  # valid, but the pool runs at most the ceiling
            d["capped_to"] = COUNTS.ceiling
    return {
        "backend": backend,
        "backend_source": backend_source,
        "intra_op": intra_d,
        "inter_op": inter_d,
        "pool_ceiling": COUNTS.ceiling,
        "intra_pool_started": _intraop.POOL.started(),
        "inter_pool_started": _interop.POOL.started(),
        "pool_threads": _intraop.POOL.alive_threads() + _interop.POOL.alive_threads(),
        "native_push": LIMITS.push_record(),
        "budget": LIMITS.state(),
        "adaptive": ADAPT.state(),
        "torch_pool": FORKS.pool,  # torch's inter-op pool as parinfo's first scripted fork found it
    }


def _after_fork_in_child() -> None:
    COUNTS.after_fork_in_child()
    LEDGER.after_fork_in_child()
    LIMITS.after_fork_in_child()
    _interop.POOL.after_fork_in_child()
    _intraop.POOL.after_fork_in_child()
    RECORDERS.after_fork_in_child()
    SETUP.after_fork_in_child()
    ADAPT.after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
