"""Findings count every pool (issue 38, item 5): ``oversubscribed-pools`` sums every CPU pool that
may run at once (native copies and each Python-module library's), names each library with its count
and the fix that works for it (the family's ``how_to_set``); a library whose default ignores the CPU
quota (its family's ``quota_rule``) is named so in ``count-above-quota``, once per row. On hand-made
reports, on the families' own rules, and in real processes in a real 0.5-CPU cgroup, checked against
each library's own getter."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
from conftest import clean_env
from profile_machines import machine

from parinfo.diagnostics.model import Report
from parinfo.diagnostics.process_rules import diagnose
from parinfo.diagnostics.rule_views import pools_at_once, row_family
from parinfo.process import libraries as reg
from parinfo.process.defaults import NO_FACTS
from parinfo.process.library_base import QuotaRule
from parinfo.process.setting_row import SettingRow
from parinfo.records.source import file

DEFAULT = {"kind": "library default", "detail": "", "text": "default: 2 CPUs in affinity"}
#: The libraries of issue 38's table and its learners: each has a measured quota rule.
MEASURED = ("onnxruntime", "pyarrow", "polars", "duckdb", "tokenizers", "opencv", "numba", "xgboost", "lightgbm")


def sections(usable: int = 2, **machine_facts) -> dict:
    m = {"usable_cpus": usable, "usable_physical_cores": usable, "smt": False, "quota": None,
         "affinity": list(range(usable)), "logical_cpus": usable}
    m.update(machine_facts)
    return {"machine": m, "runtime": {}, "pools": [], "frameworks": {"torch": None}, "settings": [],
            "environment": []}


def row(library: str, count: int | None, source: dict | None = None, **more) -> dict:
    return {"library": library, "count": count, "source": source or DEFAULT, **more}


def found(s: dict, fid: str) -> list:
    return [f for f in diagnose(Report.from_dict(s)) if f.id == fid]


def fix_of(library: str, n: int = 1) -> str:
    lib, pool = row_family(SettingRow(library)) or (None, None)
    assert lib is not None, library
    return lib.how_to_set(n, pool)


# -- oversubscription sums every pool that may run at once --------------------------------------------
def _data_service() -> dict:
    s = sections(2)
    s["pools"] = [{"library": "openblas", "owner": "numpy", "num_threads": 2, "user_api": "blas",
                   "threading_layer": "pthreads"},
                  {"library": "libgomp", "owner": "scikit-learn", "num_threads": 2, "user_api": "openmp"}]
    s["settings"] = [row("pyarrow", 2), row("pyarrow io", 8), row("polars", None, expected_from_env=2),
                     row("duckdb", 2), row("onnxruntime", 2), row("onnxruntime inter-op", 2),
                     row("tokenizers", 2), row("opencv", 2), row("numba", 2), row("xgboost", 2),
                     {"library": "parinfo intra-op", "count": 2, "source": "default", "own": True}]
    return s


def test_oversubscription_sums_each_librarys_cpu_pool_and_names_its_fix():
    (f,) = found(_data_service(), "oversubscribed-pools")
    summed = ("openblas [numpy]", "libgomp [scikit-learn]", "pyarrow", "polars", "duckdb", "onnxruntime",
              "tokenizers", "opencv", "numba")
    assert f.message.startswith(f"{len(summed)} pools may run {2 * len(summed)} threads at once on 2 usable CPUs")
    for who in summed:
        assert f"{who}=2" in f.message
    assert "polars=2 (predicted)" in f.message
    # not summed: the I/O pool, ONNX Runtime's inter-op pool (parallel sessions only), XGBoost's teams
    # (its OpenMP runtime's row is summed), parinfo's own pools
    for left in ("pyarrow io", "onnxruntime inter-op", "xgboost", "parinfo"):
        assert left not in f.message
    for library in ("pyarrow", "polars", "duckdb", "onnxruntime", "tokenizers", "opencv", "numba", "openblas"):
        assert fix_of(library) in f.fix
    for words in ("call pyarrow.set_cpu_count(1)", "call cv2.setNumThreads(1)", "run SET threads = 1",
                  "SessionOptions.intra_op_num_threads = 1", "set ORT_INTRA_OP_NUM_THREADS=1",
                  "set RAYON_NUM_THREADS=1", "set POLARS_MAX_THREADS=1 before `import polars`"):
        assert words in f.fix


def test_pools_at_one_thread_or_few_threads_raise_nothing():
    s = _data_service()
    for r in s["settings"]:
        r["count"] = 1 if r["count"] is not None else None
        r.pop("expected_from_env", None)
    s["pools"] = [dict(p, num_threads=1) for p in s["pools"]]
    assert not found(s, "oversubscribed-pools")
    s = sections(2)
    s["settings"] = [row("pyarrow", 2), row("opencv", 2)]  # 4 threads on 2 CPUs: not above twice
    assert not found(s, "oversubscribed-pools")


def test_the_same_threads_are_counted_once():
    """A BLAS copy on an OpenMP layer runs the OpenMP runtime's threads; torch's intra-op count is its
    OpenMP runtime's pool; LightGBM's teams are its OpenMP runtime's."""
    s = sections(1)
    s["pools"] = [{"library": "mkl", "owner": "torch", "num_threads": 2, "user_api": "blas",
                   "threading_layer": "gnu"},
                  {"library": "libgomp", "owner": "torch", "num_threads": 2, "user_api": "openmp"}]
    s["settings"] = [row("torch intra-op", 2), row("torch inter-op", 2), row("lightgbm", 2), row("opencv", 2)]
    busy = pools_at_once(Report.from_dict(s))
    assert [(p.who, p.threads) for p in busy] == [("libgomp [torch]", 2), ("opencv", 2)]
    # no OpenMP runtime loaded to hold the BLAS copy's threads, and no copy of torch's to hold its own
    s["pools"] = [{"library": "mkl", "owner": "numpy", "num_threads": 2, "user_api": "blas",
                   "threading_layer": "gnu"}]
    assert [p.who for p in pools_at_once(Report.from_dict(s))] == ["mkl [numpy]", "torch intra-op", "opencv"]


