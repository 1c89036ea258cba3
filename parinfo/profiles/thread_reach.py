"""Which threads a count set by ``parinfo.apply()`` reaches, for limits that hold per thread.

An OpenMP runtime keeps its thread count per calling thread (an OpenMP ICV): a limit set through
threadpoolctl (``omp_set_num_threads``) holds in the thread that set it, and nowhere else. Threads
that are already running keep their own count, and threads started later begin at the count the
runtime read when it was loaded (OMP_NUM_THREADS then, else the CPUs), not at the new one; this is
so for libgomp, libiomp and libomp alike. Setting OMP_NUM_THREADS in os.environ afterwards changes
nothing for a runtime already loaded. torch passes its own count to each thread at that thread's
first parallel op (or get_num_threads call), so its OpenMP copy reaches new threads, but a thread
that already ran one keeps the count it had then.

This module says exactly that for one apply(), as records (their words are
:mod:`parinfo.profiles.applied`'s): what the calling thread got, what a thread started now gets
(measured in a probe thread), which live threads were not reached.
"""
from __future__ import annotations

import threading
from dataclasses import replace

from parinfo.process.libraries import Torch, family
from parinfo.process.setter import NativePool
from parinfo.profiles.applied import Gap, Reach

PROBE_TIMEOUT_S = 5.0


def probe_new_thread(pools: list[NativePool]) -> list[int | None] | None:
    """Each pool's count as a thread started now sees it (read in a fresh thread); None when the
    probe thread did not answer in time."""
    out: list[int | None] = []

    def read() -> None:
        out.extend(pool.get() for pool in pools)

    probe = threading.Thread(target=read, name="parinfo-probe", daemon=True)
    probe.start()
    probe.join(PROBE_TIMEOUT_S)
    return out if not probe.is_alive() and len(out) == len(pools) else None


def _torch_is_per_thread() -> bool:
    torch = family(Torch).loaded_module()
    try:
        return torch is not None and "parallel backend: OpenMP" in torch.__config__.parallel_info()
    except Exception:
        return False


def is_pool_worker(t: threading.Thread) -> bool:
    """Whether ``t`` is a worker of parinfo's intra-op or inter-op pool."""
    return t.name.startswith(("parinfo-intra-", "parinfo-interop-"))


def reach(per_thread: list[tuple[NativePool, str, int]], torch_intra: int | None,
          reached: frozenset[int] = frozenset(),
          pool_reached: frozenset[int] = frozenset()) -> tuple[list[Reach], list[Gap]]:
    """For each (pool, name, count) limited in this thread: where it reached, and a Gap for each
    that threads started from now on do not run.

    ``torch_intra`` is the intra-op count given to torch (None when torch was not set); ``reached``
    are native ids of threads the caller limited the same way itself; ``pool_reached`` those of
    parinfo's pool workers that set the limits in their own thread (``on_every_worker``).
    """
    from parinfo.process.pools import owner_of

    current = threading.current_thread()
    alive = [t for t in threading.enumerate() if t is not current and t.is_alive()]
    pool = [t for t in alive if t.native_id in pool_reached and is_pool_worker(t)]
    others = [t for t in alive if t.native_id not in reached and t not in pool]
    also = [t for t in alive if t.native_id in reached and t not in pool]
    where = Reach(pool="", count=0, thread=(current.name, threading.get_native_id()), pool_threads=_names(pool),
                  caller=_names(also), others=_names(others), busy=_names([t for t in others if is_pool_worker(t)]))
    torch_copy = [(pool, name, n) for pool, name, n in per_thread
                  if owner_of(pool.path) == family(Torch).module and torch_intra is not None]
    plain = [entry for entry in per_thread if entry not in torch_copy]
    fresh = probe_new_thread([pool for pool, _, _ in plain]) if plain else []
    lines: list[Reach] = []
    missing: list[Gap] = []
    for (_lib, name, n), m in zip(plain, fresh or [None] * len(plain), strict=False):
        line = replace(where, pool=name, count=n, start=m)
        lines.append(line)
        if m != n:
            missing.append(Gap(line))
    if torch_intra is not None and (torch_copy or _torch_is_per_thread()):
        lines.append(replace(where, count=torch_intra, framework="torch"))
    return lines, missing


def _names(threads: list[threading.Thread]) -> tuple[str, ...]:
    return tuple(t.name for t in threads)
