"""What parinfo's pytest plugin adds to a pytest session's start, measured in one run.

A project of one trivial test module is collected (``pytest --collect-only``, header included) without the
plugin, with ``-p parinfo.pytest_plugin`` (the header's check), and with ``--parinfo-budget`` (the
share applied in the one process), interleaved; prints the median wall time of each and what the
plugin adds (goal: <= 50 ms).

    python bench/pytest_plugin.py [--repeats 11]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import report_machine  # bench/ is on sys.path when run as a script

GOAL_MS = 50.0


def wall(cmd: list[str], cwd: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=11)
    args = ap.parse_args()
    report_machine()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # cached bytecode, as users run it
    base = [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider"]  # not -q: the header is built
    commands = {
        "pytest": base,
        "pytest -p parinfo.pytest_plugin": [*base, "-p", "parinfo.pytest_plugin"],
        "... --parinfo-budget": [*base, "-p", "parinfo.pytest_plugin", "--parinfo-budget"],
    }
    with tempfile.TemporaryDirectory() as project:
        Path(project, "test_one.py").write_text("def test_one():\n    assert True\n")
        for cmd in commands.values():  # warm the page cache and the bytecode
            wall(cmd, project, env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeats):
            for name, cmd in commands.items():  # interleaved, so drift hits all alike
                times[name].append(wall(cmd, project, env))
    med = {name: statistics.median(ts) * 1000 for name, ts in times.items()}
    anchor = med["pytest"]
    print(f"pytest session start (collect one test), median of {args.repeats} interleaved runs:")
    for name, m in med.items():
        print(f"  {name:34s} {m:7.1f} ms   ratio to pytest alone {m / anchor:5.2f}")
    for name in ("pytest -p parinfo.pytest_plugin", "... --parinfo-budget"):
        added = med[name] - anchor
        print(f"ADDED {name}: {added:+.1f} ms (goal <= {GOAL_MS:.0f} ms) {'PASS' if added <= GOAL_MS else 'FAIL'}")


if __name__ == "__main__":
    main()
