"""`parinfo watch --pid` on a pool whose idle threads spin under a CPU quota, then on the same program
launched by `parinfo apply container` (its profile's ``wait_policy: passive``): how soon the
``idle spin`` verdict comes, and the throttled periods over the same samples, both in one run.

The program is tests/spin_workload.py: libgomp parallel regions of about 1 ms separated by 5 ms
Python pauses, 2 threads, ``OMP_WAIT_POLICY=active`` in the first case. Each case runs in a fresh
cgroup v1 with a 0.5-CPU quota (removed in a finally). Needs root and /sys/fs/cgroup/cpu.

    PYTHONPATH=. python bench/spin_watch.py [--samples 10] [--quota 0.5]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _machine import report_machine  # bench/ is on sys.path when run as a script
from real_cgroup import quota_cgroup
from spin_workload import child_argv, libgomp, started


def one(fixed: bool, samples: int, quota: float, gomp: str) -> dict[str, object]:
    """Watch one case: the seconds to the first idle-spin verdict, spin samples, throttled periods."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    argv = child_argv(sys.executable, gomp, 2, samples + 10, 0.005)
    if fixed:
        argv = [sys.executable, "-m", "parinfo", "apply", "container", "--", *argv]
    else:
        env["OMP_WAIT_POLICY"] = "active"
    with quota_cgroup(quota) as made:
        if isinstance(made, str):
            raise SystemExit(f"spin_watch: {made}")
        cg, _ = made
        with started(argv, env, cg) as (pid, _):
            start = time.monotonic()
            watch = subprocess.Popen([sys.executable, "-m", "parinfo", "watch", "--pid", str(pid), "--json",
                                      "--samples", str(samples)], stdout=subprocess.PIPE, text=True, cwd="/")
            first, spun, throttled, periods = None, 0, 0, 0
            assert watch.stdout is not None
            for line in watch.stdout:
                s = json.loads(line)
                t = s.get("throttling") or {}
                throttled, periods = throttled + t.get("throttled", 0), periods + t.get("periods", 0)
                if s.get("spin") and s["verdict"].startswith("idle spin"):
                    spun += 1
                    first = first if first is not None else round(time.monotonic() - start, 1)
            watch.wait(timeout=30)
    return {"case": "apply container" if fixed else "OMP_WAIT_POLICY=active", "first_idle_spin_s": first,
            "idle_spin_samples": spun, "samples": samples, "throttled": throttled, "periods": periods}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--quota", type=float, default=0.5)
    args = parser.parse_args()
    gomp = libgomp()
    if gomp is None:
        raise SystemExit("spin_watch: no libgomp (scikit-learn's wheel or the system's)")
    report_machine()
    print(f"quota {args.quota} CPU, {args.samples} one-second samples of parinfo watch --pid each")
    for fixed in (False, True):
        r = one(fixed, args.samples, args.quota, gomp)
        first = "never" if r["first_idle_spin_s"] is None else f"first after {r['first_idle_spin_s']} s"
        print(f"{r['case']:24}  idle-spin verdict in {r['idle_spin_samples']} of {r['samples']} samples ({first}); "
              f"throttled {r['throttled']} of {r['periods']} periods")


if __name__ == "__main__":
    main()