# -- a library whose default ignores the quota ----------------------------------------------------------
def test_the_families_quota_rules_are_what_their_defaults_do():
    """Each measured family's quota_rule agrees with its default rule (each checked against the real
    library in its own tests and below): in a nested 0.5-CPU cgroup on 4 CPUs, only the families that
    follow the quota take 1; OpenCV follows one at the cgroup mount's root."""
    nested = dataclasses.replace(machine(4, quota=0.5), quota_source=file("/sys/fs/cgroup/cpu/job/cpu.cfs_quota_us"))
    for name in MEASURED:
        lib = reg.library(name)
        assert lib.quota_rule is not None, name
        n = lib.default(nested, NO_FACTS)[0]
        assert (n == 1) == (lib.quota_rule is QuotaRule.FOLLOWS), (name, n)
    root = dataclasses.replace(nested, quota_source=file("/sys/fs/cgroup/cpu.max"))
    assert reg.library("opencv").quota_rule is QuotaRule.ROOT_ONLY
    assert reg.library("opencv").default(root, NO_FACTS)[0] == 1


def test_a_default_that_ignores_the_quota_is_named_once_with_its_fix():
    s = sections(1, quota=0.5, affinity=[0, 1], logical_cpus=2,
                 quota_source={"kind": "file", "detail": "/sys/fs/cgroup/cpu/job/cpu.cfs_quota_us",
                               "text": "/sys/fs/cgroup/cpu/job/cpu.cfs_quota_us"})
    s["settings"] = [row("pyarrow", 2), row("onnxruntime", 2), row("numba", 2), row("opencv", 2),
                     row("openblas", 2), row("tokenizers", 1), row("duckdb", 2)]
    got = {f.message.split(" uses ")[0]: f for f in found(s, "count-above-quota")}
    assert len(found(s, "count-above-quota")) == len(got) == 6  # one finding a row
    for name in ("pyarrow", "onnxruntime", "numba", "opencv"):
        lib = reg.library(name)
        assert f"{lib.label} {lib.quota_rule.value}" in got[name].message
        assert "sized itself by its default (default: 2 CPUs in affinity)" in got[name].message
        assert got[name].fix.startswith(f"use at most 1: {lib.how_to_set(1)}")
        assert ("parinfo apply container" in got[name].fix) == (lib.profile_key is not None)
    assert "not this one's (/sys/fs/cgroup/cpu/job/cpu.cfs_quota_us)" in got["opencv"].message
    # no measured rule (OpenBLAS), or one that follows the quota (DuckDB rounds it up): the plain finding
    for name in ("openblas", "duckdb"):
        assert got[name].message == f"{name} uses 2 threads but the cgroup CPU quota allows 0.5 CPUs"
    assert "run SET threads = 1 on each connection" in got["duckdb"].fix  # no variable: what works for it


