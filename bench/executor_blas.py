"""A ThreadPoolExecutor(4) of BLAS calls under a 2-CPU quota: no limit, threadpoolctl's limit in
the main thread only, and parinfo's limit in every worker (``worker_initializer(1)``).

Each mode runs in its own process, in a CPU cgroup of its own whose quota is 2 CPUs (cgroup v1
``cpu.cfs_quota_us`` or v2 ``cpu.max``, made by this script as root; without one the line says so
and the run is unquota'd). The work: 4 workers each multiply ``--size`` square matrices
``--calls`` times with torch (whose OpenMP team is per calling thread), or numpy when torch is not
installed (numpy's OpenBLAS-pthreads keeps one pool for the process). A sampler thread reads
/proc/self/task every 2 ms: the most threads running at once (state R, the sampler left out) and
the process's threads.
Prints the machine's usable parallelism first (quiet or BUSY), then per mode: wall time, threads
running at once (max, mean), the count each worker read in its own thread, and the ratios to the
unlimited run, all from one run.

    python bench/executor_blas.py [--size 384] [--calls 40] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _machine import report_machine  # bench/ is on sys.path when run as a script

MODES = ("unlimited", "threadpoolctl in main", "parinfo.worker_initializer(1)")

CHILD = r"""
import json, os, statistics, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
mode, size, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    import torch
    a = torch.rand(size, size); b = torch.rand(size, size)
    mm, lib, read = (lambda: torch.mm(a, b)), "torch " + torch.__version__, torch.get_num_threads
except ImportError:
    import numpy
    a = numpy.random.rand(size, size); b = numpy.random.rand(size, size)
    import threadpoolctl
    mm, lib = (lambda: a @ b), "numpy " + numpy.__version__
    read = lambda: threadpoolctl.threadpool_info()[0]["num_threads"]
import threadpoolctl, parinfo
kept = threadpoolctl.threadpool_limits(1) if mode == "threadpoolctl in main" else None
init = parinfo.worker_initializer(1) if mode.startswith("parinfo") else None
running, total, stop = [], [], threading.Event()
def sample():
    me = str(threading.get_native_id())  # the sampler itself runs while it reads: not counted
    while not stop.is_set():
        r = n = 0
        for tid in os.listdir("/proc/self/task"):
            if tid == me:
                continue
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    state = f.read().rpartition(")")[2].split()[0]
            except OSError:
                continue
            n += 1
            r += state == "R"
        running.append(r); total.append(n)
        time.sleep(0.002)
def task():
    for _ in range(calls):
        mm()
    return read()
with ThreadPoolExecutor(4, initializer=init) as ex:
    list(ex.map(lambda _: read(), range(4)))  # workers started, each with its pool
    sampler = threading.Thread(target=sample, daemon=True); sampler.start()
    t0 = time.perf_counter()
    counts = [f.result() for f in [ex.submit(task) for _ in range(4)]]
    wall = time.perf_counter() - t0
    stop.set(); sampler.join()
print(json.dumps({"lib": lib, "wall": wall, "running_max": max(running), "running_mean": statistics.mean(running),
                  "threads_max": max(total), "worker_counts": counts}))
"""


def _quota_group(cpus: int) -> tuple[Path | None, str]:
    """A CPU cgroup limited to ``cpus`` CPUs, and its words; (None, why) when none can be made."""
    period = 100_000
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    try:
        if v2.exists() and "cpu" in v2.read_text().split():
            group = Path(tempfile.mkdtemp(prefix="parinfo-bench-", dir="/sys/fs/cgroup"))
            (group / "cpu.max").write_text(f"{cpus * period} {period}")
            return group, f"cgroup v2 cpu.max {cpus * period} {period}"
        v1 = Path("/sys/fs/cgroup/cpu")
        if (v1 / "cpu.cfs_quota_us").exists():
            group = Path(tempfile.mkdtemp(prefix="parinfo-bench-", dir=v1))
            (group / "cpu.cfs_period_us").write_text(str(period))
            (group / "cpu.cfs_quota_us").write_text(str(cpus * period))
            return group, f"cgroup v1 cpu.cfs_quota_us {cpus * period} / {period}"
    except OSError as exc:
        return None, f"no quota ({exc.strerror or exc}: run as root)"
    return None, "no quota (no writable CPU cgroup here)"


def _run(mode: str, size: int, calls: int, group: Path | None) -> dict:
    def enter() -> None:  # in the child before exec: into the quota'd group
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(size), str(calls)], env=env, capture_output=True,
                          text=True, timeout=600, preexec_fn=enter, check=True)
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=384)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    report_machine()
    group, words = _quota_group(2)
    print(f"quota: {words}")
    try:
        best: dict[str, dict] = {}
        for _ in range(args.repeats):  # modes interleaved, the fastest of each kept
            for mode in MODES:
                got = _run(mode, args.size, args.calls, group)
                if mode not in best or got["wall"] < best[mode]["wall"]:
                    best[mode] = got
    finally:
        if group is not None:
            try:
                group.rmdir()
            except OSError:
                pass
    base = best[MODES[0]]["wall"]
    print(f"work: 4 workers x {args.calls} products of {args.size}x{args.size} ({best[MODES[0]]['lib']}); "
          f"best of {args.repeats}")
    for mode in MODES:
        r = best[mode]
        print(f"  {mode:32s} wall {r['wall']:.3f} s (x{r['wall'] / base:.2f} of unlimited)  running at once: max "
              f"{r['running_max']}, mean {r['running_mean']:.1f}  threads {r['threads_max']}  "
              f"count read in each worker {r['worker_counts']}")


if __name__ == "__main__":
    main()
