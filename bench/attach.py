"""Attach round trip: ``inspect(pid=P, attach=True)`` beside ``inspect(pid=P)`` (show --pid, read from
outside) and beside bare ``sys.remote_exec`` calls, in one run, against one numpy process on Python 3.14.

Measured, median and p95 over ``--repeats`` rounds, in this order each round:

- outside: ``inspect(pid=P)`` (what ``show --pid P`` gathers, from /proc only);
- attach: ``inspect(pid=P, attach=True)`` with the call made here (parinfo on 3.14);
- attach via the target's interpreter: the same with the call made by the target's own interpreter
  run as a helper (what parinfo on an older Python does);
- bare call: ``sys.remote_exec(P, empty script)`` alone (it returns once the request is written);
- bare round trip: ``sys.remote_exec`` of a script that only closes a FIFO, until its end is seen
  (the wait for the target's next bytecode included: the floor of any answer);
- in-process report: ``parinfo.inspect()`` timed inside a second, identical target.

The goal (docs/process.md): attach within 3x (bare round trip + in-process report). The target's main
thread sleeps 1 ms at a time, so the script waits at most that long. Needs Python 3.14: run it with
the interpreter of tests/py314.py, or let it re-run itself there. Prints the usable parallelism first.

    python bench/attach.py [--repeats 30]
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

REPO = Path(__file__).resolve().parent.parent
TARGET = """
import sys, time, numpy
from threadpoolctl import threadpool_limits
threadpool_limits(1)
if sys.argv[1:] == ["inspect"]:
    import parinfo
    parinfo.inspect()
    took = []
    for _ in range(20):
        t = time.perf_counter()
        parinfo.inspect()
        took.append(time.perf_counter() - t)
    took.sort()
    print(took[len(took) // 2], took[int(len(took) * 0.95)], flush=True)
    sys.exit(0)
print("up", flush=True)
while True:
    time.sleep(0.001)
"""


def _on_314() -> None:
    """Re-run this script under the Python 3.14 of tests/py314.py when this one is older."""
    if sys.version_info[:2] >= (3, 14):
        return
    sys.path.insert(0, str(REPO / "tests"))
    from py314 import venv_python

    python, why = venv_python()
    if python is None:
        sys.exit(f"bench/attach.py needs Python 3.14: {why}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    os.execve(python, [python, __file__, *sys.argv[1:]], env)


def _stats(times: list[float]) -> str:
    times = sorted(times)
    return f"median {1e3 * statistics.median(times):7.2f} ms   p95 {1e3 * times[int(0.95 * (len(times) - 1))]:7.2f} ms"


def main(argv: list[str] | None = None) -> int:
    _on_314()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _machine import report_machine

    from parinfo.diagnostics.report import inspect
    from parinfo.outside.attach import sender

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args(argv)
    report_machine()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    target = subprocess.Popen([sys.executable, "-c", TARGET], stdout=subprocess.PIPE, text=True, env=env)
    folder = tempfile.mkdtemp(prefix="parinfo-bench-")
    empty, fifo = os.path.join(folder, "empty.py"), os.path.join(folder, "f")
    Path(empty).write_text("")
    os.mkfifo(fifo, 0o600)
    Path(os.path.join(folder, "close.py")).write_text(f"import os\nos.close(os.open({fifo!r}, os.O_WRONLY))\n")
    times: dict[str, list[float]] = {k: [] for k in ("outside", "attach", "attach via target", "bare call",
                                                     "bare round trip")}
    here = sender.can_call_here
    try:
        assert target.stdout is not None and target.stdout.readline() == "up\n"
        pid = target.pid
        inspect(pid=pid, attach=True)  # warm: modules imported, files read once
        for _ in range(args.repeats):
            t = time.perf_counter()
            inspect(pid=pid)
            times["outside"].append(time.perf_counter() - t)
            t = time.perf_counter()
            inspect(pid=pid, attach=True)
            times["attach"].append(time.perf_counter() - t)
            sender.can_call_here = lambda: False  # type: ignore[assignment]  # as from parinfo on an older Python
            try:
                t = time.perf_counter()
                inspect(pid=pid, attach=True)
                times["attach via target"].append(time.perf_counter() - t)
            finally:
                sender.can_call_here = here  # type: ignore[assignment]
            t = time.perf_counter()
            sys.remote_exec(pid, empty)  # type: ignore[attr-defined]
            times["bare call"].append(time.perf_counter() - t)
            time.sleep(0.005)  # the empty script runs before the next round
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            t = time.perf_counter()
            sys.remote_exec(pid, os.path.join(folder, "close.py"))  # type: ignore[attr-defined]
            os.set_blocking(reader, True)
            while True:
                import select

                select.select([reader], [], [], 5)
                if os.read(reader, 1) == b"":
                    break
            times["bare round trip"].append(time.perf_counter() - t)
            os.close(reader)
    finally:
        target.kill()
        target.wait()
        for name in ("empty.py", "close.py", "f"):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)
    own = subprocess.run([sys.executable, "-c", TARGET, "inspect"], capture_output=True, text=True, env=env, check=True)
    median, p95 = (float(x) for x in own.stdout.split())
    print(f"Python {sys.version.split()[0]}, {args.repeats} rounds, target: numpy, OpenBLAS limited to 1")
    for name, found in times.items():
        print(f"{name:<28}{_stats(found)}")
    print(f"{'in-process report':<28}median {1e3 * median:7.2f} ms   p95 {1e3 * p95:7.2f} ms   (inside the target)")
    floor = statistics.median(times["bare round trip"]) + median
    attach = statistics.median(times["attach"])
    print(f"attach / (bare round trip + in-process report): {attach / floor:.1f}x (goal: 3x or less)")
    print(f"attach / outside: {attach / statistics.median(times['outside']):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
