"""torch_info: torch's counts read without importing or starting anything."""
from __future__ import annotations

import pytest
from conftest import clean_env, run_json

from parinfo.process.torch_config import parse_parallel_info

# torch_info() as the JSON the report carries (None when torch is not imported)
INFO = ("import json, sys; from parinfo.records.convert import dump; from parinfo.process import frameworks; "
        "torch_info = lambda **kw: (lambda t: None if t is None else dump(t))(frameworks.torch_info(**kw)); ")

NATIVE_TEXT = """ATen/Parallel:
\tat::get_num_threads() : 4
\tat::get_num_interop_threads() : 8
OpenMP not found
MKL not found
MKLDNN not found
std::thread::hardware_concurrency() : 8
Environment variables:
\tOMP_NUM_THREADS : 4
\tMKL_NUM_THREADS : [not set]
ATen parallel backend: native thread pool
"""


def test_parse_parallel_info_of_a_build_without_openmp_or_mkl():
    p = parse_parallel_info(NATIVE_TEXT)
    assert (p.intra_op, p.inter_op, p.hardware_concurrency) == (4, 8, 8)
    assert p.openmp is None and p.mkl_version is None and p.mkldnn_version is None
    assert p.omp_max_threads is None and p.mkl_max_threads is None
    assert p.aten_backend == "native thread pool"
    assert p.env == {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "[not set]"}


def test_torch_is_never_imported_when_not_asked():
    out = run_json(INFO + "import os; from parinfo.process.pools import native_pools; "
                   "from parinfo.process.provenance import library_settings; "
                   "from parinfo.machine.topology import machine_facts; "
                   "from parinfo.process.environment import environment_report; "
                   "library_settings(native_pools(), torch_info(), os.environ, None, machine_facts()); "
                   "environment_report(); print(json.dumps([torch_info(), 'torch' in sys.modules]))")
    assert out == [None, False]


@pytest.mark.torch
def test_counts_equal_torch_getters():
    code = (INFO + "import torch; torch.set_num_threads(1); t = torch_info(); t.pop('parallel_info_text'); "
            "print(json.dumps([t, torch.get_num_threads(), torch.get_num_interop_threads(), "
            "torch.__version__, torch.backends.mkl.is_available()]))")
    for env in (clean_env(), clean_env(OMP_NUM_THREADS="1")):
        t, intra, inter, version, mkl = run_json(code, env=env)
        assert t["intra_op"] == intra == 1
        assert t["inter_op"] == inter
        assert t["version"] == version
        assert t["mkl_available"] is mkl
        assert t["aten_backend"] in ("OpenMP", "TBB", "native thread pool")
        assert isinstance(t["hardware_concurrency"], int)
        if t["aten_backend"] == "OpenMP":
            assert "OpenMP" in t["openmp"]
        if mkl:
            assert t["mkl_version"]


@pytest.mark.torch
def test_import_if_missing_imports_torch():
    out = run_json(INFO + "t = torch_info(import_if_missing=True); "
                   "print(json.dumps([t['intra_op'], 'torch' in sys.modules, 'ATen' in t['parallel_info_text']]))")
    assert out[1:] == [True, True] and out[0] >= 1


@pytest.mark.torch
@pytest.mark.timeout(120)
def test_interop_started_follows_the_pool_and_reading_it_does_not_start_it():
    code = (INFO + "import torch; a = torch_info(); "
            "torch.set_num_interop_threads(1); "  # still allowed: reading started nothing
            "cu = torch.jit.CompilationUnit('''\n"
            "def f(x):\n    return x + 1\n"
            "def g(x):\n    fut = torch.jit.fork(f, x)\n    return torch.jit.wait(fut)\n''')\n"
            "cu.g(torch.ones(2)); b = torch_info(); "
            "print(json.dumps([a['interop_started'], a['pool_threads'], b['interop_started'], b['inter_op']]), "
            "flush=True); "
            # torch sometimes aborts at exit after scripted fork/wait (its inter-op worker outlives
            # finalisation: measured-facts.md); leave before finalisation so the test sees only our part
            "import os; os._exit(0)")
    before, threads_before, after, inter = run_json(code)
    assert before is False and threads_before == 0
    assert after is True and inter == 1
