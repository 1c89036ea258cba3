"""A real OpenMP process for the spin tests and bench/spin_quota.py: short libgomp parallel regions
separated by short Python pauses, so that what the pool's worker threads do between regions (spin or
sleep, by OMP_WAIT_POLICY / GOMP_SPINCOUNT) shows in their CPU time.

The region is libgomp's own ``GOMP_parallel`` called through ctypes with the C library's ``strlen``
as the outlined body: every team member scans the same buffer, no Python and no GIL inside the region
(numpy-free). The libgomp is scikit-learn's wheel copy when installed, else the system's.
The child prints ``ready PID`` once its pool exists, waits for a line on stdin, then runs regions for
``seconds`` and prints one JSON line: each region's (start, end) on CLOCK_MONOTONIC (the same clock
in every process) and the main thread's tid.
"""
from __future__ import annotations

import contextlib
import glob
import os
import subprocess
import sysconfig
from collections.abc import Iterator
from pathlib import Path

#: Bytes each team member scans per region (about 1 ms on one core of a 2020s x86 machine).
REGION_BYTES = 4 << 20


def libgomp() -> str | None:
    """A libgomp file to load: scikit-learn's wheel copy, else the system's; None when none."""
    site = sysconfig.get_paths()["purelib"]
    found = sorted(glob.glob(os.path.join(site, "scikit_learn.libs", "libgomp*.so*")))
    found += sorted(glob.glob("/usr/lib/*/libgomp.so.1")) + sorted(glob.glob("/usr/lib64/libgomp.so.1"))
    return found[0] if found else None


CHILD = r"""
import ctypes, json, os, sys, time
gomp = ctypes.CDLL(sys.argv[1])
threads, seconds, pause = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
libc = ctypes.CDLL(None)
body = ctypes.cast(libc.strlen, ctypes.c_void_p)
buf = ctypes.create_string_buffer(b"x" * int(sys.argv[5]))
gomp.GOMP_parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
gomp.GOMP_parallel.restype = None
def region():
    gomp.GOMP_parallel(body, ctypes.cast(buf, ctypes.c_void_p), threads, 0)
region()  # the pool's worker threads exist from here
print("ready", os.getpid(), flush=True)
sys.stdin.readline()
spans, end = [], time.monotonic() + seconds
while time.monotonic() < end:
    a = time.monotonic(); region(); spans.append((a, time.monotonic()))
    time.sleep(pause)
print(json.dumps({"main": os.getpid(), "spans": spans}), flush=True)
"""


#: The same loop with numpy's OpenBLAS as the pool: one ``np.dot`` of two n x n matrices a region
#: (the first argument, the runtime file, is unused; the thread count is OPENBLAS_NUM_THREADS's).
CHILD_BLAS = r"""
import json, os, sys, time
import numpy as np
seconds, pause, n = float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
m = np.ones((n, n))
def region():
    m.dot(m)
region()
print("ready", os.getpid(), flush=True)
sys.stdin.readline()
spans, end = [], time.monotonic() + seconds
while time.monotonic() < end:
    a = time.monotonic(); region(); spans.append((a, time.monotonic()))
    time.sleep(pause)
print(json.dumps({"main": os.getpid(), "spans": spans}), flush=True)
"""


def child_argv(python: str, gomp: str, threads: int, seconds: float, pause: float,
               nbytes: int = REGION_BYTES, blas: bool = False) -> list[str]:
    """The command line of one workload process (``blas``: numpy's OpenBLAS, ``nbytes`` its n)."""
    return [python, "-c", CHILD_BLAS if blas else CHILD, gomp, str(threads), str(seconds), str(pause), str(nbytes)]


def inside(spans: list[tuple[float, float]], t0: float, t1: float) -> float:
    """Seconds of the window [t0, t1] spent inside regions."""
    return sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in spans)


@contextlib.contextmanager
def started(argv: list[str], env: dict[str, str],
            cgroup: Path | None = None) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """The workload of ``argv`` started with ``env``: once its pool exists it is moved into ``cgroup``
    (its ``cgroup.procs``; v1 moves every thread) and told to go. Yields (the pid it printed: the
    workload's own, also under a launcher such as ``parinfo apply``, and the process started); kills
    it at the end."""
    child = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdin is not None and child.stdout is not None
        pid = int(child.stdout.readline().split()[1])
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(pid))
        child.stdin.write("go\n")
        child.stdin.flush()
        yield pid, child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
