"""parallel_info() after its first call in a process holding every pool of issue 38 (goal: <= 5 ms).

Builds the process of bench/pool_census.py (an ONNX Runtime session, Polars, pyarrow, DuckDB, a numba
prange run, a tokenizers batch encode, OpenCV, XGBoost, LightGBM, numpy; a library not installed is
skipped with a line), then prints, in this one process: the usable parallelism of the machine at the
start (quiet or BUSY: figures from a busy machine are not to be quoted), the first call's time, the
medians of parallel_info() and inspect() over ``--repeats`` calls after it, and the anchor,
threadpoolctl.threadpool_info() (its native pools only), with the ratio.

    python bench/report_speed.py [--repeats 200]
"""
from __future__ import annotations

import argparse
import os
import sys

from _machine import report_machine  # bench/ is on sys.path when run as a script
from pool_census import STEPS, timings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    report_machine()
    print(f"python {sys.version.split()[0]}")
    for name, fn in STEPS:
        try:
            said = fn()
        except Exception as exc:  # not installed, or failing here: the others are still measured
            print(f"  {name:12s} skipped: {type(exc).__name__}: {exc}")
            continue
        print(f"  {name:12s} {said}")
    print(f"OS threads: {len(os.listdir('/proc/self/task'))}")
    timings(args.repeats)


if __name__ == "__main__":
    main()
