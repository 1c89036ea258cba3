"""Findings fire on what the process really does, and not on correct set-ups (real subprocesses).

Ground truth: threadpoolctl's threadpool_info() in the same process, read after parinfo.
"""
from __future__ import annotations

import importlib.util
import json

import pytest
from conftest import HAVE_NUMPY, HAVE_TORCH, clean_env, run_cli, run_json

HAVE_SKLEARN = importlib.util.find_spec("sklearn") is not None
needs_numpy = pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")
needs_sklearn = pytest.mark.skipif(not HAVE_SKLEARN, reason="scikit-learn is not installed")

REPORT = """
import json, os, threadpoolctl
r = parinfo.inspect(imports=[])
blas = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["internal_api"] == "openblas"]
rows = [s for s in r.settings if s.library == "openblas"]
print(json.dumps({"findings": {f.id: f.message for f in r.findings}, "truth": blas,
                  "ours": [s.count for s in rows], "sources": [str(s.source) for s in rows],
                  "notes": [s.note for s in rows]}))
"""


@needs_numpy
def test_variable_set_before_the_import_is_not_a_finding():
    out = run_json("import os\nos.environ['OPENBLAS_NUM_THREADS'] = '1'\nimport numpy, parinfo\n" + REPORT)
    assert "variable-after-load" not in out["findings"]
    assert out["ours"] == out["truth"] == [1]
    assert "before this library loaded" in out["sources"][0]


@needs_numpy
def test_variable_set_after_the_import_is_a_finding_that_matches_the_pool():
    out = run_json("import os, numpy, parinfo\nos.environ['OPENBLAS_NUM_THREADS'] = '1'\n" + REPORT,
                   prefix=["taskset", "-c", "0,1"])
    truth = out["truth"][0]
    if truth == 1:
        pytest.skip("one CPU: OpenBLAS runs 1 thread either way")
    assert out["ours"] == [truth]
    assert f"openblas [numpy] runs {truth}, not 1" in out["findings"]["variable-after-load"]
    assert "ignored" in out["notes"][0]  # the provenance line says the same


@needs_numpy
def test_no_finding_after_parinfo_apply():
    out = run_json("import numpy, parinfo\nparinfo.apply('single-thread')\n" + REPORT)
    assert "variable-after-load" not in out["findings"]
    assert out["ours"] == out["truth"] == [1]


@needs_sklearn
def test_stock_numpy_and_scikit_learn_pass_check():
    proc = run_cli("show", "-i", "numpy,sklearn", "--check")
    assert proc.returncode == 0, proc.stdout
    report = json.loads(run_cli("show", "--json", "-i", "numpy,sklearn").stdout)
    layers = {p["library"] for p in report["pools"]}
    found = {f["id"]: f["severity"] for f in report["findings"]}
    if {"openblas", "libgomp"} <= layers:  # numpy's OpenBLAS-pthreads beside scikit-learn's libgomp
        assert found.get("openblas-pthreads-with-openmp") == "info"


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_a_bare_torch_import_passes_check():
    proc = run_cli("show", "--torch", "--check", timeout=120)
    assert proc.returncode == 0, proc.stdout


@needs_sklearn
def test_kmp_duplicate_lib_ok_set_by_an_import_alone_is_no_finding():
    # scikit-learn's and threadpoolctl's imports set it in every process; with no Intel-style OpenMP
    # runtime loaded it changes nothing, and a correct set-up passes show --check.
    inproc = run_json("""
import json, os, sklearn, parinfo
r = parinfo.inspect(imports=["numpy"])
print(json.dumps([os.environ.get("KMP_DUPLICATE_LIB_OK"), [f.id for f in r.findings]]))
""")
    assert inproc[0] is not None and "kmp-duplicate-lib-ok" not in inproc[1]
    proc = run_cli("show", "--json", "-i", "numpy,sklearn")
    report = json.loads(proc.stdout)
    row = next(e for e in report["environment"] if e["name"] == "KMP_DUPLICATE_LIB_OK")
    assert row["value"] is not None and "scikit-learn" in row["importers"]
    assert "kmp-duplicate-lib-ok" not in {f["id"] for f in report["findings"]}


def test_kmp_duplicate_lib_ok_from_the_launch_environment_alone_is_no_finding():
    proc = run_cli("show", "--json", "-i", "none", env=clean_env(KMP_DUPLICATE_LIB_OK="TRUE"))
    assert "kmp-duplicate-lib-ok" not in {f["id"] for f in json.loads(proc.stdout)["findings"]}


_LOAD_LIBOMP = """
import ctypes, json, os, sys
sys.path.insert(0, {tests!r})
import openmp_pair
path = openmp_pair.libomp()
if path is None:
    print(json.dumps(None)); raise SystemExit
{before}
ctypes.CDLL(path, ctypes.RTLD_GLOBAL)
import parinfo
r = parinfo.inspect(imports=[])
print(json.dumps([sorted(p.library for p in r.pools), [[f.id, f.severity, f.message] for f in r.findings
                                                       if f.id == "kmp-duplicate-lib-ok"]]))
"""


@pytest.mark.parametrize("who", ["launch", "threadpoolctl"])
def test_kmp_duplicate_lib_ok_with_llvm_openmp_loaded(who):
    """LLVM libomp reads the variable: set by the user it may hide a second runtime (info); set by
    threadpoolctl's import it is not the user's to fix and fires nothing."""
    import os

    tests = os.path.dirname(os.path.abspath(__file__))
    before = "import threadpoolctl" if who == "threadpoolctl" else ""
    env = clean_env(KMP_DUPLICATE_LIB_OK="TRUE") if who == "launch" else clean_env()
    out = run_json(_LOAD_LIBOMP.format(tests=tests, before=before), env=env)
    if out is None:
        pytest.skip("no LLVM libomp on this machine")
    libraries, found = out
    assert "libomp" in libraries
    if who == "threadpoolctl":
        assert found == []
    else:
        ((_, severity, message),) = found
        assert severity == "info" and "set at launch" in message and "libomp" in message
