"""library_settings with torch: intra-op and inter-op sources, and torch's own OpenMP runtime."""
from __future__ import annotations

import pytest
from conftest import clean_env, run_json

pytestmark = pytest.mark.torch

CODE = ("import json, os, torch; from parinfo.records.convert import dump; "
        "{before}from parinfo.process.pools import native_pools; "
        "from parinfo.process.frameworks import torch_info; from parinfo.process.provenance import library_settings; "
        "from parinfo.machine.topology import machine_facts; "
        "print(json.dumps([dump(r) for r in library_settings(native_pools(), torch_info(), os.environ, None, "
        "machine_facts())]))")


def rows_for(before: str = "", **kw) -> dict[str, dict]:
    rows = run_json(CODE.format(before=before), **kw)
    return {(r["library"], r["owner"]): r for r in rows}


def test_torch_rows_follow_mkl_then_omp():
    rows = rows_for(env=clean_env(MKL_NUM_THREADS="1", OMP_NUM_THREADS="2"))
    intra = rows[("torch intra-op", "torch")]
    if intra["precedence"] == ["OMP_NUM_THREADS"]:
        pytest.skip("torch built without MKL")
    assert intra["count"] == 1 and intra["source"]["text"] == "env MKL_NUM_THREADS=1"
    assert intra["precedence"] == ["MKL_NUM_THREADS", "OMP_NUM_THREADS"]
    inter = rows[("torch inter-op", "torch")]
    assert inter["source"]["kind"] == "library default" and "hardware_concurrency" in inter["source"]["text"]
    assert inter["precedence"] == []


def test_torch_setters_are_run_time_sources():
    rows = rows_for("torch.set_num_threads(7); torch.set_num_interop_threads(5); ")
    intra = rows[("torch intra-op", "torch")]
    assert intra["count"] == 7 and intra["source"]["kind"] == "run-time call"
    assert intra["source"]["text"].startswith("set at run time") and "torch.set_num_threads" in intra["source"]["text"]
    inter = rows[("torch inter-op", "torch")]
    assert (inter["count"], inter["source"]) == (5, {"kind": "run-time call", "detail": "torch.set_num_interop_threads",
                                                     "text": "set at run time (torch.set_num_interop_threads)"})


def test_torch_libgomp_set_by_torch_is_said():
    rows = rows_for(env=clean_env(OMP_NUM_THREADS="8"))
    gomp = [r for (lib, owner), r in rows.items() if lib == "libgomp" and owner == "torch"]
    if not gomp:
        pytest.skip("this torch build ships no libgomp")
    intra = rows[("torch intra-op", "torch")]
    # libgomp alone would take 8; torch sets its runtime to its own (capped) intra-op count.
    if intra["count"] == 8:
        assert gomp[0]["source"]["text"] == "env OMP_NUM_THREADS=8"
    else:
        assert gomp[0]["count"] == intra["count"]
        assert gomp[0]["source"]["text"].startswith("set by torch") and gomp[0]["source"]["kind"] == "framework"


def test_taskset_gives_intra_from_affinity_but_inter_from_all_cpus():
    rows = rows_for(prefix=["taskset", "-c", "0"])
    intra, inter = rows[("torch intra-op", "torch")], rows[("torch inter-op", "torch")]
    assert intra["count"] == 1 and intra["source"]["text"] == "default: 1 physical core in affinity"
    assert inter["source"]["kind"] == "library default" and inter["count"] == inter["expected_from_env"]


def test_an_openmp_limit_after_import_torch_is_not_said_to_be_torch_set_num_threads_alone():
    """threadpoolctl's OpenMP limit in this thread changes torch's count too (its OpenMP build reads
    the thread's OpenMP count): nothing tells it from torch.set_num_threads, so both are named."""
    rows = rows_for("import threadpoolctl; threadpoolctl.threadpool_limits(1, user_api='openmp'); ")
    intra = rows[("torch intra-op", "torch")]
    if intra["count"] != 1:
        pytest.skip("this torch build does not read the thread's OpenMP count")
    for row in [intra, *(r for (lib, owner), r in rows.items() if owner == "torch" and r["count"] == 1
                         and lib in ("libgomp", "libiomp", "libomp", "mkl"))]:
        said = row["source"]["text"]
        assert "torch.set_num_threads" in said and "OpenMP limit in this thread" in said, row
        assert "set_num_threads(1), which sets" not in row["source"]["text"]
