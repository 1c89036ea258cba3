"""Profiles reach every pool library (ONNX Runtime, Polars, Arrow, DuckDB, tokenizers, numba, OpenCV,
XGBoost): in a launched program through the variables each reads, and in a running process through
its setter, its variable when its pool is made, or the line of code that sets it (apply says which).
Checked in real processes with the real wheels, by each library's own getter or by the threads it
starts."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import clean_env
from profile_machines import MACHINES

from parinfo.process import libraries as reg
from parinfo.profiles.loading import resolve_profile

# What each library does, by its own getter or by the threads it starts: a sequential ONNX Runtime
# session adds intra - 1 threads, an XGBoost train call a team of n - 1 besides its caller; a batch
# encode starts rayon's pool of n threads (none: 1).
_DID = r'''
import json, os, sys
def n(): return len(os.listdir("/proc/self/task"))
import cv2, duckdb, numba, onnxruntime as ort, polars as pl, pyarrow as pa, xgboost
from tokenizers import Tokenizer, models, pre_tokenizers
EARLY
sys.path.insert(0, TESTS)  # tests/onnx_model.py
from onnx_model import relu_model
model = relu_model()
did = {}
b = n()
sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
did["onnxruntime"] = n() - b + 1
import numpy as np
b = n()  # an XGBoost train call: an OpenMP team of its count (n - 1 threads besides the caller)
xgboost.train({"tree_method": "hist"}, xgboost.DMatrix(np.random.rand(2000, 4), label=np.random.rand(2000)), 2)
did["xgboost"] = n() - b + 1
pl.DataFrame({"a": list(range(1000))}).select(pl.col("a").sum())
did["polars"] = pl.thread_pool_size()
did["pyarrow"], did["pyarrow io"] = pa.cpu_count(), pa.io_thread_count()
did["duckdb"] = duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0]
did["opencv"] = cv2.getNumThreads()
tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
b = n()
tok.encode_batch(["a b a b c"] * 4000)
did["tokenizers"] = (n() - b) or 1
from numba import njit, prange
@njit(parallel=True)
def total(k):
    t = 0
    for i in prange(k): t += i
    return t
total(100)
did["numba"] = numba.get_num_threads()
print(json.dumps({"did": did, "result": RESULT}))
'''

TESTS = os.path.dirname(os.path.abspath(__file__))
_POOLS = ("onnxruntime", "polars", "pyarrow", "duckdb", "tokenizers", "numba", "cv2", "xgboost")


# parinfo's report in the process, read after each library was used: {row: count}.
_SAID = "(__import__('parinfo') and {r.library: r.count for r in __import__('parinfo').inspect().settings})"


def _run(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    proc = subprocess.run(cmd, env=clean_env(**(env or {})), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _program(early: str = "", result: str = "None") -> str:
    return _DID.replace("EARLY", early).replace("RESULT", result).replace("TESTS", repr(TESTS))


@pytest.mark.pools(*_POOLS)
def test_apply_container_gives_each_library_the_one_cpu_of_its_cgroup():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs, so that a 1-CPU quota is below what the libraries see")
    from real_cgroup import quota_cgroup

    with quota_cgroup(1.0) as made:
        if isinstance(made, str):
            pytest.skip(f"cannot make a cgroup with a quota here: {made}")
        procs = os.path.join(str(made[0]), "cgroup.procs")
        enter = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]
        program = _program(result=_SAID)
        alone_out = _run([*enter, sys.executable, "-c", program])
        applied_out = _run([*enter, sys.executable, "-m", "parinfo", "apply", "container", "--",
                            sys.executable, "-c", program])
    alone, applied = alone_out["did"], applied_out["did"]
    # what parinfo reports in the process, after each library was used, is what the library did
    for out in (alone_out, applied_out):
        for lib in ("onnxruntime", "polars", "pyarrow", "pyarrow io", "opencv", "tokenizers", "numba", "xgboost"):
            assert out["result"][lib] == out["did"][lib], (lib, out)
    # Without the profile, the libraries that ignore the quota take both CPUs (measured: ONNX Runtime
    # the physical cores, Arrow and numba the affinity, OpenCV a quota only at the cgroup root).
    assert alone["pyarrow"] == alone["numba"] == alone["opencv"] == 2, alone
    ones = {k: applied[k] for k in ("onnxruntime", "polars", "pyarrow", "duckdb", "opencv", "tokenizers", "numba")}
    assert ones == dict.fromkeys(ones, 1), applied
    assert applied["xgboost"] == 1 and alone["xgboost"] == 2, (alone, applied)
    assert applied["pyarrow io"] == 8  # an I/O pool: the profile leaves it at Arrow's 8 (docs/libraries.md)


# Imported before apply(): Arrow's and OpenCV's setters take the count now; tokenizers' pool (not
# started) and new ONNX Runtime sessions read the variables apply() sets; Polars and numba took theirs
# at import, DuckDB reads none: apply() gives the line that sets each.
_APPLY = r'''
import parinfo
applied = parinfo.apply("single-thread")
said = {r.library: [r.count, r.source.kind.value] for r in parinfo.inspect().settings}
'''


@pytest.mark.pools(*_POOLS)
def test_apply_reaches_each_library_imported_before_it_or_says_the_line_to_write():
    out = _run([sys.executable, "-c", _program(_APPLY, "{'applied': applied.lines(), 'said': said}")])
    did, lines, said = out["did"], out["result"]["applied"], out["result"]["said"]
    for lib in ("onnxruntime", "pyarrow", "opencv", "tokenizers"):
        assert did[lib] == 1, (lib, did)
    wide = len(os.sched_getaffinity(0))
    assert did["pyarrow io"] == 8 and did["duckdb"] == did["numba"] == did["polars"] == wide  # not reached
    assert "pyarrow.set_cpu_count(1)" in lines["applied"] and "cv2.setNumThreads(1)" in lines["applied"]
    assert any(line.startswith("onnxruntime: ORT_INTRA_OP_NUM_THREADS=1, read when a session is made")
               for line in lines["applied"])
    skipped = "\n".join(lines["skipped"])
    assert "duckdb: no process-wide setting reaches it here; for 1, in the program: duckdb.connect(config=" in skipped
    assert ("numba.set_num_threads(1) in each thread that runs parallel code (numba took "
            f"NUMBA_NUM_THREADS={wide}") in skipped
    assert "polars: its pool's count is fixed already; for 1: POLARS_MAX_THREADS=1 before `import polars`" in skipped
    # the per-thread OpenMP limit does not reach the libraries' own threads (another rule says so)
    assert all(line.startswith("openmp pool") for line in lines["not_in_force"]), lines["not_in_force"]
    # the report, read right after apply(), gives what each library then did, and names the profile
    for lib in ("onnxruntime", "pyarrow", "opencv", "tokenizers"):
        assert said[lib] == [1, "profile"], (lib, said[lib])
    assert said["numba"][0] == wide and said["polars"][0] is None  # its pool had not started


@pytest.mark.pools("polars")
def test_polars_takes_its_variable_at_import_so_apply_after_it_gives_the_line():
    code = ("import polars as pl, json, parinfo; a = parinfo.apply('single-thread'); "
            "pl.DataFrame({'a': [1, 2]}).select(pl.col('a').sum()); "
            "print(json.dumps([a.lines()['skipped'], pl.thread_pool_size()]))")
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    skipped, size = json.loads(proc.stdout.strip().splitlines()[-1])
    assert size == len(os.sched_getaffinity(0))  # POLARS_MAX_THREADS=1, set after the import, not read
    assert "polars: its pool's count is fixed already; for 1: POLARS_MAX_THREADS=1 before `import polars`" in skipped
    proc = subprocess.run([sys.executable, "-c", "import parinfo, json; parinfo.apply('single-thread'); "
                           "import polars as pl; print(pl.thread_pool_size())"], env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.split()[-1] == "1", proc.stderr[-2000:]  # set before the import: taken


def test_every_pool_library_has_a_profile_key_and_launch_variable():
    plan = resolve_profile({"version": 1, "intra_op": 3, "inter_op": 2}, MACHINES["2numa_x28"])
    for key, var in (("onnxruntime", "ORT_INTRA_OP_NUM_THREADS"), ("polars", "POLARS_MAX_THREADS"),
                     ("tokenizers", "RAYON_NUM_THREADS"), ("numba", "NUMBA_NUM_THREADS"),
                     ("opencv", "OPENCV_FOR_THREADS_NUM")):
        assert plan.libraries[key].value == 3 and plan.env[var] == "3", key
    assert plan.env["ORT_INTER_OP_NUM_THREADS"] == "2"  # ONNX Runtime's inter-op pool takes inter_op
    assert reg.library("pyarrow").profile_key == "openmp"  # Arrow's CPU pool reads OMP_NUM_THREADS
    assert plan.libraries["duckdb"].value == 3 and not any("duckdb" in note for note in plan.notes)


def test_a_profile_that_writes_a_duckdb_count_gets_the_line_that_sets_it():
    plan = resolve_profile({"version": 1, "libraries": {"duckdb": 1}}, MACHINES["2numa_x28"])
    note = next(n for n in plan.notes if n.startswith("duckdb"))
    assert "not the profile's 1" in note and "SET threads = 1" in note
    same = resolve_profile({"version": 1, "libraries": {"duckdb": 112}}, MACHINES["2numa_x28"])
    assert not any(n.startswith("duckdb") for n in same.notes)  # its default already: nothing to say
