"""End to end: a command launched under a hand-built Plan sees the plan in force (real subprocesses)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import HAVE_NUMPY, clean_env

# Builds a Plan from JSON (argv[1]) and runs the rest of argv under it, the way the CLI does.
LAUNCHER = r"""
import json, sys
from parinfo.profiles.plan import InstancePlan, Plan, Setting
from parinfo.launch.run import run_plan
spec = json.loads(sys.argv[1])
intra, inter = spec["intra"], spec["inter"]
env = {"PARINFO_NUM_THREADS": str(intra), "PARINFO_NUM_INTEROP_THREADS": str(inter)}
for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS"):
    env[name] = str(intra)
env.update(spec.get("env", {}))
insts = tuple(InstancePlan(i, tuple(c), spec["inst_intra"], 1,
                           {n: str(spec["inst_intra"]) for n in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                                 "OPENBLAS_NUM_THREADS")})
              for i, c in enumerate(spec.get("instances", [])))
libs = {"torch": Setting("torch", spec["torch"], "given")} if "torch" in spec else {}
plan = Plan(spec.get("name", "handmade"), "", "test", Setting("intra_op", intra, "given"),
            Setting("inter_op", inter, "given"), libs, env, {},
            tuple(spec["affinity"]) if spec.get("affinity") else None, "given", insts)
