"""Idle OpenMP threads that spin under a CPU quota: measured in real processes.

For each wait policy (OMP_WAIT_POLICY active / passive / unset, GOMP_SPINCOUNT=0), a workload process
(tests/spin_workload.py: libgomp parallel regions of about 1 ms separated by Python pauses) is moved
into a fresh cgroup v1 with cpu.cfs_quota_us=50000 / cpu.cfs_period_us=100000 (0.5 CPU; removed in a
finally). Over one window: each thread's CPU time (schedstat's first field) and run-queue wait (its
second), the window's time inside regions, and the cgroup's cpu.stat (nr_periods, nr_throttled,
throttled_time). Needs root and a cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu.

    python bench/spin_quota.py [--seconds 5] [--pause 0.005] [--threads 2] [--quota 0.5]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from spin_workload import child_argv, inside, libgomp

CPU = Path("/sys/fs/cgroup/cpu")
POLICIES = {"active": {"OMP_WAIT_POLICY": "active"}, "unset": {},
            "passive": {"OMP_WAIT_POLICY": "passive"}, "spincount0": {"GOMP_SPINCOUNT": "0"}}


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
    cg = CPU / f"parinfo-spin-{uuid.uuid4().hex[:8]}"
    cg.mkdir()
    proc = None
    try:
        (cg / "cpu.cfs_period_us").write_text("100000")
        (cg / "cpu.cfs_quota_us").write_text(str(int(args.quota * 100000)))
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        env.update(POLICIES[policy])
        proc = subprocess.Popen(child_argv(sys.executable, gomp, args.threads, args.seconds + 2, args.pause),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdin is not None and proc.stdout is not None
        pid = int(proc.stdout.readline().split()[1])
        (cg / "cgroup.procs").write_text(str(pid))  # v1: moves every thread of the process
        proc.stdin.write("go\n")
        proc.stdin.flush()
        time.sleep(1.0)  # settle: the first regions after the move
        t0, s0, c0 = time.monotonic(), thread_times(pid), cpu_stat(cg)
        time.sleep(args.seconds)
        t1, s1, c1 = time.monotonic(), thread_times(pid), cpu_stat(cg)
        report = json.loads(proc.stdout.readline())
        proc.wait(timeout=10)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    dt = t1 - t0
    threads = {}
    for tid, (run, wait) in s1.items():
        r0, w0 = s0.get(tid, (0, 0))
        name = "main" if tid == pid else f"worker {tid}"
        threads[name] = {"cpu_percent": round(100 * (run - r0) / 1e9 / dt, 1),
                         "wait_percent": round(100 * (wait - w0) / 1e9 / dt, 1)}
    spans = [tuple(s) for s in report["spans"]]
    n = sum(1 for a, b in spans if a >= t0 and b <= t1)
    return {"policy": policy, "window_s": round(dt, 2), "regions": n,
            "inside_percent": round(100 * inside(spans, t0, t1) / dt, 1),
            "threads": threads, "periods": c1["nr_periods"] - c0["nr_periods"],
            "throttled": c1["nr_throttled"] - c0["nr_throttled"],
            "throttled_ms": round((c1["throttled_time"] - c0["throttled_time"]) / 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--pause", type=float, default=0.005)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quota", type=float, default=0.5)
    ap.add_argument("--policies", default=",".join(POLICIES))
    args = ap.parse_args()
    gomp = libgomp()
    if gomp is None or os.geteuid() != 0 or not (CPU / "cpu.cfs_quota_us").exists():
        sys.exit("needs root, a cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu and a libgomp")
    print(f"# libgomp {gomp}; {os.cpu_count()} CPUs; quota {args.quota} CPU; pause {args.pause * 1e3:g} ms; "
          f"{args.threads} OpenMP threads; window {args.seconds:g} s")
    for policy in args.policies.split(","):
        print(json.dumps(one(policy, args, gomp)), flush=True)


if __name__ == "__main__":
    main()
