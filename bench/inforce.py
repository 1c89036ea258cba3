"""Reading counts in force from outside: parinfo.outside.inforce.counts_in_force over N numpy processes.

Measured in one run: the first scan (each library file parsed once with pyelftools, then cached),
a warm scan (cache hits: maps, one open of each file to check its inode, one pread per library), and
the anchor, a bare read of /proc/PID/maps of the same processes (what any scan of loaded libraries
costs at least). Prints the usable parallelism first: figures taken on a busy machine are not quoted.

    python bench/inforce.py [--processes 8] [--repeats 20]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from _machine import report_machine  # bench/ is on sys.path when run as a script

TARGET = "import sys, numpy, scipy.linalg; print('up', flush=True); sys.stdin.readline()"


def _maps(pids: list[int]) -> None:
    for pid in pids:
        with open(f"/proc/{pid}/maps", "rb") as fh:
            fh.read()


def main(argv: list[str] | None = None) -> int:
    from parinfo.outside import inforce

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    report_machine()
    procs = [subprocess.Popen([sys.executable, "-c", TARGET], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for _ in range(args.processes)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "up\n"
        pids = [p.pid for p in procs]

        t0 = time.perf_counter()
        rows = [inforce.counts_in_force(pid) for pid in pids]
        cold = time.perf_counter() - t0
        read = sum(r.count is not None for rs in rows for r in rs)

        def timed(fn: object) -> float:
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                fn()  # type: ignore[operator]
                times.append(time.perf_counter() - t)
            return statistics.median(times)

        warm = timed(lambda: [inforce.counts_in_force(pid) for pid in pids])
        anchor = timed(lambda: _maps(pids))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    n = args.processes
    print(f"{n} numpy+scipy processes, {read} counts read from memory ({inforce.cache_size()} files parsed)")
    print(f"first scan (files parsed): {1e3 * cold:.1f} ms ({1e3 * cold / n:.2f} ms per process)")
    print(f"warm scan (cached):        {1e3 * warm:.2f} ms ({1e3 * warm / n:.3f} ms per process)")
    print(f"anchor, read maps only:    {1e3 * anchor:.2f} ms")
    print(f"ratio warm scan / anchor:  {warm / anchor:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
