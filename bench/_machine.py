"""The machine's usable parallelism, measured at the start of a benchmark: the machine is shared.

N busy processes (N = the CPUs this process may use) each run the same fixed loop; the usable
parallelism is N x (time of one alone) / (time of N together). On a quiet machine it is close to N;
a figure taken while it is well below N was taken on a busy machine and is not to be quoted.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time

WORK = 3_000_000
ROUNDS = 5  # the fastest of several: one slow spell on this shared machine must not set the figure


def _spin(_: int = 0) -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(WORK):
        x += i
    return time.perf_counter() - t0


def usable_parallelism() -> tuple[float, int]:
    """(measured parallelism, CPUs this process may use)."""
    n = len(os.sched_getaffinity(0))
    ctx = mp.get_context("fork")
    with ctx.Pool(n) as pool:
        pool.map(_spin, range(n))  # warm the workers
        alone = min(pool.apply(_spin) for _ in range(ROUNDS))
        together = min(max(pool.map(_spin, range(n))) for _ in range(ROUNDS))
    return n * alone / together, n


def report_machine(threshold: float = 0.9) -> bool:
    """Print the usable parallelism; True when the machine is quiet enough to quote figures."""
    measured, n = usable_parallelism()
    quiet = threshold * n <= measured <= (2 - threshold) * n
    state = ("quiet" if quiet else "BUSY: figures below are not to be quoted" if measured < threshold * n
             else "UNSTEADY (one process alone ran slower than several together): figures below are not to be quoted")
    print(f"usable parallelism: {measured:.2f} of {n} CPUs ({state})", flush=True)
    return quiet


if __name__ == "__main__":
    report_machine()
