"""Fleet: matmul throughput of 2 Dask workers x 2 threads, oversubscribed vs after ``parinfo.fleet.apply``,
and the time ``parinfo.fleet.gather`` takes for 2, 4 and 8 workers.

One run, one machine: the anchor is the same cluster before apply, measured in the same run. The
nanny's own thread variables are emptied (distributed.nanny.pre-spawn-environ), so the workers
start the way a cluster without that default does: every pool sized for the whole machine. Every
cluster listens on 127.0.0.1 only and is closed in a ``finally``.

    python bench/fleet.py [--size 384] [--tasks 64] [--repeats 3] [--gather 2,4,8]

Prints the usable CPUs first, then throughput (matmuls per second, median of repeats) and CPU time
per matmul before and after, their ratios, and gather times (median of repeats).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from _machine import report_machine  # bench/ is on sys.path when run as a script


def matmuls(size: int, count: int) -> tuple[float, float]:
    """``count`` matmuls of two size x size matrices in this task: (wall seconds, process CPU seconds)."""
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = rng.random((size, size)), rng.random((size, size))
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        a @ b
    return time.perf_counter() - wall, time.process_time() - cpu


def throughput(client, size: int, tasks: int, per_task: int) -> tuple[float, float]:
    """Matmuls per second over the whole cluster, and process CPU seconds per matmul."""
    start = time.perf_counter()
    futures = [client.submit(matmuls, size, per_task, pure=False) for _ in range(tasks)]
    results = client.gather(futures)
    wall = time.perf_counter() - start
    cpu = sum(c for _, c in results)  # CPU of each worker process while its task ran (shared by its threads)
    return tasks * per_task / wall, cpu / (tasks * per_task)


def _import_libraries() -> None:
    import numpy  # noqa: F401


def cluster(workers: int, threads: int):
    import dask
    from distributed import Client, LocalCluster

    emptied = {name: None for name in dask.config.get("distributed.nanny.pre-spawn-environ")}
    with dask.config.set({"distributed.nanny.pre-spawn-environ": emptied}):
        lc = LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True, host="127.0.0.1",
                          dashboard_address=None, timeout=120)
    return lc, Client(lc, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=384)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--per-task", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gather", default="2,4,8", help="worker counts to time gather for")
    args = parser.parse_args()
    report_machine()

    import distributed  # noqa: F401  (loads dask's configuration)

    import parinfo
    from parinfo.process.variables import THREAD_VARS

    for name in THREAD_VARS:  # the workers inherit this process's environment
        os.environ.pop(name, None)
    usable = parinfo.machine_facts().usable_cpus
    print(f"usable CPUs: {usable}  (numpy matmul {args.size}x{args.size}, {args.tasks} tasks x {args.per_task})")

    lc, client = cluster(2, 2)
    try:
        client.run(_import_libraries)
        throughput(client, args.size, 4, 1)  # warm-up
        before = [throughput(client, args.size, args.tasks, args.per_task) for _ in range(args.repeats)]
        report = parinfo.fleet.gather(client)
        flagged = sorted({f.id for _, f in report.problems()})
        parinfo.fleet.apply(client, "single-thread")
        throughput(client, args.size, 4, 1)
        after = [throughput(client, args.size, args.tasks, args.per_task) for _ in range(args.repeats)]
    finally:
        client.close(timeout=30)
        lc.close(timeout=30)
    tb, cb = statistics.median(r for r, _ in before), statistics.median(c for _, c in before)
    ta, ca = statistics.median(r for r, _ in after), statistics.median(c for _, c in after)
    print(f"2 workers x 2 threads, before apply: {tb:8.1f} matmul/s  {cb * 1e3:7.2f} ms CPU per matmul  "
          f"(findings: {', '.join(flagged) or 'none'})")
    print(f"after fleet.apply(single-thread):    {ta:8.1f} matmul/s  {ca * 1e3:7.2f} ms CPU per matmul")
    print(f"ratio after/before: throughput {ta / tb:.2f}x, CPU per matmul {ca / cb:.2f}x")

    for n in (int(x) for x in args.gather.split(",") if x.strip()):
        lc, client = cluster(n, 1)
        try:
            client.run(_import_libraries)
            parinfo.fleet.gather(client)  # warm-up: parinfo's modules load in the workers
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                parinfo.fleet.gather(client)
                times.append(time.perf_counter() - start)
        finally:
            client.close(timeout=30)
            lc.close(timeout=30)
        print(f"gather, {n} workers: {statistics.median(times) * 1e3:7.1f} ms (median of {args.repeats})")


if __name__ == "__main__":
    main()
