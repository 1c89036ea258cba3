"""The runtimes' own default counts beside parinfo's rounding (parinfo/machine/runtime_readings.py):
Node (libuv), CPython's os.process_cpu_count(), torch, ONNX Runtime and DuckDB, on fake cgroup trees,
and in real v1 cgroups at three quotas against node, java, Python 3.14, torch, ONNX Runtime and DuckDB
themselves (each skipped cleanly where it is not installed or no cgroup can be made)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import real_cgroup
from conftest import clean_env
from fake_trees import FakeMachine
from py314 import venv_python  # tests/py314.py: Python 3.14, made once under the tests' cache

from parinfo.machine import rounding, runtime_readings
from parinfo.machine.topology import machine_facts

NEW_ROWS = ("node", "node20", "python", "torch", "onnxruntime", "duckdb")


def _rows(root: str, **env: str) -> dict[str, int]:
    return machine_facts(root, environ=env).usable_by_rule


# -- the rules, on fake trees -------------------------------------------------------------------

def test_every_runtime_is_listed_once_and_answered(tmp_path):
    root = FakeMachine(tmp_path).cpus(4).build()
    assert list(_rows(root)) == list(rounding.RUNTIMES)
    assert rounding.RUNTIMES.keys() >= set(NEW_ROWS)


def test_a_fractional_quota_in_a_container(tmp_path):
    # The container's cgroup is mounted at /sys/fs/cgroup (cgroup namespace): every reader finds it.
    root = FakeMachine(tmp_path).cpus(8, smt=2).cgroup_v2("/pod", cpu_max={"/pod": "150000 100000"},
                                                         mount_root="/pod").affinity([0, 1, 2, 8]).build()
    rows = _rows(root)
    assert rows["node"] == 1  # libuv 1.51+: floor, at least 1
    assert rows["node20"] == rows["python"] == 4  # the affinity mask, no quota
    assert rows["torch"] == 3  # physical cores with a CPU in affinity: 0/8, 1, 2
    assert rows["onnxruntime"] == 4  # the machine's physical cores
    assert rows["duckdb"] == 2  # ceil(1.5), affinity ignored


def test_half_a_cpu_libuv_and_duckdb_give_one(tmp_path):
    rows = _rows(FakeMachine(tmp_path).cpus(2).cgroup_v2("/job", cpu_max={"/job": "50000 100000"}).build())
    assert (rows["node"], rows["duckdb"], rows["node20"], rows["python"]) == (1, 1, 2, 2)


def test_a_pod_level_limit_go_and_duckdb_miss_libuv_keeps_the_outermost(tmp_path):
    # kubelet's pod-level limit: 2.5 CPUs on the pod's cgroup, none on the container's (its leaf).
    root = FakeMachine(tmp_path).cpus(8).cgroup_v2("/kubepods/pod1/ctr", cpu_max={
        "/kubepods/pod1": "250000 100000", "/kubepods/pod1/ctr": "max 100000"}).build()
    f = machine_facts(root, environ={})
    assert f.quota == 2.5 and f.usable_cpus == 2
    rows = f.usable_by_rule
    assert rows["go"] == 8 and rows["duckdb"] == 8  # the leaf only (and the mount's root, unlimited)
    assert (rows["jdk"], rows["rust"], rows["nproc"], rows["node"]) == (3, 2, 3, 2)


def test_libuv_keeps_the_outermost_quota_not_the_tightest(tmp_path):
    root = FakeMachine(tmp_path).cpus(8).cgroup_v2("/a/b", cpu_max={"/a": "400000 100000",
                                                                     "/a/b": "150000 100000"}).build()
    rows = _rows(root)
    assert rows["node"] == 4 and rows["rust"] == 1 and rows["duckdb"] == 2  # leaf 1.5: ceil


def test_v1_quota_is_read_by_duckdb_not_by_libuv(tmp_path):
    root = FakeMachine(tmp_path).cpus(4).cgroup_v1("/job", quota={"/job": (150000, 100000)}).build()
    rows = _rows(root)
    assert rows["node"] == 4 and rows["duckdb"] == 2


def test_duckdb_is_not_capped_at_the_cpus_and_takes_slurm_first(tmp_path):
    root = FakeMachine(tmp_path).cpus(2).cgroup_v2("/job", cpu_max={"/job": "300000 100000"}).build()
    assert _rows(root)["duckdb"] == 3
    assert _rows(root, SLURM_CPUS_ON_NODE="5")["duckdb"] == 5
    said = {v: _rows(root, SLURM_CPUS_ON_NODE=v)["duckdb"] for v in (" 5", "+5", "0", "-3", "5x", "five")}
    assert said == {" 5": 5, "+5": 5, "0": 1, "-3": 3, "5x": 3, "five": 3}  # as duckdb 2.0 takes them


def test_no_quota_no_smt_every_new_row_gives_the_cpus(tmp_path):
    rows = _rows(FakeMachine(tmp_path).cpus(4).cgroup_v2("/job").build())
    assert {rows[k] for k in NEW_ROWS} == {4}


def test_the_first_six_arguments_alone_still_answer_every_row():
    rows = rounding.usable_by_rule(4, 8, 1.5, 1.5, 1.5, None)  # as callers before these rows passed them
    assert list(rows) == list(rounding.RUNTIMES)
    assert (rows["go"], rows["jdk"], rows["rust"], rows["duckdb"], rows["onnxruntime"], rows["node"]) == (
        2, 2, 1, 2, 8, 4)


@pytest.mark.parametrize(("libuv", "row"), [((1, 46), "node20"), ((1, 48), "node20"), ((1, 49), None),
                                            ((1, 50), None), ((1, 51), "node"), ((2, 0), "node")])
def test_which_node_row_says_what_a_libuv_version_answers(libuv, row):
    assert runtime_readings.node_row(libuv) == row


# -- the runtimes themselves, in real cgroups -------------------------------------------------------

QUOTAS = (0.5, 1.5, None)


@pytest.fixture(params=QUOTAS, ids=["0.5", "1.5", "unlimited"])
def cgroup(request):
    """A real v1 cgroup with each quota (period 100 ms), removed afterwards; skipped where none can be made."""
    with real_cgroup.quota_cgroup(request.param) as made:
        if isinstance(made, str):
            pytest.skip(f"cannot make a cgroup: {made}")
        if made[1] != "v1":
            pytest.skip("these checks were written for this machine's v1 hierarchy")
        yield made[0], request.param


def _in(cg: Path, cmd: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> str:
    """``cmd``'s stdout, run inside cgroup ``cg`` (it moves itself in before it starts)."""
    def enter() -> None:
        (cg / "cgroup.procs").write_text(str(os.getpid()))

    out = subprocess.run(cmd, env=env or clean_env(), capture_output=True, text=True, timeout=timeout,
                         preexec_fn=enter)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _parinfo_rows(cg: Path, quota: float | None) -> dict[str, int]:
    machine = json.loads(_in(cg, [sys.executable, "-m", "parinfo", "show", "--json"]))["machine"]
    assert machine["quota"] == quota
    return machine["usable_by_rule"]