def test_a_count_someone_chose_is_not_blamed_on_the_library():
    s = sections(1, quota=0.5, affinity=[0, 1], logical_cpus=2)
    s["environment"] = [{"name": "ORT_INTRA_OP_NUM_THREADS", "value": "2", "valid": True}]
    s["settings"] = [row("onnxruntime", 2, {"kind": "variable", "detail": "ORT_INTRA_OP_NUM_THREADS=2",
                                            "text": "env ORT_INTRA_OP_NUM_THREADS=2"},
                         variable="ORT_INTRA_OP_NUM_THREADS", precedence=["ORT_INTRA_OP_NUM_THREADS"]),
                     row("pyarrow", 3, {"kind": "run-time call", "detail": "pyarrow.set_cpu_count",
                                        "text": "set at run time (pyarrow.set_cpu_count)"})]
    got = {f.message.split(" uses ")[0]: f for f in found(s, "count-above-quota")}
    assert got["onnxruntime"].message == "onnxruntime uses 2 threads but the cgroup CPU quota allows 0.5 CPUs"
    assert got["onnxruntime"].fix.startswith("use at most 1: set ORT_INTRA_OP_NUM_THREADS=1, or run under")
    assert got["pyarrow"].fix == ("use at most 1: lower the count your program sets at run time to 1: "
                                  "pyarrow.set_cpu_count(1)")


def test_a_variable_fix_names_the_setter_too():
    s = sections(1, affinity=[0])
    s["environment"] = [{"name": "OMP_NUM_THREADS", "value": "4", "valid": True}]
    s["settings"] = [row("pyarrow", 4, {"kind": "variable", "detail": "OMP_NUM_THREADS=4",
                                        "text": "env OMP_NUM_THREADS=4"}, variable="OMP_NUM_THREADS")]
    (f,) = found(s, "count-above-usable")
    assert f.fix == "use at most 1: set OMP_NUM_THREADS=1 (or call pyarrow.set_cpu_count(1))"


def test_every_cpu_pool_of_a_python_library_has_fix_words():
    for lib in reg.python_libraries():
        for pool in (None, *(p.name for p in lib.pools)):
            words = lib.how_to_set(3, pool)
            assert "3" in words and not words.startswith(f"set {lib.name} "), (lib.name, pool, words)


# -- in real processes, in a real 0.5-CPU cgroup --------------------------------------------------------
_TABLE = ("pyarrow", "opencv", "onnxruntime", "tokenizers", "polars", "duckdb", "numba")

