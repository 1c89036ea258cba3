"""parinfo.fork of a TorchScript callable runs on torch's own inter-op pool, asynchronously (a fork
made from Python with torch.jit.fork runs at once), and parinfo.wait takes torch's future."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import clean_env, words

pytestmark = pytest.mark.torch

PRELUDE = """
import json, os, time, faulthandler
from typing import Optional, Tuple
import torch
import parinfo
from parinfo.runtime import RUNTIME
faulthandler.dump_traceback_later(100, exit=True)

class Member(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = torch.nn.LSTM(16, 16, bidirectional=True)

    def forward(self, x: torch.Tensor, scale: float = 1.0, n: Optional[int] = None) -> torch.Tensor:
        return self.cell(x)[0] * scale

def heavy(a: torch.Tensor, rounds: int) -> torch.Tensor:
    for _ in range(rounds):
        a = torch.tanh(a @ a)
    return a

def pair(a: torch.Tensor, k: int) -> Tuple[torch.Tensor, int]:
    return a + k, k

def failing(a: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("member failed")

def pt_threads():
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    return sum(n.startswith("PTThreadPool") for n in names)
"""


def _run(tmp_path: Path, body: str, **env: str) -> dict:
    """Run PRELUDE + body from a file (TorchScript needs source) in a fresh process."""
    script = tmp_path / "job.py"
    exit_now = "\nos._exit(0)  # torch may abort at exit after scripted fork\n"
    script.write_text(PRELUDE + textwrap.dedent(body) + exit_now)
    proc = subprocess.run([sys.executable, str(script)], env=clean_env(**env), capture_output=True,
                          text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_scripted_tasks_run_on_torchs_pool_while_the_caller_goes_on(tmp_path: Path) -> None:
    out = _run(tmp_path, """
        torch.set_num_threads(1)
        h = torch.jit.script(heavy)
        a = torch.rand(256, 256) / 256
        before = pt_threads()
        futs = [parinfo.fork(h, a, 400) for _ in range(2)]
        pending = [not f.done() for f in futs]  # a fork made from Python would have finished here
        outs = [parinfo.wait(f) for f in futs]
        print(json.dumps({"before": before, "after": pt_threads(), "pending": pending,
                          "same": all(torch.allclose(o, h(a, 400)) for o in outs),
                          "kinds": sorted({type(f).__name__ for f in futs}),
                          "launched": [launcher is not None
                                       for _, launcher in RUNTIME.torch_forks._launchers.values()]}))
    """, PARINFO_NUM_INTEROP_THREADS="2")
    assert out["before"] == 0 and out["after"] == 2
    assert out["pending"] == [True, True] and out["same"]
    assert out["kinds"] == ["Future"] and out["launched"] == [True]


def test_modules_with_defaults_and_keywords_and_functions_with_tuples(tmp_path: Path) -> None:
    out = _run(tmp_path, """
        torch.manual_seed(0)
        members = [torch.jit.script(Member()) for _ in range(3)]
        x = torch.randn(5, 2, 16)
        with torch.no_grad():  # torch.jit.wait deadlocks here; parinfo.wait must not
            plain = [parinfo.wait(parinfo.fork(m, x)) for m in members]
            scaled = [parinfo.wait(parinfo.fork(m, x, scale=2.0)) for m in members]
            given = [parinfo.wait(parinfo.fork(m, x, 3.0, 4)) for m in members]
            ok = all(torch.allclose(p, m(x)) and torch.allclose(s, 2 * m(x)) and torch.allclose(g, 3 * m(x))
                     for p, s, g, m in zip(plain, scaled, given, members))
        p = torch.jit.script(pair)
        value = parinfo.wait(parinfo.fork(p, torch.ones(2), k=3))
        missing = parinfo.fork(p, torch.ones(2))  # leaves out k: parinfo's pool calls it, and it fails
        try:
            parinfo.wait(missing)
            missing_error = None
        except RuntimeError as e:
            missing_error = str(e).splitlines()[0]
        f = parinfo.fork(torch.jit.script(failing), x)
        try:
            parinfo.wait(f)
            failed = None
        except RuntimeError as e:
            failed = "member failed" in str(e)
        print(json.dumps({"ok": ok, "value": [value[0].tolist(), value[1]], "missing": missing_error,
                          "missing_kind": type(missing).__module__, "failed": failed}))
    """)
    assert out["ok"]
    assert out["value"] == [[4.0, 4.0], 3]
    assert out["missing_kind"] == "parinfo.runtime.future" and "missing value for argument 'k'" in out["missing"]
    assert out["failed"] is True


def test_sequential_backend_runs_scripted_tasks_inline(tmp_path: Path) -> None:
    out = _run(tmp_path, """
        h = torch.jit.script(heavy)
        f = parinfo.fork(h, torch.rand(8, 8), 2)
        print(json.dumps({"kind": type(f).__module__, "done": f.done(), "pt": pt_threads()}))
    """, PARINFO_BACKEND="sequential")
    assert out == {"kind": "parinfo.runtime.future", "done": True, "pt": 0}


needs_two = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")


@needs_two
def test_pool_threads_get_the_budgets_native_threads_per_lane(tmp_path: Path) -> None:
    # 2 pool threads x 2 OpenMP threads on 2 CPUs: each pool thread gets 1, and keeps no OpenMP
    # team (a team's threads inherit its creator's name, so they would show as PTThreadPool);
    # a thread that waits for a pending task frees its own idle team, which would spin meanwhile
    out = _run(tmp_path, """
        def plain_threads():  # named like the main thread: the interpreter's file name (python, python3, ...)
            me = open("/proc/self/comm").read().strip()
            return sum(open(f"/proc/self/task/{t}/comm").read().strip() == me
                       for t in os.listdir("/proc/self/task"))
        h = torch.jit.script(heavy)
        a = torch.rand(256, 256) / 256
        alone = plain_threads()  # printed for the record
        for _ in range(3):
            h(a, 3)  # the main thread's own team, which spins a while after each region
            with_team = plain_threads()
            futs = [parinfo.fork(h, a, 40) for _ in range(4)]
            outs = [parinfo.wait(f) for f in futs]
            time.sleep(0.05)  # freed team threads exit on their own
            waited = plain_threads()  # the waiting thread gave its team up
        print(json.dumps({"pool": RUNTIME.info()["torch_pool"], "pt": pt_threads(), "main": torch.get_num_threads(),
                          "threads": [alone, with_team, waited],
                          "same": all(torch.allclose(o, h(a, 40)) for o in outs)}))
    """, PARINFO_NUM_THREADS="2", PARINFO_NUM_INTEROP_THREADS="2")
    assert words(out["pool"]) == {"threads": 2, "native_per_lane": 1, "source": "parinfo", "pinned": 2}
    assert out["pool"]["source"]["kind"] == "run-time call"
    assert out["pt"] == 2 and out["main"] == 2 and out["same"]
    _alone, with_team, waited = out["threads"]
    assert with_team > waited


def test_a_pool_the_program_sized_is_left_alone(tmp_path: Path) -> None:
    out = _run(tmp_path, """
        torch.set_num_interop_threads(3)
        h = torch.jit.script(heavy)
        f = parinfo.fork(h, torch.rand(8, 8), 2)
        parinfo.wait(f)
        print(json.dumps({"pool": RUNTIME.info()["torch_pool"], "torch": torch.get_num_interop_threads()}))
    """)
    assert out["torch"] == 3 and out["pool"]["threads"] == 3 and out["pool"]["native_per_lane"] is None
