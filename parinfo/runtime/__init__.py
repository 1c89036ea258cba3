"""parinfo's runtime: the process's intra-op and inter-op pools and their counts.

Public API: counts (``set_num_threads`` ...), ``configure`` for profiles, ``fork``/``wait`` and
``Future``, ``parallel_for``/``parallel_reduce``, ``in_parallel_region``, ``get_thread_num``,
``profile``, ``on_every_worker``, ``set_adaptive``, ``refresh`` (re-read the usable CPUs now) and
``info``. Each is a method of the process's
one :class:`~parinfo.runtime.state.Runtime` (``RUNTIME``), which holds all of the runtime's state.
Importing this package starts no thread and changes no count; it only registers an os.fork handler
that gives children fresh pools.
"""
from __future__ import annotations

from parinfo.runtime.future import Future
from parinfo.runtime.state import RUNTIME, Runtime
from parinfo.runtime.tracing import Profile

__all__ = [
    "RUNTIME", "Future", "Profile", "Runtime", "configure", "fork", "get_num_interop_threads", "get_num_threads",
    "get_thread_num", "in_parallel_region", "info", "on_every_worker", "parallel_for", "parallel_reduce", "profile",
    "refresh", "set_adaptive", "set_num_interop_threads", "set_num_threads", "wait",
]

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
refresh = RUNTIME.refresh
