"""Added start-up time of ``parinfo apply P -- python -c pass`` over plain ``python -c pass``.

Measured in one run, interleaved, medians of repeats. Besides the whole command it times two parts:
the launcher alone (a hand-built plan given to parinfo.launch.run.run_plan: no CLI, no profile loading),
and the start-up hook alone (``python -c pass`` with the hook's environment).
Goal: whole < 150 ms. The timed commands run with bytecode caching on (PYTHONDONTWRITEBYTECODE is
removed), as after a normal install.

    python bench/apply.py [--repeats 15] [--profile latency]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from _machine import report_machine  # bench/ is on sys.path when run as a script

LAUNCHER = r"""
import sys
from parinfo.profiles.plan import Plan, Setting
from parinfo.launch.run import run_plan

env = {"PARINFO_NUM_THREADS": "1", "PARINFO_NUM_INTEROP_THREADS": "1", "OMP_NUM_THREADS": "1",
       "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
plan = Plan("bench", "", "bench", Setting("intra_op", 1, ""), Setting("inter_op", 1, ""), {}, env)
sys.exit(run_plan(plan, sys.argv[1:]))
"""




def parinfo_cmd() -> list[str]:
    # The interpreter running this bench, never a `parinfo` script found on PATH: that one may belong
    # to another Python whose start-up differs from the anchor's.
    return [sys.executable, "-m", "parinfo"]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def failure(cmd: list[str], env: dict[str, str]) -> str | None:
    """Why ``cmd`` does not run cleanly (exit code or output on stderr), or None."""
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0 or proc.stderr:
        tail = proc.stderr.strip().splitlines()[-1:] or [""]
        return f"exit {proc.returncode}: {tail[0]}"
    return None


def hook_env(base: dict[str, str]) -> dict[str, str]:
    from parinfo.launch.child import child_environ
    from parinfo.profiles.plan import Plan, Setting

    plan = Plan("bench", "", "bench", Setting("intra_op", 1, ""), Setting("inter_op", 1, ""), {},
                {"OMP_NUM_THREADS": "1"})
    return child_environ(plan, base).env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--profile", default="latency")
    args = parser.parse_args()
    report_machine()

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMP_", "MKL_", "OPENBLAS_", "PARINFO_")) and k != "PYTHONDONTWRITEBYTECODE"}
    child = [sys.executable, "-c", "pass"]
    whole_name = f"parinfo apply {args.profile} -- python -c pass"
    cases = {
        "python -c pass (anchor)": (child, env),
        "hook only": (child, hook_env(env)),
        "launcher (run_plan)": ([sys.executable, "-c", LAUNCHER, *child], env),
        whole_name: ([*parinfo_cmd(), "apply", args.profile, "--", *child], env),
    }
    for name, (cmd, case_env) in list(cases.items()):  # warm caches; a broken case is said, not timed
        problem = failure(cmd, case_env)
        if problem:
            print(f"{name}: cannot be timed: {problem}")
            del cases[name]
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, (cmd, case_env) in cases.items():
            samples[name].append(timed(cmd, case_env))

    anchor = statistics.median(samples["python -c pass (anchor)"])
    print(f"{'case':48} {'median ms':>10} {'added ms':>9} {'ratio':>6}")
    for name, values in samples.items():
        med = statistics.median(values)
        print(f"{name:48} {med * 1e3:10.1f} {(med - anchor) * 1e3:9.1f} {med / anchor:6.2f}")
    if whole_name not in samples:
        raise SystemExit(1)
    whole = statistics.median(samples[whole_name]) - anchor
    print(f"added start-up of the whole command: {whole * 1e3:.1f} ms (goal < 150 ms): "
          f"{'met' if whole < 0.150 else 'NOT met'}  [{args.repeats} repeats, {os.cpu_count()} CPUs]")


if __name__ == "__main__":
    main()
