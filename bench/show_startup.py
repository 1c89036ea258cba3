"""Start-up cost of `parinfo show` against `python -m threadpoolctl -i numpy`, measured in one run.

Prints the median whole-process wall time of each over interleaved repeats (the order reversed
every other round), their ratio, and the median of the ratios taken within each round (goal: both
<= 1.2), then the in-process cost of `parinfo.parallel_info()` after its first call
(goal: < 5 ms). It also runs `parinfo show` with every record made by `dataclasses.dataclass`
instead of `parinfo.records.record` (patched before any parinfo module defines one), to tell whether
record.py still earns its place.

    python bench/show_startup.py [--repeats 15]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from _machine import report_machine  # bench/ is on sys.path when run as a script

# The same `parinfo show`, run in -c so that the record helper can be replaced first.
SHOW = "import sys; from parinfo.cli import main; sys.argv = ['parinfo', 'show']; main()\n"
DATACLASSES = ("import dataclasses, parinfo.records.record as r\n"
               "def _dc(cls=None, /, *, frozen=False, order=False):\n"
               "    make = lambda c: dataclasses.dataclass(frozen=frozen, order=order)(c)\n"
               "    return make if cls is None else make(cls)\n"
               "r.record = _dc\n")


def wall(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    report_machine()
    env = dict(os.environ, NO_COLOR="1", COLUMNS="160")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure with cached bytecode, as users run it
    commands = {
        "parinfo show": [sys.executable, "-m", "parinfo", "show"],
        "parinfo show --json": [sys.executable, "-m", "parinfo", "show", "--json"],
        "threadpoolctl -i numpy": [sys.executable, "-m", "threadpoolctl", "-i", "numpy"],
        "python -c 'import numpy'": [sys.executable, "-c", "import numpy"],
        "show, records": [sys.executable, "-c", SHOW],
        "show, dataclasses": [sys.executable, "-c", DATACLASSES + SHOW],
    }
    for cmd in commands.values():  # warm the page cache
        wall(cmd, env)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(args.repeats):
        order = list(commands.items())
        for name, cmd in order if round_ % 2 == 0 else order[::-1]:  # interleaved, so drift hits all alike
            times[name].append(wall(cmd, env))
    med = {name: statistics.median(ts) for name, ts in times.items()}
    anchor = med["threadpoolctl -i numpy"]
    print(f"whole-process wall time, median of {args.repeats} interleaved runs:")
    for name, m in med.items():
        print(f"  {name:28s} {m * 1000:7.1f} ms   ratio to threadpoolctl {m / anchor:5.2f}")
    ratio = med["parinfo show"] / anchor
    # The same ratio taken within each round (the two ran seconds apart), then its median: this
    # machine's slow spells, which last several rounds, fall on both sides of each of these ratios.
    paired = sorted(s / a for s, a in zip(times["parinfo show"], times["threadpoolctl -i numpy"], strict=True))
    quartiles = statistics.quantiles(paired, n=4) if len(paired) > 1 else [paired[0]] * 3
    verdict = "PASS" if max(ratio, quartiles[1]) <= 1.2 else "FAIL"
    print(f"RATIO parinfo show / threadpoolctl -i numpy = {ratio:.2f} (of the medians); within each round: "
          f"median {quartiles[1]:.2f}, quartiles {quartiles[0]:.2f}-{quartiles[2]:.2f} (goal <= 1.2, both) {verdict}")
    saved = med["show, dataclasses"] - med["show, records"]
    print(f"records: parinfo.records.record saves {saved * 1000:.1f} ms of a show against dataclasses.dataclass "
          f"(ratio {med['show, dataclasses'] / med['show, records']:.3f})")

    code = (
        "import time, statistics, numpy, parinfo\n"
        "t0 = time.perf_counter(); parinfo.parallel_info(); first = time.perf_counter() - t0\n"
        "ts = []\n"
        "for _ in range(50):\n"
        "    t0 = time.perf_counter(); parinfo.parallel_info(); ts.append(time.perf_counter() - t0)\n"
        "import threadpoolctl\n"
        "ta = []\n"
        "for _ in range(50):\n"
        "    t0 = time.perf_counter(); threadpoolctl.threadpool_info(); ta.append(time.perf_counter() - t0)\n"
        "print(first * 1e3, statistics.median(ts) * 1e3, statistics.median(ta) * 1e3)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    first, again, anchor_ms = (float(x) for x in out.stdout.split())
    print(f"parallel_info() in-process: first call {first:.1f} ms, then median {again:.2f} ms (goal < 5 ms); "
          f"threadpoolctl.threadpool_info() {anchor_ms:.2f} ms; ratio {again / anchor_ms:.2f}")
    print("at the end, ", end="")
    report_machine()


if __name__ == "__main__":
    main()
