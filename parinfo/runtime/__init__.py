"""parinfo's runtime: the process's intra-op and inter-op pools and their counts.

Public API: counts (``set_num_threads`` ...), ``configure`` for profiles, ``fork``/``wait`` and
``Future``, ``parallel_for``/``parallel_reduce``, ``in_parallel_region``, ``get_thread_num``,
``profile``, ``on_every_worker``, ``set_adaptive``, ``refresh`` (re-read the usable CPUs now) and
``info`` (JSON-ready) and ``snapshot`` (the same as a record). Each is a method of the process's
one :class:`~parinfo.runtime.state.Runtime` (``RUNTIME``), which holds all of the runtime's state.
Importing this package builds nothing: the runtime (with the os.fork handler that gives children
fresh pools) is made at the first use of one of these names, and starts no thread then either.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "RUNTIME", "Future", "Profile", "Runtime", "configure", "fork", "get_num_interop_threads", "get_num_threads",
    "get_thread_num", "in_parallel_region", "info", "on_every_worker", "parallel_for", "parallel_reduce", "profile",
    "refresh", "set_adaptive", "set_num_interop_threads", "set_num_threads", "snapshot", "wait",
]

# The names are resolved at first use, so that importing one module of the package (the runtime's
# records, for a report read from another process) does not build the runtime.
_CLASSES = {"RUNTIME": "parinfo.runtime.state", "Runtime": "parinfo.runtime.state",
            "Future": "parinfo.runtime.future", "Profile": "parinfo.runtime.tracing"}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _CLASSES:
        value = getattr(importlib.import_module(_CLASSES[name]), name)
    elif name in __all__:
        from parinfo.runtime.state import RUNTIME

        value = getattr(RUNTIME, name)
    else:
        raise AttributeError(f"module 'parinfo.runtime' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # pragma: no cover
    from parinfo.runtime.future import Future as Future
    from parinfo.runtime.state import Runtime as Runtime
    from parinfo.runtime.tracing import Profile as Profile

    RUNTIME = Runtime()  # for type checkers only: the process's one runtime is parinfo.runtime.state's

    set_num_threads = RUNTIME.set_num_threads
    get_num_threads = RUNTIME.get_num_threads
    set_num_interop_threads = RUNTIME.set_num_interop_threads
    get_num_interop_threads = RUNTIME.get_num_interop_threads
    configure = RUNTIME.configure
    set_adaptive = RUNTIME.set_adaptive
    fork = RUNTIME.fork
    wait = RUNTIME.wait
    parallel_for = RUNTIME.parallel_for
    parallel_reduce = RUNTIME.parallel_reduce
    in_parallel_region = RUNTIME.in_parallel_region
    get_thread_num = RUNTIME.get_thread_num
    on_every_worker = RUNTIME.on_every_worker
    profile = RUNTIME.profile
    info = RUNTIME.info
    snapshot = RUNTIME.snapshot
    refresh = RUNTIME.refresh
