"""Cost of the process facts (pools, environment, torch, threads, provenance) against threadpoolctl.

In fresh processes with numpy imported (numpy's import is not counted), measures each function's
first call (which includes importing threadpoolctl) and its later calls; the anchor is
``import threadpoolctl; threadpoolctl.threadpool_info()`` in fresh processes of the same run,
interleaved. Prints medians and ratios. Goal: all process facts together under 15 ms on a first call.

    python bench/process_facts.py [--repeats 9] [--torch]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from _machine import report_machine  # bench/ is on sys.path when run as a script

PARTS = ("import_probes", "native_pools", "threading_layers", "launch_environment", "environment_report",
         "torch_info", "live_threads", "library_settings")
TOTAL = "all process facts"
ANCHOR = "anchor: import threadpoolctl + threadpool_info()"

PARINFO = r"""
import json, os, sys, time
import numpy
if {torch!r}:
    import torch
out = {{}}

def timed(name, fn):
    t0 = time.perf_counter(); value = fn(); out.setdefault(name, []).append((time.perf_counter() - t0) * 1e3)
    return value

from parinfo.machine.topology import machine_facts
facts = machine_facts()
for i in range(6):
    t_all = time.perf_counter()
    from parinfo.process import environment, frameworks, pools, probing as probe, provenance, threads
    timed("import_probes", lambda: probe.import_probes(None))
    p = timed("native_pools", pools.native_pools)
    timed("threading_layers", lambda: pools.threading_layers(p))
    launch = timed("launch_environment", environment.launch_environment)
    timed("environment_report", lambda: environment.environment_report(os.environ, launch))
    t = timed("torch_info", frameworks.torch_info)
    timed("live_threads", threads.live_threads)
    timed("library_settings", lambda: provenance.library_settings(p, t, os.environ, launch, facts))
    out.setdefault({total!r}, []).append((time.perf_counter() - t_all) * 1e3)
print(json.dumps(out))
"""

THREADPOOLCTL = r"""
import json, time
import numpy

if {torch!r}:
    import torch
ts = []
for i in range(6):
    t0 = time.perf_counter()
    import threadpoolctl
    threadpoolctl.threadpool_info()
    ts.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({{{anchor!r}: ts}}))
"""


# Users' installs have byte-code caches: let the children write and use them.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run(code: str) -> dict[str, list[float]]:
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=ENV)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--torch", action="store_true", help="import torch too (its rows are then measured)")
    args = ap.parse_args()
    report_machine()
    first: dict[str, list[float]] = {}
    later: dict[str, list[float]] = {}
    for code in (PARINFO, THREADPOOLCTL):  # warm the page and byte-code caches
        run(code.format(torch=args.torch, total=TOTAL, anchor=ANCHOR))
    for _ in range(args.repeats):  # interleaved, so drift hits both alike
        for code in (PARINFO, THREADPOOLCTL):
            for name, ts in run(code.format(torch=args.torch, total=TOTAL, anchor=ANCHOR)).items():
                first.setdefault(name, []).append(ts[0])
                later.setdefault(name, []).extend(ts[1:])
    med_f = {k: statistics.median(v) for k, v in first.items()}
    med_l = {k: statistics.median(v) for k, v in later.items()}
    print(f"median ms over {args.repeats} fresh processes "
          f"(numpy imported{', torch imported' if args.torch else ''}; numpy's import not counted)")
    print(f"  {'':50s} {'first call':>10s} {'later':>8s}")
    for name in (*PARTS, TOTAL, ANCHOR):
        print(f"  {name:50s} {med_f[name]:10.2f} {med_l[name]:8.3f}")
    print(f"TOTAL first call {med_f[TOTAL]:.2f} ms (goal < 15), later calls {med_l[TOTAL]:.2f} ms")
    print(f"RATIO first call / threadpoolctl first call = {med_f[TOTAL] / med_f[ANCHOR]:.2f}; "
          f"later / threadpool_info later = {med_l[TOTAL] / med_l[ANCHOR]:.2f}")


if __name__ == "__main__":
    main()
