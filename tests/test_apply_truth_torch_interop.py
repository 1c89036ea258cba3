"""A program that sets torch's inter-op count itself runs under `parinfo apply` as it runs without.

The start-up hook makes torch's one set_num_interop_threads call; the program's own call must not
raise where it does not without parinfo, and one stderr line says which count is in force. Ground
truth: the real torch's getter, and the threads torch's inter-op pool really starts (PTThreadPool).
Each program is run twice, with and without parinfo. Programs end with os._exit: torch 2.13 can
abort at interpreter exit once its inter-op pool has run (`terminate called without an active
exception`, with or without parinfo, most often with a 1-thread pool), which is not under test here.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import clean_env

pytestmark = pytest.mark.torch

# Starts torch's inter-op pool (a scripted fork runs on it) and counts its threads.
POOL = '''
import json, os, sys, torch

@torch.jit.script
def _one(x):
    return x + 1

@torch.jit.script
def _fork(x):
    return torch.jit.wait(torch.jit.fork(_one, x))

def _named_pool_threads():
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            names.append(open("/proc/self/task/%s/comm" % t).read().strip())
        except OSError:
            pass
    return names.count("PTThreadPool")

def pool_threads():
    # a pool thread names itself once it runs: on a busy machine the second may not have yet,
    # so count until the number holds for 0.3 s (at most 5 s)
    import time
    _fork(torch.zeros(1))
    seen, since, end = _named_pool_threads(), time.monotonic(), time.monotonic() + 5
    while time.monotonic() < end and time.monotonic() - since < 0.3:
        time.sleep(0.05)
        now = _named_pool_threads()
        if now != seen:
            seen, since = now, time.monotonic()
    return seen

def main():
    try:
        body()
    except Exception as exc:
        print("raised %s: %s" % (type(exc).__name__, exc))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

def body():
'''


def run(tmp_path, body: str, *, profile: str | None = "latency") -> subprocess.CompletedProcess:
    script = tmp_path / "prog.py"
    script.write_text(POOL + "".join("    " + line + "\n" for line in body.splitlines()) + "main()\n")
    prefix = [sys.executable, "-m", "parinfo", "apply", profile, "--"] if profile else []
    return subprocess.run([*prefix, sys.executable, str(script)], check=False, env=clean_env(), capture_output=True,
                          text=True, timeout=180)


def parinfo_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("parinfo:")]


def test_the_programs_own_inter_op_call_does_not_raise_and_one_line_says_what_is_in_force(tmp_path):
    body = ("torch.set_num_interop_threads(2)\n"
            "print(json.dumps({'get': torch.get_num_interop_threads(), 'threads': pool_threads()}))\n")
    alone = run(tmp_path, body, profile=None)
    assert alone.returncode == 0, alone.stderr
    assert json.loads(alone.stdout) == {"get": 2, "threads": 2}

    under = run(tmp_path, body)  # latency: inter_op 1
    assert under.returncode == 0, under.stderr
    assert json.loads(under.stdout) == {"get": 1, "threads": 1}
    lines = parinfo_lines(under.stderr)
    assert len(lines) == 1, under.stderr
    assert lines[0].startswith("parinfo: torch inter-op threads stay 1 (profile latency), not the 2 this "
                               "program asked for")
    assert "Traceback" not in under.stderr


def test_the_same_count_as_the_profiles_is_silent(tmp_path):
    body = "torch.set_num_interop_threads(1)\nprint(torch.get_num_interop_threads(), pool_threads())\n"
    under = run(tmp_path, body)
    assert under.returncode == 0, under.stderr
    assert under.stdout.split() == ["1", "1"]
    assert parinfo_lines(under.stderr) == []


@pytest.mark.parametrize("body", [
    "torch.set_num_interop_threads(2)\ntorch.set_num_interop_threads(2)\n",  # a second call
    "pool_threads()\ntorch.set_num_interop_threads(2)\n",                   # after the pool started
    "torch.set_num_interop_threads(0)\n",                                  # a bad count
    "torch.set_num_interop_threads('2')\n",                                # a bad type
], ids=["second-call", "after-pool-start", "zero", "string"])
def test_a_call_torch_refuses_without_parinfo_raises_the_same_under_it(tmp_path, body):
    alone = run(tmp_path, body, profile=None)
    under = run(tmp_path, body)
    assert alone.returncode == under.returncode == 0, (alone.stderr, under.stderr)
    assert alone.stdout.startswith(("raised RuntimeError: ", "raised TypeError: "))
    assert under.stdout == alone.stdout
