"""What crafted library files cost a `parinfo host` scan: processes that map libraries named like
OpenBLAS made the ways an attacker would, against the same machine with clean libraries only,
measured in the same run.

Builds with gcc, in a temporary folder, one clean library and the crafted ones of the hostile-input
tests (tests/crafted_elf.py): a .gnu.hash bloom size of 0, a million-entry .dynsym in a sparse file
(it made one scan take 23 s), a count of 1,000,000, a file past the reader's size limit. Starts
``--copies`` processes that load the clean library (as nobody when run as root), and measures
``--repeats`` scans of nobody's processes, alternating a cold one (a fresh interpreter: nothing
parsed yet) and a warm one (a second scan of the same scanner); then starts one more process per
crafted file, touches each file again (its owner may, at will), and measures the same. Prints the
medians and what the crafted files add.

Goal: a crafted or huge file costs a scan at most 1 s more than a clean one.

    python bench/hostile.py [--copies 4] [--repeats 7]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _machine import report_machine  # bench/ is on sys.path when run as a script

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from crafted_elf import after_load_bloom_zero, build, sparse_dynsym

MAX_FILE = 512 << 20  # parinfo.process.elfcount.MAX_FILE: the reader's size limit

LOADER = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
"""

SCAN = """
import json, sys, time
import parinfo.host
from parinfo.host.scanner import Scanner
scanner = Scanner(user=sys.argv[1])
t0 = time.perf_counter(); first = scanner.scan(); t1 = time.perf_counter(); scanner.scan(); t2 = time.perf_counter()
print(json.dumps({"cold": t1 - t0, "warm": t2 - t1, "processes": len(first.processes)}))
"""


def _huge(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(MAX_FILE + 1)


def _start(path: Path, as_user: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen([*as_user, sys.executable, "-c", LOADER, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={"PATH": os.environ.get("PATH", ""), "HOME": "/tmp"})
    if proc.stdout is None or proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"a target could not load {path}")
    return proc


def _scans(user: str, repeats: int) -> tuple[list[float], list[float], int]:
    cold, warm, seen = [], [], 0
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", SCAN, user], capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise SystemExit(out.stderr)
        got = json.loads(out.stdout)
        cold.append(got["cold"] * 1e3)
        warm.append(got["warm"] * 1e3)
        seen = got["processes"]
    return cold, warm, seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if shutil.which("gcc") is None:
        raise SystemExit("needs gcc")
    report_machine()
    root = os.geteuid() == 0 and shutil.which("setpriv") is not None
    as_user = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"] if root else []
    user = "nobody" if root else str(os.geteuid())
    folder = Path(tempfile.mkdtemp(prefix="parinfo-bench-elf-"))
    folder.chmod(0o755)
    procs: list[subprocess.Popen] = []
    try:
        clean = build(folder, "libopenblas_clean.so")
        procs += [_start(clean, as_user) for _ in range(args.copies)]
        clean_cold, clean_warm, n_clean = _scans(user, args.repeats)

        crafted = [(build(folder, "libopenblas_bloom0.so"), after_load_bloom_zero),
                   (build(folder, "libopenblas_dynsym.so"), sparse_dynsym(1_000_000)),
                   (build(folder, "libopenblas_million.so", "-DCOUNT=1000000"), None),
                   (build(folder, "libopenblas_huge.so"), _huge)]
        for path, change in crafted:
            procs.append(_start(path, as_user))
            if change is not None:
                change(path)
            os.utime(path)  # the owner touches it: a new mtime must not buy a new parse
        all_cold, all_warm, n_all = _scans(user, args.repeats)
    finally:
        for proc in procs:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
        shutil.rmtree(folder, ignore_errors=True)

    def line(what: str, clean_ms: list[float], all_ms: list[float]) -> float:
        a, b = statistics.median(clean_ms), statistics.median(all_ms)
        print(f"{what:<5} scan: {a:8.1f} ms clean ({n_clean} processes), {b:8.1f} ms with the crafted files "
              f"({n_all} processes): +{b - a:.1f} ms, {b / a:.2f}x")
        return b - a

    extra = max(line("cold", clean_cold, all_cold), line("warm", clean_warm, all_warm))
    print(f"goal: at most +1000 ms a scan for the crafted files: {'PASS' if extra <= 1000 else 'FAIL'} "
          f"(+{extra:.1f} ms)")


if __name__ == "__main__":
    main()
