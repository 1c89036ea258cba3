"""A workload's output is drained as it comes and only its end is kept (issue: 1.19 GB kept before)."""
from __future__ import annotations

import io

import pytest
from conftest import run_py

from parinfo.tuning.tail import OutputTail

# Prints 100 MB per call and then dies before reporting; the parent's peak memory must stay far below.
BIG = ("import sys; sys.stdout.write('x' * 100_000_000 + '\\nthe end\\n'); sys.stdout.flush(); "
       "import os; os._exit(3)")


def test_tail_keeps_the_end_and_counts_the_rest():
    data = b"".join(f"line {i}\n".encode() for i in range(100_000))
    tail = OutputTail(io.BytesIO(data), limit=1000)
    text = tail.text()
    assert text.endswith("line 99999\n")
    assert text.startswith(f"[... {len(data) - 1000} earlier bytes of output not kept ...]\n")
    assert len(text) < 1100


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["stmt", "command"])
def test_a_loud_failing_workload_keeps_only_the_tail_of_its_output(how):
    arg = f"stmt={BIG!r}" if how == "stmt" else f"command=[sys.executable, '-c', {BIG!r}]"
    code = ("import sys, parinfo\n"
            "from parinfo.tuning.measure import WorkloadFailed\n"
            "try:\n"
            f"    parinfo.tune({arg}, max_threads=1, repeats=1, warmup=0, min_time=0, check_noise=False)\n"
            "except WorkloadFailed as exc:\n"
            "    print(exc.exit_code, len(exc.output), repr(exc.output[-8:]))\n"
            # VmHWM, not ru_maxrss: the latter keeps the forking parent's peak across exec.
            "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')) // 1024)\n")
    out = run_py(code, timeout=110).stdout.split("\n")
    code_, size, end = out[0].split(" ", 2)
    assert (code_, end) == ("3", repr("the end\n")), out
    assert int(size) < 70_000, out
    assert int(out[1]) < 150, f"parent peak RSS {out[1]} MB for 100 MB of output"
