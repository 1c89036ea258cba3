"""Intel libiomp and LLVM libomp loaded together: parinfo reports the pair and never calls into either.

Ground truth: each runtime registers itself in /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid> on its first
call (the step that aborts with OMP Error #15, or hangs, when the other one registered first), and the
loaded objects in /proc/self/maps. Every case runs in a fresh process under a timeout, in both load
orders.
"""
from __future__ import annotations

import os
import subprocess

import pytest
from conftest import clean_env, run_cli, run_json
from openmp_pair import REGISTERED, libiomp, libomp, loader

pytestmark = pytest.mark.skipif(
    libiomp() is None or libomp() is None,
    reason="needs Intel libiomp (pip install intel-openmp) and LLVM libomp (apt-get install libomp-dev)")

ORDERS = [("iomp", "omp"), ("omp", "iomp")]


def _inspect_code(order: tuple[str, ...]) -> str:
    return loader(order) + """
import json, parinfo
report = parinfo.inspect()
text = parinfo.parallel_info()
""" + REGISTERED + """
maps = open("/proc/self/maps").read()
print(json.dumps({
    "ids": [f.id for f in report.findings if f.severity == "error"],
    "pools": sorted(p.library for p in report.pools if p.user_api == "openmp"),
    "counts": [p.num_threads for p in report.pools],
    "in_maps": ["libiomp5" in maps, "libomp" in maps],
    "text_has_finding": "openmp-intel-llvm" in text,
}))
"""


@pytest.mark.parametrize("order", ORDERS, ids=["intel-first", "llvm-first"])
@pytest.mark.parametrize("dup_ok", [None, "TRUE"], ids=["plain", "KMP_DUPLICATE_LIB_OK"])
def test_inspect_reports_the_pair_and_initialises_neither(order, dup_ok):
    env = clean_env(**({"KMP_DUPLICATE_LIB_OK": dup_ok} if dup_ok else {}))
    proc = subprocess.run([os.sys.executable, "-c", _inspect_code(order)], env=env, capture_output=True,
                          text=True, timeout=60)  # a hang at exit fails here
    assert proc.returncode == 0, proc.stderr
    assert "OMP: Error" not in proc.stderr
    out = proc.stdout.splitlines()
    assert "REGISTERED False" in out  # ground truth: no OpenMP runtime initialised
    import json

    data = json.loads(out[-1])
    assert data["in_maps"] == [True, True]
    assert data["pools"] == ["libiomp", "libomp"]
    assert "openmp-intel-llvm" in data["ids"]
    assert all(c is None for c in data["counts"])  # no library was asked for its count
    assert data["text_has_finding"]


@pytest.mark.parametrize("order", ORDERS, ids=["intel-first", "llvm-first"])
def test_cli_show_check_fails_with_the_error_and_exits(order, tmp_path):
    (tmp_path / "pairmod.py").write_text(loader(order))
    env = clean_env(PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    for check in ("--check", "--check=error"):
        proc = run_cli("show", "-i", "numpy,pairmod", check, env=env, timeout=60)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "openmp-intel-llvm" in proc.stdout
        assert "OMP: Error" not in proc.stderr
    proc = run_cli("show", "--json", "-i", "pairmod", env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_one_runtime_alone_is_still_read():
    """Control: with only LLVM libomp loaded, its count is read (and its runtime initialises)."""
    data = run_json(loader(("omp",)) + """
import json, ctypes, parinfo
report = parinfo.inspect(imports=[])
row = next(p for p in report.pools if p.library == "libomp")
lib = ctypes.CDLL(row.filepath)
print(json.dumps({"ours": row.num_threads, "theirs": lib.omp_get_max_threads(),
                  "ids": [f.id for f in report.findings]}))
""", env=clean_env(OMP_NUM_THREADS="3"))
    assert data["ours"] == data["theirs"] == 3
    assert "openmp-intel-llvm" not in data["ids"]
