"""Which threads a count set by ``parinfo.apply()`` reaches, for limits that hold per thread.

An OpenMP runtime keeps its thread count per calling thread (an OpenMP ICV): a limit set through
threadpoolctl (``omp_set_num_threads``) holds in the thread that set it, and nowhere else. Threads
that are already running keep their own count, and threads started later begin at the count the
runtime read when it was loaded (OMP_NUM_THREADS then, else the CPUs), not at the new one; this is
so for libgomp, libiomp and libomp alike. Setting OMP_NUM_THREADS in os.environ afterwards changes
nothing for a runtime already loaded. torch passes its own count to each thread at that thread's
first parallel op (or get_num_threads call), so its OpenMP copy reaches new threads, but a thread
that already ran one keeps the count it had then.

This module says exactly that for one apply(): what the calling thread got, what a thread started
now gets (measured in a probe thread), which live threads were not reached, and what to do.
"""
from __future__ import annotations

import threading

from parinfo.process.libraries import LIBRARY_VARS, Torch, family
from parinfo.process.setter import NativePool
from parinfo.safe_text import plural

PROBE_TIMEOUT_S = 5.0
# What a user does for the threads a per-thread limit does not reach.
_FIX_OPENMP = ("call parinfo.apply() or threadpoolctl.threadpool_limits({n}, user_api='openmp') at the "
               "start of each thread that runs OpenMP work (e.g. as a thread pool's initializer), or set "
               f"{LIBRARY_VARS['openmp'][0]} before the process starts (parinfo apply PROFILE -- COMMAND): "
               "every thread reads it")


def _describe(threads: list[threading.Thread]) -> str:
    names = [t.name for t in threads]
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f"{plural(len(names), 'other live thread')} ({shown})"


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
          pool_reached: frozenset[int] = frozenset()) -> tuple[list[str], list[str]]:
    """For each (pool, name, count) limited in this thread: (reach lines, not-in-force lines).

    ``torch_intra`` is the intra-op count given to torch (None when torch was not set); ``reached``
    are native ids of threads the caller limited the same way itself; ``pool_reached`` those of
    parinfo's pool workers that set the limits in their own thread (``on_every_worker``).
    """
    from parinfo.process.pools import owner_of

    current = threading.current_thread()
    here = f"this thread ({current.name}, tid {threading.get_native_id()})"
    alive = [t for t in threading.enumerate() if t is not current and t.is_alive()]
    pool = [t for t in alive if t.native_id in pool_reached and is_pool_worker(t)]
    others = [t for t in alive if t.native_id not in reached and t not in pool]
    also = [t for t in alive if t.native_id in reached and t not in pool]
    if pool:
        names = ", ".join(t.name for t in pool)
        here += f" and parinfo's own pool threads ({names}), each set in its own thread"
    if also:
        here += f" and the {_describe(also)} the caller limited"
    ours = [t for t in others if is_pool_worker(t)]
    lines: list[str] = []
    missing: list[str] = []
    torch_copy = [(pool, name, n) for pool, name, n in per_thread
                  if owner_of(pool.path) == family(Torch).module and torch_intra is not None]
    plain = [entry for entry in per_thread if entry not in torch_copy]
    fresh = probe_new_thread([pool for pool, _, _ in plain]) if plain else []
    for (_lib, name, n), m in zip(plain, fresh or [None] * len(plain), strict=False):
        start = "an unknown count" if m is None else str(m)
        line = (f"{name}: {n} in {here} only (OpenMP limits are per thread); threads started from now on "
                f"start at {start}")
        if others:
            line += f"; the {_describe(others)} keep their own count"
        lines.append(line)
        if m != n:
            gap = f"{name} is limited to {n} in {here} only: threads started from now on run {start}"
            if others:
                gap += f", and the {_describe(others)} keep theirs ({start} unless they set one)"
            gap += "; " + _FIX_OPENMP.format(n=n)
            if ours:
                gap += (f"; parinfo's own pool threads ({', '.join(t.name for t in ours)}) were busy: each "
                        f"sets the limit in its own thread before its next job")
            missing.append(gap)
    if torch_copy or (torch_intra is not None and _torch_is_per_thread()):
        line = (f"torch intra-op {torch_intra}: {here}, and every thread at its first parallel torch op from "
                f"now on (torch passes its count on)")
        if others:
            line += (f"; of the {_describe(others)}, any that already ran a parallel torch op (or read "
                     f"torch.get_num_threads()) keeps the count it had then: call "
                     f"torch.set_num_threads({torch_intra}) in it")
        lines.append(line)
    return lines, missing
