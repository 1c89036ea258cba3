"""End to end through the command line: ``parinfo apply P -- python -c ...``."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import HAVE_NUMPY, clean_env, run_cli

pytest.importorskip("parinfo.profiles.loading")

REPORT = """
import json, os, sys
out = {"env": {n: os.environ.get(n) for n in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                            "PARINFO_NUM_THREADS", "PARINFO_NUM_INTEROP_THREADS", "PARINFO_PROFILE")}}
try:
    import numpy, threadpoolctl
    out["pools"] = sorted({p["num_threads"] for p in threadpoolctl.threadpool_info()})
except ImportError:
    pass
import parinfo.runtime as rt
if hasattr(rt, "get_num_threads"):
    out["parinfo"] = [rt.get_num_threads(), rt.get_num_interop_threads()]
if "--torch" in sys.argv:
    import torch
    out["torch"] = [torch.get_num_threads(), torch.get_num_interop_threads()]
print(json.dumps(out))
"""


@pytest.fixture
def profile(tmp_path):
    def write(text: str) -> str:
        path = tmp_path / "p.yaml"
        path.write_text(text)
        return str(path)
    return write


def via(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli(*args, env=env, timeout=180)


def report(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_child_counts_equal_the_plan(profile):
    path = profile("version: 1\nname: e2e\nintra_op: 1\ninter_op: 3\n")
    out = report(via("apply", path, "--", sys.executable, "-c", REPORT))
    assert out["env"] == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                          "PARINFO_NUM_THREADS": "1", "PARINFO_NUM_INTEROP_THREADS": "3", "PARINFO_PROFILE": "e2e"}
    if HAVE_NUMPY:
        assert out["pools"] == [1]
    if "parinfo" in out:
        assert out["parinfo"] == [1, 3]


@pytest.mark.torch
def test_torch_counts_equal_the_plan(profile):
    path = profile("version: 1\nname: e2e\nintra_op: 1\ninter_op: 3\n")
    proc = via("apply", path, "--", sys.executable, "-c", REPORT, "--torch")
    assert report(proc)["torch"] == [1, 3]
    assert "not in force" not in proc.stderr


def test_user_variable_kept_then_forced(profile):
    path = profile("version: 1\nname: e2e\nintra_op: 1\ninter_op: 1\n")
    env = clean_env(OMP_NUM_THREADS="2")
    kept = via("apply", path, "--", sys.executable, "-c", REPORT, env=env)
    assert report(kept)["env"]["OMP_NUM_THREADS"] == "2"
    assert "parinfo: keeping OMP_NUM_THREADS='2'" in kept.stderr
    forced = via("apply", path, "--force", "--", sys.executable, "-c", REPORT, env=env)
    assert report(forced)["env"]["OMP_NUM_THREADS"] == "1"


def test_exit_code_and_not_found(profile):
    path = profile("version: 1\nname: e2e\nintra_op: 1\ninter_op: 1\n")
    assert via("apply", path, "--", sys.executable, "-c", "raise SystemExit(9)").returncode == 9
    missing = via("apply", path, "--", "parinfo-no-such-command")
    assert missing.returncode == 127 and missing.stderr.strip().endswith("command not found: parinfo-no-such-command")


@pytest.mark.parametrize("instances", [[], ["--instances", "2"]])
def test_a_command_that_cannot_run_names_the_reason_as_tune_does(profile, tmp_path, instances):
    path = profile("version: 1\nname: e2e\nintra_op: 1\ninter_op: 1\n")
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o644)
    for target, what in ((tmp_path, "it is a directory"), (script, "it is not executable")):
        proc = via("apply", path, *instances, "--", str(target))
        assert proc.returncode == 126 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1
        tune = run_cli("tune", "--", str(target), env=clean_env())
        assert tune.returncode == 2
        for err in (proc.stderr, tune.stderr):  # long paths are shortened by apply, not by tune
            assert err.startswith("parinfo: error: cannot run '")
            assert err.strip().endswith(f"': permission denied ({what})")


def test_bad_profile_runs_nothing_and_exits_2_in_one_line(profile):
    path = profile("version: 1\nname: e2e\nintra_op: 0\ninter_op: 1\n")
    proc = via("apply", path, "--", sys.executable, "-c", "print('ran')")
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("parinfo: error:")
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")
def test_multi_instance_children_report_disjoint_affinities():
    code = "import os; print(os.environ['PARINFO_INSTANCE'], sorted(os.sched_getaffinity(0)))"
    proc = via("apply", "multi-instance", "--instances", "2", "--", sys.executable, "-c", code)
    if proc.returncode == 2:
        pytest.skip(f"this machine cannot hold two instances: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        prefix, index, cpus = line.split(" ", 2)
        assert prefix == f"[{index}]"
        rows[index] = set(json.loads(cpus))
    assert set(rows) == {"0", "1"}
    assert rows["0"] and rows["1"] and not rows["0"] & rows["1"]


@pytest.mark.parametrize("argv, expected", [
    (["apply", "p", "--", "x"], dict(profile="p", command=["x"])),
    (["apply", "--force", "p", "--instances", "3", "--", "x", "--json"],
     dict(profile="p", command=["x", "--json"], force=True, instances=3)),
    (["apply", "p", "--instances=2", "--", "x", "--", "y"], dict(profile="p", command=["x", "--", "y"], instances=2)),
])
def test_plain_launches_skip_the_cli_framework(argv, expected):
    from parinfo.cli.launch import ApplyArgs, plain_launch

    assert plain_launch(argv) == ApplyArgs(**expected)


@pytest.mark.parametrize("argv", [
    ["apply", "p"], ["apply", "p", "--"], ["show", "p", "--", "x"], ["apply", "--", "x"],
    ["apply", "p", "--json", "--", "x"], ["apply", "p", "q", "--", "x"], ["apply", "p", "--instances", "0", "--", "x"],
    ["apply", "p", "--instances", "--", "x"], ["apply", "p", "-h", "--", "x"],
    ["apply", "p", "--instances", "x", "--", "y"],
])
def test_every_other_form_goes_to_the_full_cli(argv):
    from parinfo.cli.launch import plain_launch

    assert plain_launch(argv) is None


def test_the_full_cli_launches_the_same_way(profile):
    path = profile("version: 1\nname: e2e\nintra_op: 1\ninter_op: 3\n")
    code = ("import sys; from parinfo.cli._app import app; "
            f"app(args=['apply', {path!r}, '--', sys.executable, '-c', {REPORT!r}], prog_name='parinfo')")
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True,
                          timeout=180)
    assert report(proc)["env"]["PARINFO_NUM_INTEROP_THREADS"] == "3"


def test_plain_launch_does_not_load_the_cli_framework(profile):
    path = profile("version: 1\nname: e2e\nintra_op: 1\ninter_op: 1\n")
    code = (
        "import json, sys\n"
        "import parinfo.launch.run as launch\n"
        "def record(plan, command, **options):\n"
        "    print(json.dumps(sorted(m for m in ('typer', 'rich', 'click') if m in sys.modules)))\n"
        "    return 7\n"
        "launch.run_plan = record\n"
        f"sys.argv = ['parinfo', 'apply', {path!r}, '--', 'x']\n"
        "from parinfo.cli import main\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 7, proc.stderr
    assert json.loads(proc.stdout) == []