@pytest.mark.once
@pytest.mark.timeout(300)
def test_node_java_and_python_314_print_their_rows(cgroup, tmp_path):
    cg, quota = cgroup
    rows = _parinfo_rows(cg, quota)
    checked = {}
    node = shutil.which("node")
    if node:
        version = _in(cg, [node, "-p", "process.versions.uv"]).strip()
        row = runtime_readings.node_row(tuple(int(x) for x in version.split(".")[:2]))  # type: ignore[arg-type]
        if row is not None:
            checked[row] = (int(_in(cg, [node, "-p", "require('os').availableParallelism()"])), rows[row])
    java = shutil.which("java")
    if java:
        src = tmp_path / "Cpus.java"
        src.write_text("public class Cpus { public static void main(String[] a) { "
                       "System.out.println(Runtime.getRuntime().availableProcessors()); } }\n")
        checked["jdk"] = (int(_in(cg, [java, str(src)])), rows["jdk"])
    py314, _ = venv_python()
    if py314:
        checked["python"] = (int(_in(cg, [py314, "-c", "import os; print(os.process_cpu_count())"])), rows["python"])
        forced = _in(cg, [py314, "-X", "cpu_count=3", "-c", "import os; print(os.process_cpu_count())"])
        assert int(forced) == 3 and rows["python"] != 3  # the flag overrides; the row is the default
    print(f"quota {quota}: (runtime, parinfo) {checked}")
    if not checked:
        pytest.skip("none of node, java, Python 3.14 is installed")
    assert {k: ran for k, (ran, _) in checked.items()} == {k: row for k, (_, row) in checked.items()}


@pytest.mark.once
@pytest.mark.torch
@pytest.mark.timeout(300)
def test_torch_prints_its_row(cgroup):
    cg, quota = cgroup
    rows = _parinfo_rows(cg, quota)
    said = _in(cg, [sys.executable, "-c", "import torch; print(torch.get_num_threads())"])
    assert int(said) == rows["torch"]


