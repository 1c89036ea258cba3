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
                  "ours": [s.count for s in rows], "sources": [s.source for s in rows],
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
def test_kmp_duplicate_lib_ok_names_scikit_learn_and_cli_agrees_with_in_process():
    inproc = run_json("""
import json, sklearn, parinfo
r = parinfo.inspect(imports=["numpy"])
print(json.dumps({f.id: [f.severity, f.message] for f in r.findings if f.id == "kmp-duplicate-lib-ok"}))
""")
    proc = run_cli("show", "--json", "-i", "numpy,sklearn")
    cli = {f["id"]: [f["severity"], f["message"]] for f in json.loads(proc.stdout)["findings"]
           if f["id"] == "kmp-duplicate-lib-ok"}
    assert inproc == cli
    severity, message = cli["kmp-duplicate-lib-ok"]
    assert severity == "info" and "set by the import of scikit-learn" in message


def test_kmp_duplicate_lib_ok_from_the_launch_environment_is_said_so():
    proc = run_cli("show", "--json", "-i", "none", env=clean_env(KMP_DUPLICATE_LIB_OK="TRUE"))
    found = {f["id"]: f for f in json.loads(proc.stdout)["findings"]}
    assert found["kmp-duplicate-lib-ok"]["severity"] == "info"
    assert "set at launch" in found["kmp-duplicate-lib-ok"]["message"]
