"""Cost of `parinfo watch` itself: its CPU time while it watches a busy process, at 1 s interval.

Starts a target with busy threads, then `parinfo watch --pid TARGET --json --interval 1` and, in
the same run, the anchor: a bare Python loop that reads the target's /proc/PID/stat once per
interval (the least any Python sampler can do). After the first sample (start-up excluded), each
watcher's user+system CPU time is read from /proc over ``--seconds``. Prints the percent of one CPU
each uses and the ratio to the anchor. Goal: watch under 2% of one CPU at 1 s.

    python bench/watch.py [--seconds 20] [--threads 4] [--interval 1]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from _machine import report_machine  # bench/ is on sys.path when run as a script

TARGET = r"""
import sys, threading, time
def spin():
    while True:
        pass
for i in range(int(sys.argv[1])):
    threading.Thread(target=spin, name="spin-%d" % i, daemon=True).start()
time.sleep(3600)
"""

ANCHOR = r"""
import sys, time

pid, interval = int(sys.argv[1]), float(sys.argv[2])
print("ready", flush=True)
while True:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        fh.read()
    time.sleep(interval)
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        rest = fh.read().rsplit(b")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def measure(cmd: list[str], seconds: float) -> tuple[float, int]:
    """Percent of one CPU that ``cmd`` uses over ``seconds`` after its first output line, and the
    lines it printed meanwhile."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()  # start-up done: the first sample (or "ready") is out
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
    finally:
        proc.kill()
        out, _ = proc.communicate()
    return 100 * (c1 - c0) / (t1 - t0), len(out.splitlines())


def main(argv: list[str] | None = None) -> int:
    from parinfo.machine.topology import machine_facts

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=4, help="busy threads in the watched process")
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args(argv)
    report_machine()

    facts = machine_facts()
    print(f"machine: {facts.usable_cpus} usable CPUs ({facts.usable_physical_cores} physical cores); "
          f"target with {args.threads} busy threads; {args.seconds:g} s at {args.interval:g} s interval")
    target = subprocess.Popen([sys.executable, "-c", TARGET, str(args.threads)])
    try:
        time.sleep(0.5)
        watch_pct, samples = measure([sys.executable, "-m", "parinfo", "watch", "--pid", str(target.pid),
                                      "--json", "--interval", str(args.interval)], args.seconds)
        anchor_pct, _ = measure([sys.executable, "-c", ANCHOR, str(target.pid), str(args.interval)],
                                args.seconds)
    finally:
        target.kill()
        target.wait()
    print(f"parinfo watch: {watch_pct:.2f}% of one CPU ({samples} samples; goal < 2%)")
    print(f"anchor (read /proc/PID/stat per interval): {anchor_pct:.2f}% of one CPU")
    if anchor_pct > 0:
        print(f"ratio watch / anchor: {watch_pct / anchor_pct:.1f}x")
    else:
        print("ratio: anchor below the clock-tick resolution; watch's own figure stands alone")
    return 0 if watch_pct < 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
