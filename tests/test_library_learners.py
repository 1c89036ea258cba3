"""XGBoost and LightGBM (an OpenMP team per call) and numba's threading layer: the families' rules on
made-up facts, and in real processes the count parinfo reports against the team a call really makes
(the threads a train call starts in a fresh process) and numba's own getters."""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import clean_env, run_json

from parinfo.machine.topology import machine_facts
from parinfo.process import libraries as reg
from parinfo.process.defaults import NO_FACTS
from parinfo.process.library_learners import LightGBM, XGBoost, thread_limit, xgboost_quota_cpus
from parinfo.process.provenance import MODELS, predict


def facts(cpus: int):
    return dataclasses.replace(machine_facts(), affinity=tuple(range(cpus)), logical_cpus=cpus)


# ---- the rules, on made-up facts ---------------------------------------------------------------

def test_xgboost_quota_as_xgboost_reads_it(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert xgboost_quota_cpus(str(tmp_path)) == 2  # cgroup v2: rounded up
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert xgboost_quota_cpus(str(tmp_path)) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert xgboost_quota_cpus(str(tmp_path)) == 1  # cgroup v1: rounded down
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    assert xgboost_quota_cpus(str(tmp_path)) == 1  # at least 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert xgboost_quota_cpus(str(tmp_path)) is None
    assert xgboost_quota_cpus(str(tmp_path / "absent")) is None


def test_thread_limit_takes_a_positive_count_only():
    assert thread_limit({"OMP_THREAD_LIMIT": " 3 "}) == 3
    assert thread_limit({"OMP_THREAD_LIMIT": "0"}) is None and thread_limit({"OMP_THREAD_LIMIT": "x"}) is None
    assert thread_limit({}) is None


def test_xgboost_caps_a_request_and_its_default_at_cpus_and_its_limit():
    model = MODELS["xgboost"]
    assert model.precedence == ("OMP_NUM_THREADS",)  # its OpenMP runtime's, read through it
    p = predict(model, {"OMP_NUM_THREADS": "8"}, facts(4))
    assert (p.count, p.variable) == (4, "OMP_NUM_THREADS") and "capped at 4 CPUs in affinity" in p.phrase
    assert predict(model, {}, facts(4)).count == 4
    ctx = XGBoost().context(None, {"OMP_THREAD_LIMIT": "2"})
    assert ctx.limit in (1, 2)  # 1 only where this machine's own /sys/fs/cgroup has a quota of one CPU
    assert predict(model, {}, facts(4), ctx).count == ctx.limit
    assert predict(model, {"OMP_NUM_THREADS": "3"}, facts(4), ctx).count == ctx.limit


def test_lightgbm_keeps_a_request_above_the_cpus_but_not_above_the_thread_limit():
    model = MODELS["lightgbm"]
    assert predict(model, {"OMP_NUM_THREADS": "8"}, facts(4)).count == 8
    assert predict(model, {}, facts(4)).count == 4
    ctx = LightGBM().context(None, {"OMP_THREAD_LIMIT": "2"})
    assert predict(model, {"OMP_NUM_THREADS": "8"}, facts(4), ctx).count == 2
    assert predict(model, {}, facts(4), ctx).count == 2
    assert LightGBM().context(None, {}) is NO_FACTS


def test_learners_are_read_not_set_and_list_their_variables_only_when_loaded():
    for lib in (reg.library("xgboost"), reg.library("lightgbm")):
        assert not lib.set_in_module and lib.push is reg.Push.NONE and lib.per_thread
        assert lib.variables == ()  # OMP_NUM_THREADS is its runtime's: its readers stay as they were
        assert "overrides it" in (lib.row_note(None) or "")
    assert reg.library("xgboost").read_count(SimpleNamespace()) is None  # a stand-in module: no count


def test_numba_row_note_says_its_threading_layer_without_launching_it():
    numba = reg.library("numba")
    asked = SimpleNamespace(config=SimpleNamespace(THREADING_LAYER="workqueue",
                                                   THREADING_LAYER_PRIORITY=["tbb", "omp", "workqueue"]))
    assert "NUMBA_THREADING_LAYER=workqueue" in (numba.row_note(asked) or "")
    default = SimpleNamespace(config=SimpleNamespace(THREADING_LAYER="default",
                                                     THREADING_LAYER_PRIORITY=["tbb", "omp", "workqueue"]))
    assert "the first of tbb, omp, workqueue" in (numba.row_note(default) or "")
    assert numba.row_note(SimpleNamespace()) is None


# ---- real processes ----------------------------------------------------------------------------

# Reads parinfo's rows first (nothing started), then makes one team of each library in a fresh
# process and counts the threads it started (a fresh team of N starts N-1), then runs a prange.
_PROBE = """
import json, os
import numpy as np
import numba, xgboost, lightgbm
from numba import njit, prange
import parinfo
def rows():
    return {r["library"]: r for r in parinfo.inspect().to_dict()["settings"]
            if r["library"] in ("xgboost", "lightgbm", "numba")}
def tasks():
    return len(os.listdir("/proc/self/task"))
X = np.random.rand(4000, 8); y = (X[:, 0] > .5).astype(float)
before = rows()
t = tasks(); xgboost.train({"max_depth": 3}, xgboost.DMatrix(X, label=y), 2); xgb_team = tasks() - t + 1
t = tasks(); lightgbm.train({"objective": "binary", "verbose": -1}, lightgbm.Dataset(X, label=y), 2)
lgb_team = tasks() - t + 1
@njit(parallel=True)
def f(a):
    s = 0.0
    for i in prange(a.shape[0]):
        s += a[i]
    return s
f(X[:, 0])
after = rows()
print(json.dumps({"before": before, "after": after, "xgb_team": xgb_team, "lgb_team": lgb_team,
                  "numba": [numba.get_num_threads(), numba.threading_layer()]}))
"""


def _check(out: dict, numba_layer: str) -> None:
    before, after = out["before"], out["after"]
    assert before["xgboost"]["count"] == out["xgb_team"], out
    assert before["lightgbm"]["count"] == out["lgb_team"], out
    assert "not launched yet" in before["numba"]["note"]
    assert after["numba"]["count"] == out["numba"][0]
    assert out["numba"][1] == numba_layer
    assert f"threading layer {numba_layer} (numba.threading_layer())" in after["numba"]["note"]


_BASE = {"OPENBLAS_NUM_THREADS": "1"}  # numpy's pool stays out of the thread counts


@pytest.mark.pools("xgboost", "lightgbm", "numba")
@pytest.mark.parametrize(("env", "prefix", "layer"), [
    ({}, [], "omp"),
    ({"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "NUMBA_THREADING_LAYER": "workqueue"}, [], "workqueue"),
    ({"OMP_THREAD_LIMIT": "1"}, [], "omp"),
    ({}, ["taskset", "-c", "0"], "omp"),
], ids=["unset", "variables", "thread-limit", "one-cpu"])
def test_counts_equal_the_teams_calls_make(env, prefix, layer):
    if prefix and shutil.which(prefix[0]) is None:
        pytest.skip(f"{prefix[0]} not installed")
    out = run_json(_PROBE, env=clean_env(**_BASE, **env), prefix=prefix, timeout=240)
    _check(out, layer)
    if env.get("NUMBA_NUM_THREADS") == "1":
        assert out["after"]["numba"]["source"]["text"] == "env NUMBA_NUM_THREADS=1"
        assert out["before"]["xgboost"]["source"]["text"] == "env OMP_NUM_THREADS=1"


@pytest.mark.pools("xgboost", "lightgbm", "numba")
def test_counts_in_a_quota_cgroup_nested_and_as_a_container_sees_it(quota_cgroup):
    """XGBoost reads the quota at fixed paths: a nested cgroup's is not seen; one bound over
    /sys/fs/cgroup (a container's view) is. LightGBM and numba ignore it either way."""
    procs = f"{quota_cgroup}/cgroup.procs"
    code = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", sys.executable, "-c", _PROBE]
    nested = json.loads(subprocess.run(code, env=clean_env(**_BASE), capture_output=True, text=True,
                                       timeout=240, check=True).stdout.splitlines()[-1])
    _check(nested, "omp")
    target = "/sys/fs/cgroup/cpu" if quota_cgroup.startswith("/sys/fs/cgroup/cpu/") else "/sys/fs/cgroup"
    if shutil.which("unshare") is None:
        pytest.skip("unshare not installed")
    inner = (f"mount --make-rprivate / && mount --bind {quota_cgroup} {target} && "
             f"exec {sys.executable} -c \"$0\"")
    code = ["sh", "-c", f'echo $$ > {procs} && exec unshare -m sh -c \'{inner}\' "$1"', "sh", _PROBE]
    seen = subprocess.run(code, env=clean_env(**_BASE), capture_output=True, text=True, timeout=240)
    if seen.returncode != 0 and "mount" in seen.stderr:
        pytest.skip(f"cannot bind the cgroup over {target}: {seen.stderr.strip()[-200:]}")
    container = json.loads(seen.stdout.splitlines()[-1])
    _check(container, "omp")
    assert container["xgb_team"] == 1 and "CPU quota XGBoost reads" in container["before"]["xgboost"]["source"]["text"]
