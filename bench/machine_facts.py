"""Cost of reading the machine facts, against the anchors, measured in one run.

- machine_facts() after the first call (topology cached; affinity and cgroup files re-read) against
  psutil's physical-core count plus os.sched_getaffinity (the two calls most tools make, which see
  neither cgroup quotas nor cpusets). Goal: under 2 ms.
- cpu_identity()'s fast path, uncached (first call in a process: /proc/cpuinfo + sysfs), against one
  py-cpuinfo get_cpu_info() call. Goal: under 1 ms.

Run: python bench/machine_facts.py [--repeats N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from _machine import report_machine  # bench/ is on sys.path when run as a script


def per_call(fn, number: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean seconds per call over ``number`` calls."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    report_machine()

    import cpuinfo
    import psutil

    from parinfo.machine import cpuid
    from parinfo.machine.topology import machine_facts

    machine_facts()  # first call reads and caches the sysfs topology

    def anchor_counts():
        psutil.cpu_count(logical=False)
        os.sched_getaffinity(0)

    def fast_identity():
        cpuid._fast.cache_clear()
        cpuid.cpu_identity()

    facts = per_call(machine_facts, 200, args.repeats)
    anchor = per_call(anchor_counts, 200, args.repeats)
    print(f"machine_facts() warm      : {facts * 1e3:8.3f} ms  (goal < 2 ms)")
    print(f"psutil + sched_getaffinity: {anchor * 1e3:8.3f} ms")
    print(f"ratio machine_facts/anchor: {facts / anchor:8.2f}")

    ident = per_call(fast_identity, 100, args.repeats)
    slow = per_call(cpuinfo.get_cpu_info, 1, max(3, args.repeats // 2))
    print(f"cpu_identity() uncached   : {ident * 1e3:8.3f} ms  (goal < 1 ms)")
    print(f"cpu_identity() cached     : {per_call(cpuid.cpu_identity, 1000, args.repeats) * 1e3:8.3f} ms")
    print(f"py-cpuinfo get_cpu_info() : {slow * 1e3:8.1f} ms")
    print(f"ratio cpu_identity/py-cpuinfo: {ident / slow:.5f}")


if __name__ == "__main__":
    main()
