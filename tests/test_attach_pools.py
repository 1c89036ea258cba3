"""A Python 3.14 process holding every pool library (ONNX Runtime, Polars, pyarrow, DuckDB,
tokenizers, OpenCV, numba, numpy), each used once: ``show --pid`` and ``show --pid --attach`` name the
library that owns each of its threads (none left to "python" or unknown), and the counts read
through ``--attach`` equal the libraries' own getters in the target."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import clean_env

TESTS = os.path.dirname(os.path.abspath(__file__))

# The target uses each library once, prints its getters and its thread count, then runs Python code
# every 20 ms (so that --attach gets its turn) until its stdin ends.
_TARGET = r'''
import json, os, select, sys
import cv2, duckdb, numba, onnxruntime as ort, polars as pl, pyarrow as pa
from tokenizers import Tokenizer, models, pre_tokenizers
sys.path.insert(0, sys.argv[1])
from onnx_model import relu_model
sess = ort.InferenceSession(relu_model(), providers=["CPUExecutionProvider"])
pl.DataFrame({"a": list(range(1000))}).select(pl.col("a").sum())
con = duckdb.connect()
tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.encode_batch(["a b a b c"] * 4000)
from numba import njit, prange
@njit(parallel=True)
def total(k):
    t = 0
    for i in prange(k): t += i
    return t
total(100)
did = {"polars": pl.thread_pool_size(), "pyarrow": pa.cpu_count(), "pyarrow io": pa.io_thread_count(),
       "opencv": cv2.getNumThreads(), "numba": numba.get_num_threads(), "threads": len(os.listdir("/proc/self/task"))}
print(json.dumps(did), flush=True)
while not select.select([sys.stdin], [], [], 0.02)[0]:
    pass
'''


def _show(pid: int, *extra: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "parinfo", "show", "--pid", str(pid), *extra, "--json"],
                         env=clean_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@pytest.mark.pools("onnxruntime")
@pytest.mark.timeout(300)
def test_every_thread_of_a_314_process_with_every_pool_has_its_owner_and_attach_reads_the_counts(
        py314_pools_python):
    target = subprocess.Popen([py314_pools_python, "-c", _TARGET, TESTS], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=clean_env())
    try:
        assert target.stdout is not None
        did = json.loads(target.stdout.readline())
        outside = _show(target.pid)
        attached = _show(target.pid, "--attach")
    finally:
        assert target.stdin is not None
        target.stdin.close()
        target.wait(timeout=30)
    for report in (outside, attached):
        threads = report["threads"]["threads"]
        assert len(threads) >= did["threads"] - 1
        owners = {t["tid"]: t["owner"] for t in threads}
        named = {t["name"]: t["owner"] for t in threads}
        # every thread but the main one belongs to a library (allocator threads to the library whose
        # jemalloc they are): none is left to "python", "other" or unknown
        left = [t for t in threads if t["owner"] != "main thread" and (
            t["owner"] in ("python",) or t["owner"].startswith(("unknown", "other")))]
        assert not left, left
        assert named["polars-0"] == named["tokio-rt-worker"] == "polars", owners
        pooled = sum(1 for t in threads if t["owner"] != "main thread")
        assert pooled >= 0.9 * len(threads)
    counts = {r["library"]: r["count"] for r in attached["settings"]}
    for lib in ("polars", "pyarrow", "pyarrow io", "opencv", "numba"):
        assert counts[lib] == did[lib], (lib, counts, did)