sys.exit(run_plan(plan, sys.argv[2:], force=spec.get("force", False), replace=spec.get("replace", True)))
"""


def launch_cmd(spec: dict, *command: str) -> list[str]:
    return [sys.executable, "-c", LAUNCHER, json.dumps(spec), *command]


def launch(spec: dict, *command: str, env: dict | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(launch_cmd(spec, *command), env=env if env is not None else clean_env(),
                          capture_output=True, text=True, timeout=timeout)


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def last_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


REPORT_ENV = "import json, os; print(json.dumps({n: os.environ.get(n) for n in %r}))"


def test_variables_profile_name_and_affinity_reach_the_child():
    names = ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "PARINFO_NUM_THREADS", "PARINFO_PROFILE"]
    code = REPORT_ENV % names + "; print(json.dumps(sorted(os.sched_getaffinity(0))))"
    proc = launch({"intra": 1, "inter": 1, "name": "lat", "affinity": [0]}, *py(code))
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.strip().splitlines()[-2:]
    assert json.loads(first) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PARINFO_NUM_THREADS": "1",
                                 "PARINFO_PROFILE": "lat"}
    assert json.loads(second) == [0]


@pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")
def test_native_pools_take_the_plans_count():
    code = ("import json, numpy, threadpoolctl; pools = threadpoolctl.threadpool_info(); "
            "print(json.dumps(sorted({p['user_api']: p['num_threads'] for p in pools}.items())))")
    proc = launch({"intra": 1, "inter": 1}, *py(code))
    pools = dict(last_json(proc))
    assert pools and set(pools.values()) == {1}, pools


def test_parinfo_runtime_counts_equal_the_plan():
    runtime = pytest.importorskip("parinfo.runtime")
    if not hasattr(runtime, "get_num_threads"):
        pytest.skip("parinfo.runtime is not complete in this tree")
    code = ("import json, parinfo; "
            "print(json.dumps([parinfo.get_num_threads(), parinfo.get_num_interop_threads()]))")
    proc = launch({"intra": 1, "inter": 3}, *py(code))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [1, 3]


@pytest.mark.torch
def test_torch_counts_are_set_when_torch_is_imported():
    code = ("import json, torch; "
            "print(json.dumps([torch.get_num_threads(), torch.get_num_interop_threads()]))")
    proc = launch({"intra": 1, "inter": 3}, *py(code), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [1, 3]
    assert "not in force" not in proc.stderr


@pytest.mark.torch
def test_torch_libraries_entry_decides_torchs_intra_count():
    code = "import torch; print(torch.get_num_threads())"
    proc = launch({"intra": 1, "inter": 1, "torch": 2}, *py(code), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == "2"


def test_user_value_kept_without_force_with_one_line():
    code = REPORT_ENV % ["OMP_NUM_THREADS", "MKL_NUM_THREADS"]
    proc = launch({"intra": 1, "inter": 1}, *py(code), env=clean_env(OMP_NUM_THREADS="2"))
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "1"}
    kept = [line for line in proc.stderr.splitlines() if line.startswith("parinfo: keeping")]
    assert len(kept) == 1 and "OMP_NUM_THREADS='2'" in kept[0], proc.stderr


def test_user_value_overridden_with_force():
    code = REPORT_ENV % ["OMP_NUM_THREADS"]
    proc = launch({"intra": 1, "inter": 1, "force": True}, *py(code), env=clean_env(OMP_NUM_THREADS="2"))
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"OMP_NUM_THREADS": "1"}
    assert "overriding OMP_NUM_THREADS='2'" in proc.stderr


@pytest.mark.parametrize("replace", [True, False])
def test_exit_code_is_the_childs(replace):
    proc = launch({"intra": 1, "inter": 1, "replace": replace}, *py("import sys; sys.exit(7)"))
    assert proc.returncode == 7


def test_child_killed_by_signal_gives_128_plus_n_when_not_replaced():
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    proc = launch({"intra": 1, "inter": 1, "replace": False}, *py(code))
    assert proc.returncode == 128 + signal.SIGKILL


@pytest.mark.parametrize("replace", [True, False])
def test_command_not_found_gives_127_and_one_line(replace):
    proc = launch({"intra": 1, "inter": 1, "replace": replace}, "parinfo-no-such-command", "x")
    assert proc.returncode == 127
    assert proc.stderr.strip() == "parinfo: error: command not found: parinfo-no-such-command"


def test_command_not_executable_gives_126(tmp_path):
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\necho hi\n")
    proc = launch({"intra": 1, "inter": 1}, str(script))
    assert proc.returncode == 126
    assert proc.stderr.startswith("parinfo: error: cannot run") and len(proc.stderr.splitlines()) == 1


def test_no_shell_is_involved():
    proc = launch({"intra": 1, "inter": 1}, "echo", "$HOME", ";", "*")
    assert proc.returncode == 0 and proc.stdout == "$HOME ; *\n"


def test_affinity_outside_the_allowed_cpus_is_one_line_and_nothing_runs():
    bad = max(os.sched_getaffinity(0)) + 1
    proc = launch({"intra": 1, "inter": 1, "affinity": [bad]}, *py("print('ran')"))
    assert proc.returncode != 0 and "ran" not in proc.stdout
    assert "ApplyError" in proc.stderr and f"CPUs {bad}" in proc.stderr


WAIT_FOR_TERM = (
    "import signal, sys, time\n"
    "def on(sig, frame):\n"
    "    print('got', sig, flush=True); sys.exit(5)\n"
    "signal.signal(signal.SIGTERM, on)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(0.05)\n"  # short: a signal caught just before a sleep began waits for its end
)


def _wait_ready(proc: subprocess.Popen, count: int = 1) -> list[str]:
    lines = []
    deadline = time.monotonic() + 60
    while sum("ready" in line for line in lines) < count and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    return lines


@pytest.mark.timeout(90)
@pytest.mark.parametrize("replace", [True, False])
def test_a_signal_sent_to_the_launcher_reaches_the_child(replace):
    proc = subprocess.Popen(launch_cmd({"intra": 1, "inter": 1, "replace": replace}, *py(WAIT_FOR_TERM)),
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_ready(proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert f"got {int(signal.SIGTERM)}" in out, err
    assert proc.returncode == 5


def test_empty_command_is_a_usage_error():
    proc = launch({"intra": 1, "inter": 1})
    assert proc.returncode != 0 and "UsageError" in proc.stderr and "no command to run" in proc.stderr


def test_launch_module_stays_lean():
    code = ("import sys, parinfo.launch.run; heavy = ('numpy', 'threadpoolctl', 'yaml', 'psutil', 'rich', 'torch',"
            " 'subprocess', 'selectors'); print([m for m in heavy if m in sys.modules])")
    out = subprocess.run(py(code), env=clean_env(), capture_output=True, text=True, timeout=60).stdout
    assert out.strip() == "[]"
