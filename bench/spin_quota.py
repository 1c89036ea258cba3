"""Idle OpenMP threads that spin under a CPU quota: measured in real processes.

For each wait policy (OMP_WAIT_POLICY active / passive / unset, GOMP_SPINCOUNT=0), a workload process
(tests/spin_workload.py: libgomp parallel regions of about 1 ms separated by Python pauses) is moved
into a fresh cgroup v1 with cpu.cfs_quota_us=50000 / cpu.cfs_period_us=100000 (0.5 CPU;
tests/real_cgroup.py's, removed in a finally). Over one window: each thread's CPU time (schedstat's
first field) and run-queue wait (its second), the window's time inside regions, and the cgroup's
cpu.stat (nr_periods, nr_throttled, throttled_time). Needs root and a cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu.

    PYTHONPATH=. python bench/spin_quota.py [--seconds 5] [--pause 0.005] [--threads 2] [--quota 0.5]
        [--policies active,unset,passive,spincount0] [--runtime /usr/lib/llvm-14/lib/libomp.so]
        [--blas --region-bytes 256 --policies blas-default,blas-timeout4]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from real_cgroup import quota_cgroup
from spin_workload import REGION_BYTES, child_argv, inside, libgomp, started

from parinfo.machine.procfs import Proc
from parinfo.process.spin import idle_spin
from parinfo.process.tasks import thread_stats

CPU = Path("/sys/fs/cgroup/cpu")
KNOBS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OPENBLAS_THREAD_TIMEOUT", "OPENBLAS_NUM_THREADS")
POLICIES = {"active": {"OMP_WAIT_POLICY": "active"}, "unset": {},
            "passive": {"OMP_WAIT_POLICY": "passive"}, "spincount0": {"GOMP_SPINCOUNT": "0"},
            "blocktime0": {"KMP_BLOCKTIME": "0"}, "active+blocktime0": {"OMP_WAIT_POLICY": "active",
                                                                        "KMP_BLOCKTIME": "0"},
            "blas-default": {"OPENBLAS_NUM_THREADS": "2"},
            "blas-timeout4": {"OPENBLAS_NUM_THREADS": "2", "OPENBLAS_THREAD_TIMEOUT": "4"}}


def cpu_stat(cg: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in (cg / "cpu.stat").read_text().splitlines())}


def thread_times(pid: int) -> dict[int, tuple[int, int]]:
    """tid -> (ns on a CPU, ns runnable but waiting), from schedstat."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            run, wait = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[:2]
        except (OSError, ValueError):
            continue
        out[int(tid)] = (int(run), int(wait))
    return out


def one(policy: str, args: argparse.Namespace, gomp: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    env.update(POLICIES[policy])
    argv = child_argv(sys.executable, gomp, args.threads, args.seconds + 2, args.pause, args.region_bytes,
                      blas=args.blas)
    with quota_cgroup(args.quota) as made:
        if isinstance(made, str):
            sys.exit(f"spin_quota: {made}")
        cg, _ = made
        with started(argv, env, cg) as (pid, proc):
            time.sleep(1.0)  # settle: the first regions after the move
            t0, s0, c0, p0 = time.monotonic(), thread_times(pid), cpu_stat(cg), thread_stats(Proc.of(pid))
            short = []  # idle_spin over the 0.3 s windows `parinfo show --pid` samples
            while time.monotonic() < t0 + args.seconds - 0.3:
                a, q0 = time.monotonic(), thread_stats(Proc.of(pid))
                time.sleep(0.3)
                short.append(idle_spin(q0, thread_stats(Proc.of(pid)), pid, time.monotonic() - a) is not None)
            time.sleep(max(0.0, t0 + args.seconds - time.monotonic()))
            t1, s1, c1, p1 = time.monotonic(), thread_times(pid), cpu_stat(cg), thread_stats(Proc.of(pid))
            assert proc.stdout is not None
            report = json.loads(proc.stdout.readline())
            proc.wait(timeout=10)
    dt = t1 - t0
    threads = {}
    for tid, (run, wait) in s1.items():
        r0, w0 = s0.get(tid, (0, 0))
        name = "main" if tid == pid else f"worker {tid}"
        threads[name] = {"cpu_percent": round(100 * (run - r0) / 1e9 / dt, 1),
                         "wait_percent": round(100 * (wait - w0) / 1e9 / dt, 1)}
    spans = [tuple(s) for s in report["spans"]]
    n = sum(1 for a, b in spans if a >= t0 and b <= t1)
    found = idle_spin(p0, p1, pid, t1 - t0)
    return {"policy": policy, "window_s": round(dt, 2), "regions": n,
            "inside_percent": round(100 * inside(spans, t0, t1) / dt, 1),
            "threads": threads, "periods": c1["nr_periods"] - c0["nr_periods"],
            "throttled": c1["nr_throttled"] - c0["nr_throttled"],
            "throttled_ms": round((c1["throttled_time"] - c0["throttled_time"]) / 1e6, 1),
            "idle_spin": None if found is None else {"threads": len(found.threads),
                                                     "idle_cpu_percent": found.idle_cpu_percent},
            "found_in_0.3s_windows": f"{sum(short)} of {len(short)}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--pause", type=float, default=0.005)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quota", type=float, default=0.5)
    ap.add_argument("--region-bytes", type=int, default=REGION_BYTES, help="bytes each thread scans per region")
    ap.add_argument("--policies", default="active,unset,passive,spincount0")
    ap.add_argument("--blas", action="store_true", help="numpy's OpenBLAS as the pool: --region-bytes is "
                    "the n of an n x n np.dot; use --policies blas-default,blas-timeout4")
    ap.add_argument("--runtime", default=None, help="an OpenMP runtime file to load (libomp/libiomp export "
                    "GOMP_parallel too); default: libgomp")
    args = ap.parse_args()
    gomp = args.runtime or libgomp()
    if gomp is None or os.geteuid() != 0 or not (CPU / "cpu.cfs_quota_us").exists():
        sys.exit("needs root, a cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu and an OpenMP runtime")
    pool = "numpy's OpenBLAS (np.dot, n = --region-bytes)" if args.blas else f"runtime {gomp}"
    print(f"# {pool}; {os.cpu_count()} CPUs; quota {args.quota} CPU; pause {args.pause * 1e3:g} ms; "
          f"region {args.region_bytes}; "
          f"{args.threads} threads; window {args.seconds:g} s")
    for policy in args.policies.split(","):
        print(json.dumps(one(policy, args, gomp)), flush=True)


if __name__ == "__main__":
    main()