# parinfo reads first (it starts no thread), then each library gives its own answer: its getter, or the
# threads a session (a pool of n adds n - 1) or a batch encode (n, or none for 1) adds.
_PROBE = r'''
import json, os
import numpy, cv2, duckdb, numba, onnxruntime as ort, polars, pyarrow
from tokenizers import Tokenizer, models, pre_tokenizers
import parinfo
from onnx_model import relu_model
from parinfo.diagnostics.process_rules import diagnose
from parinfo.records.convert import dump

def n():
    return len(os.listdir("/proc/self/task"))

before = n()
r = parinfo.inspect()
rows = {s.library: s.count if s.count is not None else s.expected_from_env for s in r.settings if not s.own}
findings = [dump(f) for f in diagnose(r)]
started = n() - before
did = {"pyarrow": pyarrow.cpu_count(), "opencv": cv2.getNumThreads()}
b = n()
session = ort.InferenceSession(relu_model(), providers=["CPUExecutionProvider"])
did["onnxruntime"] = n() - b + 1
tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
b = n()
tok.encode_batch(["a b a"] * 2000)
did["tokenizers"] = (n() - b) or 1
polars.DataFrame({"a": list(range(100))}).select(polars.col("a").sum())
did["polars"] = polars.thread_pool_size()
did["duckdb"] = int(duckdb.connect().sql("select current_setting('threads')").fetchall()[0][0])

@numba.njit(parallel=True)
def total(k):
    s = 0
    for i in numba.prange(k):
        s += i
    return s

total(10)
did["numba"] = numba.get_num_threads()
print(json.dumps({"rows": rows, "findings": findings, "did": did, "started": started,
                  "usable": r.machine.usable_cpus}))
'''

_ALL_ONE = {"ORT_INTRA_OP_NUM_THREADS": "1", "ORT_INTER_OP_NUM_THREADS": "1", "POLARS_MAX_THREADS": "1",
            "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "OPENCV_FOR_THREADS_NUM": "1", "RAYON_NUM_THREADS": "1"}


def _in_cgroup(cgroup: str, env: dict[str, str]) -> dict:
    procs = os.path.join(cgroup, "cgroup.procs")
    tests = os.path.dirname(__file__)
    cmd = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", sys.executable, "-c", _PROBE]
    run_env = clean_env(**env)
    run_env["PYTHONPATH"] = os.pathsep.join(p for p in (run_env.get("PYTHONPATH"), tests) if p)
    proc = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["started"] == 0, "parinfo's read started a thread"
    assert out["usable"] == 1
    for name in _TABLE:  # what parinfo says is what the library does
        assert out["rows"][name] == out["did"][name], (name, out["rows"], out["did"])
    return out


@pytest.mark.pools("onnxruntime", "pyarrow", "polars", "duckdb", "tokenizers", "cv2", "numba")
def test_findings_on_the_real_libraries_in_a_half_cpu_cgroup(quota_cgroup):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs to tell a library that ignores a 0.5-CPU quota from one that follows it")
    out = _in_cgroup(quota_cgroup, {})
    above = [f for f in out["findings"] if f["id"] == "count-above-quota"]
    (over,) = [f for f in out["findings"] if f["id"] == "oversubscribed-pools"]
    for name in _TABLE:
        lib, did = reg.library(name), out["did"][name]
        mine = [f for f in above if f["message"].startswith(f"{name} uses ")]
        # the registry's fact, measured: a library that follows the quota takes 1 here, the others more
        assert (did == 1) == (lib.quota_rule is QuotaRule.FOLLOWS), (name, did)
        if lib.quota_rule is QuotaRule.FOLLOWS:
            assert not mine and f"{name}=" not in over["message"]
            continue
        assert len(mine) == 1, (name, above)
        assert f"{name} uses {did} threads" in mine[0]["message"] and lib.quota_rule.value in mine[0]["message"]
        assert lib.how_to_set(1) in mine[0]["fix"]
        assert f"{name}={did}" in over["message"] and lib.how_to_set(1) in over["fix"]

    quiet = _in_cgroup(quota_cgroup, _ALL_ONE)
    assert all(quiet["did"][name] == 1 for name in _TABLE), quiet["did"]
    assert not [f for f in quiet["findings"] if f["id"] in ("count-above-quota", "oversubscribed-pools")]