# A one-node ONNX model (Relu over 4 floats), written as protobuf by hand; a session made with default
# options adds its intra-op pool less the calling thread.
_ORT = r'''
import os, onnxruntime as ort
def v(x):
    out = bytearray()
    while True:
        b, x = x & 0x7f, x >> 7
        out.append(b | 0x80 if x else b)
        if not x: return bytes(out)
def f(num, payload):
    if isinstance(payload, int): return v(num << 3) + v(payload)
    return v(num << 3 | 2) + v(len(payload)) + payload
def s(num, text): return f(num, text.encode())
info = lambda name: s(1, name) + f(2, f(1, f(1, 1) + f(2, f(1, f(1, 4)))))
graph = f(1, s(1, "x") + s(2, "y") + s(3, "n") + s(4, "Relu")) + s(2, "g") + f(11, info("x")) + f(12, info("y"))
before = len(os.listdir("/proc/self/task"))
session = ort.InferenceSession(f(1, 8) + f(8, s(1, "") + f(2, 13)) + f(7, graph), providers=["CPUExecutionProvider"])
print(len(os.listdir("/proc/self/task")) - before + 1)
'''


@pytest.mark.once
@pytest.mark.pools("onnxruntime")
@pytest.mark.timeout(300)
def test_onnxruntime_makes_its_row_of_threads(cgroup):
    cg, quota = cgroup
    rows = _parinfo_rows(cg, quota)
    assert int(_in(cg, [sys.executable, "-c", _ORT])) == rows["onnxruntime"]


_DUCKDB = "import duckdb; print(duckdb.connect().execute(\"select current_setting('threads')\").fetchall()[0][0])"


@pytest.mark.once
@pytest.mark.pools("duckdb")
@pytest.mark.timeout(300)
def test_duckdb_takes_its_row(cgroup):
    cg, quota = cgroup
    rows = _parinfo_rows(cg, quota)
    assert int(_in(cg, [sys.executable, "-c", _DUCKDB])) == rows["duckdb"]
    slurm = clean_env(SLURM_CPUS_ON_NODE="5")
    machine = json.loads(_in(cg, [sys.executable, "-m", "parinfo", "show", "--json"], env=slurm))["machine"]
    assert int(_in(cg, [sys.executable, "-c", _DUCKDB], env=slurm)) == machine["usable_by_rule"]["duckdb"] == 5


@pytest.mark.once
@pytest.mark.pools("duckdb")
@pytest.mark.timeout(300)
def test_duckdb_takes_a_quota_above_the_cpus():
    cpus = len(os.sched_getaffinity(0))
    with real_cgroup.quota_cgroup(cpus + 1.0) as made:
        if isinstance(made, str) or made[1] != "v1":
            pytest.skip(f"cannot make a v1 cgroup: {made if isinstance(made, str) else 'v2 here'}")
        rows = _parinfo_rows(made[0], cpus + 1.0)
        said = int(_in(made[0], [sys.executable, "-c", _DUCKDB]))
    assert said == rows["duckdb"] == cpus + 1 and rows["jdk"] == cpus



@pytest.mark.once
@pytest.mark.timeout(300)
def test_under_a_one_cpu_affinity_each_installed_runtime_prints_its_row():
    """Without a quota, pinned to CPU 0: the rows that follow affinity (node20, python, torch) say 1,
    those that ignore it (onnxruntime, duckdb) the machine's count, as the runtimes do."""
    if len(os.sched_getaffinity(0)) < 2 or not shutil.which("taskset"):
        pytest.skip("needs 2 CPUs and taskset")
    pin = ["taskset", "-c", "0"]

    def run(cmd: list[str]) -> str:
        out = subprocess.run([*pin, *cmd], env=clean_env(), capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    rows = json.loads(run([sys.executable, "-m", "parinfo", "show", "--json"]))["machine"]["usable_by_rule"]
    probes: dict[str, list[str]] = {}
    py314, _ = venv_python()
    if py314:
        probes["python"] = [py314, "-c", "import os; print(os.process_cpu_count())"]
    node = shutil.which("node")
    if node:
        uv = run([node, "-p", "process.versions.uv"]).strip().split(".")
        row = runtime_readings.node_row((int(uv[0]), int(uv[1])))
        if row is not None:
            probes[row] = [node, "-p", "require('os').availableParallelism()"]
    found = {name: importlib.util.find_spec(name) is not None for name in ("torch", "onnxruntime", "duckdb")}
    if found["torch"]:
        probes["torch"] = [sys.executable, "-c", "import torch; print(torch.get_num_threads())"]
    if found["onnxruntime"]:
        probes["onnxruntime"] = [sys.executable, "-c", _ORT]
    if found["duckdb"]:
        probes["duckdb"] = [sys.executable, "-c", _DUCKDB]
    said = {row: int(run(cmd)) for row, cmd in probes.items()}
    print("pinned to CPU 0:", said)
    assert said == {row: rows[row] for row in said}
    assert rows["python"] == rows["node20"] == rows["torch"] == 1
