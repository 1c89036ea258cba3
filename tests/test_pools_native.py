"""native_pools / threading_layers: threadpoolctl's pools plus what only the loaded objects show."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from conftest import HAVE_NUMPY, clean_env, run_json

from parinfo.process.pools import PoolRow, classify, loaded_objects, owner_of, threading_layers
from parinfo.records.convert import dump, load

needs_numpy = pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")
HAVE_SCIPY = importlib.util.find_spec("scipy") is not None



@needs_numpy
def test_numpy_pools_match_threadpoolctl():
    out = run_json("import json, numpy; from parinfo.records.convert import dump; "
                   "from parinfo.process.pools import native_pools; import threadpoolctl; "
                   "print(json.dumps([[dump(r) for r in native_pools()], threadpoolctl.threadpool_info()]))")
    ours, theirs = out
    mine = [r for r in ours if r["seen_by"] == "threadpoolctl"]
    assert len(mine) == len(theirs) >= 1
    for row, info in zip(mine, theirs, strict=True):
        assert row["filepath"] == info["filepath"]
        assert row["num_threads"] == info["num_threads"]
        assert row["internal_api"] == info["internal_api"]
        assert row["user_api"] == info["user_api"]
        assert row["version"] == info["version"]
    blas = [r for r in mine if r["user_api"] == "blas"]
    assert blas and blas[0]["owner"] == "numpy"


@needs_numpy
@pytest.mark.skipif(not HAVE_SCIPY, reason="scipy is not installed")
def test_numpy_and_scipy_openblas_are_two_copies_marked_duplicate():
    rows = run_json("import json, numpy, scipy.linalg; from parinfo.records.convert import dump; "
                    "from parinfo.process.pools import native_pools; "
                    "print(json.dumps([dump(r) for r in native_pools()]))")
    blas = [r for r in rows if r["library"] == "openblas"]
    assert len(blas) == 2
    assert {r["owner"] for r in blas} == {"numpy", "scipy"}
    assert all(r["copies"] == 2 for r in blas)
    first, second = blas
    assert first["duplicate_of"] is None
    assert second["duplicate_of"] == first["filepath"] != second["filepath"]


def test_two_libgomp_copies_loaded_by_path_are_duplicates(tmp_path):
    system = Path("/usr/lib/x86_64-linux-gnu/libgomp.so.1")
    torch_spec = importlib.util.find_spec("torch")
    if not system.exists() or torch_spec is None:
        pytest.skip("needs a system libgomp and torch's bundled libgomp")
    bundled = Path(torch_spec.origin).parent / "lib" / "libgomp.so.1"
    if not bundled.exists():
        pytest.skip("this torch build bundles no libgomp")
    rows = run_json(f"import ctypes, json; ctypes.CDLL({str(system)!r}); ctypes.CDLL({str(bundled)!r}); "
                    "from parinfo.records.convert import dump; from parinfo.process.pools import native_pools; "
                    "print(json.dumps([dump(r) for r in native_pools()]))")
    gomp = [r for r in rows if r["library"] == "libgomp"]
    assert len(gomp) == 2 and all(r["copies"] == 2 for r in gomp)
    assert sum(r["duplicate_of"] is not None for r in gomp) == 1
    assert {r["owner"] for r in gomp} == {"system", "torch"}
    assert all(isinstance(r["num_threads"], int) for r in gomp)


@needs_numpy
def test_inspecting_changes_no_count():
    code = ("import json, os, numpy, threadpoolctl; before = threadpoolctl.threadpool_info(); "
            "from parinfo.process.pools import native_pools, threading_layers; "
            "from parinfo.process.provenance import library_settings; "
            "from parinfo.machine.topology import machine_facts; "
            "from parinfo.process.environment import environment_report; "
            "from parinfo.process.threads import live_threads; "
            "from parinfo.process.frameworks import torch_info; "
            "p = native_pools(); threading_layers(p); environment_report(); live_threads(); "
            "library_settings(p, torch_info(), os.environ, None, machine_facts()); "
            "print(json.dumps([before, threadpoolctl.threadpool_info()]))")
    for env in (clean_env(), clean_env(OPENBLAS_NUM_THREADS="1")):
        before, after = run_json(code, env=env)
        assert before == after


def test_kmp_duplicate_lib_ok_is_not_left_set():
    out = run_json("import json, os; from parinfo.process.pools import native_pools; native_pools(); "
                   "print(json.dumps(os.environ.get('KMP_DUPLICATE_LIB_OK')))")
    assert out is None
    out = run_json("import json, os; from parinfo.process.pools import native_pools; native_pools(); "
                   "print(json.dumps(os.environ.get('KMP_DUPLICATE_LIB_OK')))",
                   env=clean_env(KMP_DUPLICATE_LIB_OK="FALSE"))
    assert out == "FALSE"  # a user's own setting stays


FAKE_MAPS = """\
7f00-7f01 r-xp 00000000 08:01 1 /opt/venv/lib/python3.11/site-packages/scikit_learn.libs/libgomp-a34b3233.so.1.0.0
7f01-7f02 r-xp 00000000 08:01 2 /opt/venv/lib/libtbb.so.12
7f02-7f03 r--p 00000000 08:01 2 /opt/venv/lib/libtbb.so.12
7f03-7f04 r-xp 00000000 08:01 3 /usr/lib/x86_64-linux-gnu/libtbbmalloc.so.2
7f04-7f05 r-xp 00000000 08:01 4 /opt/intel/lib/libiomp5.so
7f05-7f06 r-xp 00000000 08:01 5 /opt/conda/lib/libomp.so
7f06-7f07 r-xp 00000000 08:01 6 /opt/conda/lib/libmkl_core.so.2
7f07-7f08 r-xp 00000000 08:01 7 /opt/conda/lib/libmkl_intel_thread.so.2
7f08-7f09 rw-p 00000000 00:00 0 [heap]
7f09-7f0a r-xp 00000000 08:01 8 /usr/lib/x86_64-linux-gnu/libc.so.6
"""


def test_loaded_objects_parses_maps_once_per_file():
    objs = loaded_objects(FAKE_MAPS)
    assert objs[1].endswith("libtbb.so.12") and len(objs) == 8
    assert "[heap]" not in objs


def test_classify_and_owner():
    assert classify("/x/libscipy_openblas64_-32a4b2a6.so")[:2] == ("openblas", "blas")
    assert classify("/x/libgomp-a34b3233.so.1.0.0")[0] == "libgomp"
    assert classify("/x/libiomp5.so")[0] == "libiomp"
    assert classify("/x/libomp.so")[0] == "libomp"
    assert classify("/x/libtbb.so.12")[1] == "tbb"
    assert classify("/x/libtbbmalloc.so.2") is None
    assert classify("/x/libc.so.6") is None
    assert owner_of("/v/lib/python3.11/site-packages/numpy.libs/libscipy_openblas64_.so") == "numpy"
    assert owner_of("/v/lib/python3.11/site-packages/scikit_learn.libs/libgomp.so.1") == "scikit-learn"
    assert owner_of("/v/lib/python3.11/site-packages/torch/lib/libgomp.so.1") == "torch"
    assert owner_of("/usr/lib/x86_64-linux-gnu/libgomp.so.1") == "system"
    assert owner_of("/opt/conda/lib/libomp.so") == "environment /opt/conda"


def test_runtimes_threadpoolctl_cannot_see_come_from_loaded_objects():
    code = ("import json; from parinfo.records.convert import dump; "
            "from parinfo.process.pools import native_pools, threading_layers; "
            f"rows = native_pools({FAKE_MAPS!r}); "
            "print(json.dumps([[dump(r) for r in rows], dump(threading_layers(rows))]))")
    rows, layers = run_json(code)
    fake = {r["library"]: r for r in rows if r["seen_by"] == "loaded objects"}
    assert set(fake) == {"libgomp", "tbb", "libiomp", "libomp", "mkl"}
    tbb = fake["tbb"]
    assert (tbb["user_api"], tbb["num_threads"], tbb["owner"]) == ("tbb", None, "environment /opt/venv")
    assert fake["mkl"]["threading_layer"] == "intel"
    assert fake["mkl"]["filepath"].endswith("libmkl_core.so.2")
    assert fake["libgomp"]["owner"] == "scikit-learn"
    assert layers["tbb"] is True
    assert {"Intel libiomp", "LLVM libomp", "GNU libgomp"} <= set(layers["openmp_vendors"])
    assert layers["mkl"] == "intel"


def test_threading_layers_in_words():
    pools = [
        {"library": "openblas", "threading_layer": "pthreads"},
        {"library": "openblas", "threading_layer": "openmp"},
        {"library": "libgomp", "threading_layer": None},
        {"library": "mkl", "threading_layer": None},
    ]
    out = dump(threading_layers([load(PoolRow, p, strict=True) for p in pools]))
    assert out["openmp"] == "GNU libgomp"
    assert out["openblas"] == "pthreads, openmp"
    assert out["mkl"] == "unknown"
    assert out["blis"] is None and out["tbb"] is False
    assert out["summary"] == "OpenMP: GNU libgomp; MKL: unknown; OpenBLAS: pthreads, openmp (2 copies); TBB: no"
    assert threading_layers([]).openmp is None


@pytest.mark.torch
def test_torch_libgomp_and_mkl_inside_torch_are_pools():
    out = run_json("import json, torch; from parinfo.records.convert import dump; "
                   "from parinfo.process.pools import native_pools; "
                   "from parinfo.process.torch_config import parse_parallel_info; "
                   "print(json.dumps([[dump(r) for r in native_pools()],\n"
                   "dump(parse_parallel_info(torch.__config__.parallel_info())), "
                   "torch.backends.mkl.is_available()]))")
    rows, parsed, mkl = out
    gomp = [r for r in rows if r["library"] in ("libgomp", "libiomp") and r["owner"] == "torch"]
    assert gomp and gomp[0]["seen_by"] == "threadpoolctl"
    assert gomp[0]["num_threads"] == parsed["omp_max_threads"]
    if not mkl:
        pytest.skip("this torch build has no MKL")
    inside = [r for r in rows if r["library"] == "mkl" and r["owner"] == "torch"]
    assert len(inside) == 1
    row = inside[0]
    assert os.path.basename(row["filepath"]).startswith("libtorch_cpu")
    assert row["num_threads"] == parsed["mkl_max_threads"]
    assert row["version"] == parsed["mkl_version"] and row["version"]


@pytest.mark.torch
def test_mkl_inside_torch_follows_mkl_num_threads():
    rows = run_json("import json, torch; from parinfo.records.convert import dump; "
                    "from parinfo.process.pools import native_pools; "
                    "print(json.dumps([dump(r) for r in native_pools()]))", env=clean_env(MKL_NUM_THREADS="1"))
    inside = [r for r in rows if r["library"] == "mkl" and r["owner"] == "torch"]
    if not inside:
        pytest.skip("this torch build has no MKL")
    assert inside[0]["num_threads"] == 1


def test_no_torch_import_and_no_mkl_row_without_torch():
    out = run_json("import json, sys; from parinfo.process.pools import native_pools; rows = native_pools(); "
                   "print(json.dumps(['torch' in sys.modules, [r['owner'] for r in rows]]))")
    assert out[0] is False and "torch" not in out[1]



def _system_tbb() -> str | None:
    import ctypes.util

    return ctypes.util.find_library("tbb")


@pytest.mark.parametrize("prefix, cpus", [(None, len(os.sched_getaffinity(0))), (["taskset", "-c", "0"], 1)])
def test_tbb_is_a_pool_with_its_count_read_through_getters(prefix, cpus):
    name = _system_tbb()
    if name is None:
        pytest.skip("no libtbb on this machine")
    code = (f"import ctypes, json, os; ctypes.CDLL({name!r}); from parinfo.records.convert import dump; "
             "from parinfo.process.pools import native_pools; "
            "rows = [dump(r) for r in native_pools()]; "
            "print(json.dumps([rows, len(os.listdir('/proc/self/task'))]))")
    rows, nthreads = run_json(code, prefix=prefix)
    tbb = [r for r in rows if r["library"] == "tbb"]
    assert len(tbb) == 1
    assert tbb[0]["seen_by"] == "loaded objects" and tbb[0]["user_api"] == "tbb"
    if tbb[0]["version"] is None:
        pytest.skip("TBB older than oneTBB 2021: no getters")
    assert tbb[0]["num_threads"] == cpus
    assert nthreads == 1  # reading the count started no TBB worker


def test_a_threadpoolctl_failure_still_lists_the_loaded_runtimes(monkeypatch):
    import parinfo.process.pools as pools

    def broken(*_):
        raise RuntimeError("boom")

    monkeypatch.setattr(pools, "_tpc_rows", broken)
    maps = "".join(line + "\n" for line in FAKE_MAPS.splitlines() if "libomp.so" not in line)
    rows = [dump(r) for r in pools.native_pools(maps)]  # without the Intel+LLVM pair: threadpoolctl asked
    assert {r["library"] for r in rows} == {"libgomp", "tbb", "libiomp", "mkl"}
    assert all(r["num_threads"] is None for r in rows)
    assert "threadpoolctl failed (RuntimeError: boom)" in rows[0]["note"]


def test_the_intel_llvm_pair_asks_no_library(monkeypatch):
    import parinfo.process.pools as pools

    def called(*_):
        raise AssertionError("threadpoolctl must not be asked with the pair loaded")

    monkeypatch.setattr(pools, "_tpc_rows", called)
    rows = [dump(r) for r in pools.native_pools(FAKE_MAPS)]
    assert {r["library"] for r in rows} == {"libgomp", "tbb", "libiomp", "libomp", "mkl"}
    assert all(r["num_threads"] is None and r["note"] == pools.CONFLICT_NOTE for r in rows
               if r["seen_by"] == "loaded objects" and r["library"] != "mkl")
    assert [p.rsplit("/", 1)[1] for p in pools.openmp_conflict(loaded_objects(FAKE_MAPS))] == [
        "libiomp5.so", "libomp.so"]
