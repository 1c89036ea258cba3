"""The pytest plugin, in real pytest sessions (with pytest-xdist workers where installed): each test
records what threadpoolctl and torch say inside its worker, the ground truth the plugin's header
and summary are checked against."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, clean_env

from parinfo.machine.topology import machine_facts

pytest.importorskip("numpy")
pytest.importorskip("threadpoolctl")
needs_xdist = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import xdist"], capture_output=True).returncode != 0,
    reason="pytest-xdist is not installed")

RECORDER = '''
import json, os, sys
import threadpoolctl

def record(name):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    torch = sys.modules.get("torch")
    held = {"pools": {i["internal_api"]: i["num_threads"] for i in threadpoolctl.threadpool_info()},
            "torch": [torch.get_num_threads(), torch.get_num_interop_threads()] if torch else None,
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS")}
    with open(os.path.join(os.environ["POOLS_OUT"], f"{worker}-{name}.json"), "w") as f:
        json.dump(held, f)
'''


def _project(tmp_path: Path, *, torch: bool = False) -> Path:
    (tmp_path / "recorder.py").write_text(RECORDER)
    (tmp_path / "test_numpy.py").write_text("import numpy\nfrom recorder import record\n\n"
                                            "def test_pools():\n    record('numpy')\n")
    if torch:
        (tmp_path / "test_torch.py").write_text("import torch\nfrom recorder import record\n\n"
                                                "def test_torch():\n    torch.ones(4).sum()\n    record('torch')\n")
    (tmp_path / "loads_numpy.py").write_text("import numpy  # a plugin that loads OpenBLAS before any hook runs\n")
    (tmp_path / "out").mkdir()
    return tmp_path


def _load(project: Path, way: str) -> tuple[list[str], dict[str, str]]:
    """Make ``project`` load the plugin ``way``; the arguments and variables that takes."""
    if way == "conftest":
        (project / "conftest.py").write_text('pytest_plugins = ["parinfo.pytest_plugin"]\n')
        return [], {}
    if way == "PYTEST_PLUGINS":
        return [], {"PYTEST_PLUGINS": "parinfo.pytest_plugin"}
    if way in ("entry point", "entry point and -p"):
        # what a package declaring the plugin installs: a dist-info whose entry_points.txt pytest reads
        info = project / "site" / "budget_plugin-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: budget-plugin\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("[pytest11]\nparinfo.pytest_plugin = parinfo.pytest_plugin\n")
        return (["-p", "parinfo.pytest_plugin"] if way.endswith("-p") else []), {"EXTRA_PATH": str(info.parent)}
    assert way == "-p"
    return ["-p", "parinfo.pytest_plugin"], {}


def _pytest(project: Path, *args: str, env: dict[str, str] | None = None,
            way: str = "-p") -> tuple[str, dict[str, dict]]:
    load, extra = _load(project, way)
    environ = {k: v for k, v in clean_env(**(env or {})).items() if not k.startswith("PYTEST_")}
    environ.update(POOLS_OUT=str(project / "out"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(project), extra.pop("EXTRA_PATH", ""), str(REPO)])),
                   **extra)
    environ.update({k: v for k, v in (env or {}).items() if k.startswith("PYTEST_")})
    proc = subprocess.run([sys.executable, "-m", "pytest", *load, "-p", "no:cacheprovider", *args], cwd=project,
                          env=environ, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "INTERNALERROR" not in proc.stdout + proc.stderr
    held = {p.stem: json.loads(p.read_text()) for p in (project / "out").glob("*.json")}
    return proc.stdout, held


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("parinfo:")]


@needs_xdist
@pytest.mark.parametrize("way", ["-p", "conftest", "entry point", "entry point and -p", "PYTEST_PLUGINS"])
def test_each_xdist_worker_gets_its_share_of_every_pool_however_the_plugin_is_loaded(tmp_path, way):
    usable = machine_facts().usable_cpus
    share = max(1, usable // 2)
    out, held = _pytest(_project(tmp_path), "-n", "2", "--dist", "each", "--parinfo-budget", way=way)
    assert f"parinfo: budget: 2 xdist workers share {usable} usable CPUs: each gets {share} thread" in out
    numpy_runs = {k: v for k, v in held.items() if k.endswith("-numpy")}
    assert sorted(numpy_runs) == ["gw0-numpy", "gw1-numpy"]
    for worker, seen in numpy_runs.items():
        assert seen["pools"] and set(seen["pools"].values()) == {share}, (worker, seen)
        assert seen["OPENBLAS_NUM_THREADS"] == str(share)  # the variable too, for what the worker starts later
        name = worker.split("-")[0]
        summary = [line for line in _lines(out) if line.startswith(f"parinfo: {name}: ")]
        assert len(summary) == 1 and f"openblas {share}" in summary[0]  # what threadpoolctl saw there


@needs_xdist
@pytest.mark.torch
def test_torch_intra_and_inter_op_get_the_share_in_each_worker(tmp_path):
    share = max(1, machine_facts().usable_cpus // 2)
    out, held = _pytest(_project(tmp_path, torch=True), "-n", "2", "--dist", "each", "--parinfo-budget")
    torch_runs = {k: v["torch"] for k, v in held.items() if k.endswith("-torch")}
    assert torch_runs == {"gw0-torch": [share, share], "gw1-torch": [share, share]}
    for worker in ("gw0", "gw1"):
        summary = next(line for line in _lines(out) if line.startswith(f"parinfo: {worker}: "))
        assert f"torch inter-op {share}, torch intra-op {share}" in summary


@needs_xdist
def test_without_the_option_the_header_warns_and_nothing_is_changed(tmp_path):
    usable = machine_facts().usable_cpus
    out, held = _pytest(_project(tmp_path), "-n", "2", "--dist", "each")
    warning = [line for line in _lines(out) if "warning" in line]
    assert len(warning) == 1, out
    assert warning[0].startswith(f"parinfo: warning: 2 xdist workers x {usable} threads (")
    assert warning[0].endswith(f") = {2 * usable} threads on {usable} usable CPUs; "
                               f"add --parinfo-budget to give each worker {max(1, usable // 2)}")
    for seen in held.values():
        assert set(seen["pools"].values()) == {usable}  # the libraries' own defaults, untouched


@needs_xdist
def test_pools_loaded_before_the_plugin_are_pushed_and_user_variables_are_kept_and_said(tmp_path):
    usable = machine_facts().usable_cpus
    if usable < 2:
        pytest.skip("needs 2 usable CPUs: the user's count must differ from the share")
    out, held = _pytest(_project(tmp_path), "-p", "loads_numpy", "-n", "2", "--dist", "each", "--parinfo-budget",
                        env={"OPENBLAS_NUM_THREADS": str(usable), "OMP_NUM_THREADS": str(usable)})
    assert sorted(held) == ["gw0-numpy", "gw1-numpy"]
    for seen in held.values():
        assert seen["pools"] == {"openblas": usable}  # the user's own choice stays
    kept = [line for line in _lines(out) if "OPENBLAS_NUM_THREADS: kept" in line]
    assert len(kept) == 2 and all(f"kept '{usable}' set by the user" in line for line in kept), out


@needs_xdist
def test_pools_loaded_before_the_plugin_get_the_share(tmp_path):
    share = max(1, machine_facts().usable_cpus // 2)
    _, held = _pytest(_project(tmp_path), "-p", "loads_numpy", "-n", "2", "--dist", "each", "--parinfo-budget")
    for seen in held.values():
        assert seen["pools"] == {"openblas": share}


def test_the_header_counts_every_cpu_pool_of_a_library_and_no_io_pool(tmp_path):
    """ONNX Runtime's inter-op pool is a CPU pool of its own; Arrow's IO pool waits on I/O (registry
    io_rows): a session importing both, with each of those pools asked wider than the rest, is warned
    about the inter-op pool, never the IO pool."""
    project = _project(tmp_path)
    (tmp_path / "test_inference.py").write_text(
        "def _uses():  # read by the plugin, never run\n    import onnxruntime\n    import pyarrow\n\n\n"
        "def test_nothing():\n    pass\n")
    out, _ = _pytest(project, "-p", "no:xdist", env={"ORT_INTER_OP_NUM_THREADS": "64", "ARROW_IO_THREADS": "96"})
    warning = [line for line in _lines(out) if "warning" in line]
    assert len(warning) == 1, out
    assert warning[0].startswith("parinfo: warning: 1 process (no xdist workers) x 64 threads (onnxruntime inter-op, "
                                 "the tests import onnxruntime; "), warning[0]


def test_without_xdist_the_session_is_one_worker(tmp_path):
    usable = machine_facts().usable_cpus
    out, held = _pytest(_project(tmp_path), "--parinfo-budget", "-p", "no:xdist")
    assert f"parinfo: budget: 1 process (no xdist workers) share {usable} usable CPUs" in out
    assert set(held["main-numpy"]["pools"].values()) == {usable}
    assert any(line.startswith("parinfo: this process: ") and f"openblas {usable}" in line for line in _lines(out))


def test_the_plugin_is_inert_unless_loaded(tmp_path):
    project = _project(tmp_path)
    environ = dict(os.environ, POOLS_OUT=str(project / "out"), PYTHONPATH=str(project))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--parinfo-budget"], cwd=project,
                          env=environ, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4 and "--parinfo-budget" in proc.stderr  # an unknown option without the plugin


XDIST_COUNTS = ["0", "abc", "", "-3", "99999999999999999999", "2\x1b[2J"]


@pytest.mark.parametrize("value", XDIST_COUNTS)
def test_an_xdist_count_outside_a_worker_is_named_once_and_ignored(tmp_path, value):
    usable = machine_facts().usable_cpus
    out, held = _pytest(_project(tmp_path), "--parinfo-budget", "-p", "no:xdist",
                        env={"PYTEST_XDIST_WORKER_COUNT": value})
    named = [line for line in _lines(out) if "PYTEST_XDIST_WORKER_COUNT" in line]
    assert len(named) == 1 and named[0].endswith("ignored: this process is not an xdist worker "
                                                 "(PYTEST_XDIST_WORKER is not set)"), out
    assert "\x1b" not in out
    assert f"parinfo: budget: 1 process (no xdist workers) share {usable} usable CPUs" in out
    assert set(held["main-numpy"]["pools"].values()) == {usable}


@pytest.mark.parametrize("value", ["0", "abc", "", "99999999999999999999"])
def test_a_bad_count_in_a_worker_is_named_and_counted_as_one(tmp_path, value):
    usable = machine_facts().usable_cpus
    out, held = _pytest(_project(tmp_path), "--parinfo-budget", "-p", "no:xdist",
                        env={"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": value})
    named = [line for line in _lines(out) if "PYTEST_XDIST_WORKER_COUNT" in line]
    assert named == [f"parinfo: PYTEST_XDIST_WORKER_COUNT='{value}' ignored: not a whole number from 1 to "
                     f"65536; counted as 1 worker"], out
    assert set(held["gw0-numpy"]["pools"].values()) == {usable}


@needs_xdist
def test_xdist_workers_take_xdists_count_whatever_the_controller_had(tmp_path):
    share = max(1, machine_facts().usable_cpus // 2)
    out, held = _pytest(_project(tmp_path), "-n", "2", "--dist", "each", "--parinfo-budget",
                        env={"PYTEST_XDIST_WORKER_COUNT": "abc"})
    assert sum("PYTEST_XDIST_WORKER_COUNT='abc' ignored" in line for line in _lines(out)) == 1, out
    assert {k: set(v["pools"].values()) for k, v in held.items()} == {"gw0-numpy": {share}, "gw1-numpy": {share}}


def _worker_pools(held: dict[str, dict]) -> set[str]:
    return {api for seen in held.values() for api in seen["pools"]}


@needs_xdist
def test_the_warning_names_only_pools_the_suite_loads(tmp_path):
    # numpy alone loads OpenBLAS: libgomp, which would take OMP_NUM_THREADS=8 as it is, never loads
    out, held = _pytest(_project(tmp_path), "-n", "2", "--dist", "each", env={"OMP_NUM_THREADS": "8"})
    assert _worker_pools(held) == {"openblas"}  # threadpoolctl inside each worker
    truth = {seen["pools"]["openblas"] for seen in held.values()}
    (warning,) = [line for line in _lines(out) if "warning" in line]
    (count,) = truth
    assert warning.startswith(f"parinfo: warning: 2 xdist workers x {count} threads (openblas, shipped by numpy, "
                              "which the tests import; env OMP_NUM_THREADS=8"), out
    assert "libgomp" not in out


@needs_xdist
def test_the_warning_names_an_openmp_runtime_a_test_import_brings(tmp_path):
    pytest.importorskip("sklearn")
    project = _project(tmp_path)
    (project / "test_sklearn.py").write_text("import sklearn.utils\nfrom recorder import record\n\n"
                                             "def test_sk():\n    record('sklearn')\n")
    out, held = _pytest(project, "-n", "2", "--dist", "each", env={"OMP_NUM_THREADS": "8"})
    truth = {seen["pools"].get("openmp") for name, seen in held.items() if name.endswith("-sklearn")}
    assert truth == {8}  # libgomp loaded by scikit-learn takes 8 on any machine
    (warning,) = [line for line in _lines(out) if "warning" in line]
    assert warning.startswith("parinfo: warning: 2 xdist workers x 8 threads (libgomp, shipped by sklearn, "
                              "which the tests import; env OMP_NUM_THREADS=8)"), out


def test_no_warning_when_the_suite_loads_no_pool(tmp_path):
    (tmp_path / "test_plain.py").write_text("import json\n\ndef test_plain():\n    assert json.dumps(1) == '1'\n")
    (tmp_path / "out").mkdir()
    out, _ = _pytest(tmp_path, "-p", "no:xdist", env={"OMP_NUM_THREADS": "64"})
    assert [line for line in _lines(out) if "warning" in line] == [], out
