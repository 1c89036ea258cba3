"""Many attaches at once to one busy target: how many answer, in how long, and what the others say.

``sys.remote_exec`` keeps one pending script per thread, so attaches that do not take turns overwrite
each other. This starts one Python 3.14 target whose main thread runs Python code without pause,
then ``--count`` processes of ``parinfo show --pid P --attach --json`` at once, and prints how many
answered with JSON, the wall time until the last ended, and each distinct refusal line. With
``--against DIR`` (another checkout of parinfo, e.g. a git worktree of an older commit) the same is
done for it in the same run, target and machine alike, each arm alternating ``--rounds`` times.

    python bench/attach_concurrent.py [--count 20] [--rounds 2] [--against DIR]

Needs Python 3.14 (tests/py314.py's interpreter runs the target and the attaches). Prints the usable
parallelism first.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = "import numpy\nwhile True:\n    sum(range(10000))\n"


def _python314() -> str:
    sys.path.insert(0, str(REPO / "tests"))
    from py314 import venv_python

    python, why = venv_python()
    if python is None:
        sys.exit(f"bench/attach_concurrent.py needs Python 3.14: {why}")
    return python


def one_round(python: str, tree: Path, count: int) -> tuple[int, float, dict[str, int]]:
    """(answers, seconds until the last attach ended, {refusal line: how many}) for ``tree``."""
    target = subprocess.Popen([python, "-c", TARGET])
    try:
        time.sleep(1.0)  # numpy imported, the loop running
        env = dict(os.environ, PYTHONPATH=str(tree))
        started = time.monotonic()
        procs = [subprocess.Popen([python, "-m", "parinfo", "show", "--pid", str(target.pid), "--attach", "--json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tree)
                 for _ in range(count)]
        answered, refusals = 0, {}
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            if proc.returncode == 0:
                json.loads(out)
                answered += 1
            else:
                line = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
                refusals[line[0][:160]] = refusals.get(line[0][:160], 0) + 1
        return answered, time.monotonic() - started, refusals
    finally:
        target.kill()
        target.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--against", type=Path, default=None, help="another checkout of parinfo to run beside this one")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _machine import report_machine

    python = _python314()
    report_machine()
    arms = [("this tree", REPO)] + ([("against", args.against.resolve())] if args.against else [])
    for r in range(args.rounds):
        for name, tree in arms:
            answered, took, refusals = one_round(python, tree, args.count)
            print(f"round {r + 1}, {name} ({tree}): {answered} of {args.count} answered, {took:.1f} s until the "
                  f"last ended", flush=True)
            for line, n in sorted(refusals.items()):
                print(f"    {n} x {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
