"""ONNX Runtime, tokenizers and OpenCV (parinfo/process/library_inference.py): in real processes
with the real wheels, each count parinfo.inspect() gives equals what the library itself does (a new
session's threads, the pool a batch encode starts, cv2.getNumThreads), with and without their
variables, with a 1-CPU affinity and in a 0.5-CPU quota; and the family rules on fake facts."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
from conftest import clean_env
from profile_machines import machine

from parinfo.process import libraries as reg
from parinfo.process.defaults import NO_FACTS
from parinfo.process.library_inference import OnnxRuntime, OpenCV, Tokenizers
from parinfo.process.provenance import model_of, pool_model, predict
from parinfo.records.source import Kind, file

ROWS = ("onnxruntime", "onnxruntime inter-op", "tokenizers", "opencv")

# One process: parinfo reads first (it must start no thread), then each library shows what it does:
# a sequential session adds intra - 1 threads, a parallel one intra - 1 + inter - 1; a batch encode
# starts rayon's pool (no thread: it ran in the calling thread); cv2.getNumThreads() is OpenCV's getter.
_PROBE = r'''
import json, os, sys
def n(): return len(os.listdir("/proc/self/task"))
import cv2, onnxruntime as ort
from tokenizers import Tokenizer, models, pre_tokenizers
import parinfo
before = n()
said = {s.library: [s.count, s.source.kind.value] for s in parinfo.inspect().settings}
started = n() - before
def v(x):
    out = bytearray()
    while True:
        b, x = x & 0x7f, x >> 7
        out.append(b | 0x80 if x else b)
        if not x: return bytes(out)
def f(num, payload):  # one protobuf field: an int as a varint, bytes length-delimited
    if isinstance(payload, int): return v(num << 3) + v(payload)
    return v(num << 3 | 2) + v(len(payload)) + payload
def s(num, text): return f(num, text.encode())
shape = f(1, f(1, 4))  # ModelProto > GraphProto > ValueInfoProto > TypeProto.Tensor: float, shape [4]
tensor = f(1, f(1, 1) + f(2, shape))
def info(name): return s(1, name) + f(2, tensor)
graph = f(1, s(1, "x") + s(2, "y") + s(3, "n") + s(4, "Relu")) + s(2, "g") + f(11, info("x")) + f(12, info("y"))
model = f(1, 8) + f(8, s(1, "") + f(2, 13)) + f(7, graph)
def session(parallel):
    so = ort.SessionOptions()
    if parallel:
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
did = {}
b = n()
try:
    s1 = session(False)
    did["onnxruntime"] = n() - b + 1
    b = n()
    s2 = session(True)
    did["onnxruntime inter-op"] = n() - b - (did["onnxruntime"] - 1) + 1
except RuntimeError:
    did["onnxruntime"] = None
tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
b = n()
tok.encode_batch(["a b a b c"] * 4000)
did["tokenizers"] = (n() - b) or 1
try:
    did["opencv"] = cv2.getNumThreads()
except cv2.error:
    did["opencv"] = None
print(json.dumps({"said": said, "did": did, "started": started}))
'''


def _probe(env: dict[str, str], prefix: list[str] | None = None) -> dict:
    cmd = [*(prefix or []), sys.executable, "-c", _PROBE]
    proc = subprocess.run(cmd, env=clean_env(**env), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check(out: dict, rows: tuple[str, ...] = ROWS) -> dict[str, list]:
    assert out["started"] == 0, "parinfo's read started a thread"
    for row in rows:
        assert out["said"][row][0] == out["did"][row], (row, out)
    return out["said"]


_SET = {"ORT_INTRA_OP_NUM_THREADS": "3", "ORT_INTER_OP_NUM_THREADS": "4", "RAYON_NUM_THREADS": "3",
        "OPENCV_FOR_THREADS_NUM": "3"}


@pytest.mark.pools("onnxruntime", "tokenizers", "cv2")
def test_counts_equal_what_the_libraries_do_with_and_without_their_variables():
    said = _check(_probe({}))
    assert all(said[row][1] == Kind.LIBRARY_DEFAULT.value for row in ROWS)
    said = _check(_probe(_SET))
    assert {row: said[row] for row in ROWS} == {row: [3 if row != "onnxruntime inter-op" else 4, "variable"]
                                                for row in ROWS}
    # the legacy rayon name; tokenizers switched off; values ONNX Runtime and OpenCV raise on
    said = _check(_probe({"RAYON_RS_NUM_CPUS": "3", "TOKENIZERS_PARALLELISM": "false",
                          "ORT_INTRA_OP_NUM_THREADS": "+3", "OPENCV_FOR_THREADS_NUM": "abc"}),
                  ("onnxruntime", "tokenizers", "opencv"))
    assert said["onnxruntime"] == [None, "unknown"] and said["opencv"] == [None, "unknown"]
    assert said["tokenizers"] == [1, "variable"]
    said = _check(_probe({"RAYON_RS_NUM_CPUS": "3"}), ("tokenizers",))
    assert said["tokenizers"] == [3, "variable"]


@pytest.mark.pools("onnxruntime", "tokenizers", "cv2")
def test_counts_under_one_cpu_of_affinity_and_a_half_cpu_quota(quota_cgroup):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs to tell a 1-CPU affinity apart")
    pinned = _check(_probe({}, ["taskset", "-c", "0"]))
    assert pinned["tokenizers"][0] == pinned["opencv"][0] == 1  # both follow affinity
    procs = os.path.join(quota_cgroup, "cgroup.procs")
    quota = _check(_probe({}, ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]))
    assert quota["tokenizers"][0] == 1  # rayon follows the quota; ONNX Runtime and OpenCV (nested cgroup) do not
    assert quota["onnxruntime"][0] == pinned["onnxruntime"][0] == _probe({})["said"]["onnxruntime"][0]


# -- the family rules on fake facts ------------------------------------------------------------------
def _with_quota(m, where: str):
    return dataclasses.replace(m, quota_source=file(where))


def test_onnxruntime_default_is_the_machines_physical_cores_whatever_the_affinity_and_quota():
    lib = OnnxRuntime()
    odd = machine(8, smt=2, affinity=[0], quota=0.5)
    assert lib.default(odd, NO_FACTS)[0] == lib.pool_default("inter-op", odd, NO_FACTS)[0] == 8
    env = {"ORT_INTER_OP_NUM_THREADS": "5", "ORT_INTRA_OP_NUM_THREADS": "1"}
    inter = pool_model(lib, lib.pool("inter-op"))
    assert (predict(model_of(lib), env, machine(2)).count, predict(inter, env, machine(2)).count) == (1, 5)


def test_onnxruntime_inter_op_is_its_pool_with_no_calls_sized_at_use():
    lib = OnnxRuntime()
    pool = lib.pool("inter-op")
    assert pool.calls is None and pool.sized_at_use and pool.sized_at_use != lib.sized_at_use
    assert lib.read_pool("inter-op", object()) is None and lib.interop_calls is None
    with pytest.raises(TypeError):  # no setter to name or call
        lib.pool_call("inter-op")
    assert lib.variables == ("ORT_INTRA_OP_NUM_THREADS", "ORT_INTER_OP_NUM_THREADS")
    assert reg.find("onnxruntime inter-op") is None and reg.THREAD_VARS["ORT_INTER_OP_NUM_THREADS"].readers == (
        "onnxruntime",)


def test_onnxruntime_refuses_what_is_not_digits_and_takes_0_as_its_default():
    lib = OnnxRuntime()
    for bad in ("+3", " 3", "3 ", "abc", "-1", "2x"):
        count, source = lib.imposed({"ORT_INTRA_OP_NUM_THREADS": bad}) or (0, None)
        assert count is None and source is not None and source.kind is Kind.UNKNOWN
    for fine in ("03", "0", ""):
        assert lib.imposed({"ORT_INTRA_OP_NUM_THREADS": fine}) is None
    # each pool is refused for its own variable only
    assert lib.imposed({"ORT_INTER_OP_NUM_THREADS": "+3"}) is None
    count, source = lib.imposed({"ORT_INTER_OP_NUM_THREADS": "+3"}, "inter-op") or (0, None)
    assert count is None and source is not None and "ORT_INTER_OP_NUM_THREADS='+3'" in source.text
    assert lib.imposed({"ORT_INTRA_OP_NUM_THREADS": "+3"}, "inter-op") is None
    assert lib.imposes({"ORT_INTER_OP_NUM_THREADS": "x"}) and not lib.imposes({"ORT_INTER_OP_NUM_THREADS": "4"})
    assert predict(model_of(lib), {"ORT_INTRA_OP_NUM_THREADS": "0"}, machine(4)).count == 4


def test_rayon_default_follows_affinity_and_the_quota_rounded_down():
    lib = Tokenizers()
    assert lib.default(machine(4), NO_FACTS)[0] == 4
    assert lib.default(machine(4, affinity=[1, 2]), NO_FACTS)[0] == 2
    assert lib.default(machine(4, quota=0.5), NO_FACTS)[0] == 1
    assert lib.default(machine(4, quota=2.5), NO_FACTS)[0] == 2
    assert lib.default(machine(2, quota=3.0), NO_FACTS)[0] == 2
    env = {"RAYON_NUM_THREADS": "6", "RAYON_RS_NUM_CPUS": "3"}
    assert predict(model_of(lib), env, machine(2)).count == 6
    assert predict(model_of(lib), {"RAYON_RS_NUM_CPUS": "3"}, machine(2)).count == 3


def test_tokenizers_parallelism_off_words_keep_batches_in_the_calling_thread():
    lib = Tokenizers()
    for off in ("false", "FALSE", "0", "off", "no", "f", "n", ""):
        assert lib.imposed({"TOKENIZERS_PARALLELISM": off}) == (1, lib.imposed({"TOKENIZERS_PARALLELISM": off})[1])
    for on in ("true", "1", "abc"):
        assert lib.imposed({"TOKENIZERS_PARALLELISM": on}) is None
    assert lib.imposed({}) is None


def test_opencv_follows_only_the_quota_of_the_cgroup_mounts_root():
    lib = OpenCV()
    assert lib.default(machine(4, affinity=[0, 1]), NO_FACTS)[0] == 2
    nested = _with_quota(machine(4, quota=1.5), "/sys/fs/cgroup/cpu/docker/x/cpu.cfs_quota_us")
    assert lib.default(nested, NO_FACTS)[0] == 4
    for root in OpenCV.quota_files:
        assert lib.default(_with_quota(machine(4, quota=1.5), root), NO_FACTS)[0] == 1
        assert lib.default(_with_quota(machine(4, quota=0.5), root), NO_FACTS)[0] == 1
    assert lib.imposed({"OPENCV_FOR_THREADS_NUM": "2x"}) is not None
    assert lib.imposed({"OPENCV_FOR_THREADS_NUM": "1000"}) is None


def test_their_variables_are_listed_only_while_their_module_is_loaded():
    for var, module in (("ORT_INTRA_OP_NUM_THREADS", "onnxruntime"), ("RAYON_NUM_THREADS", "tokenizers"),
                        ("OPENCV_FOR_THREADS_NUM", "cv2"), ("TOKENIZERS_PARALLELISM", "tokenizers")):
        assert not reg.listed_unset(var, modules=())
        assert reg.listed_unset(var, modules={module})


def test_onnxruntime_before_1_29_reads_no_variable(monkeypatch):
    from types import SimpleNamespace

    lib = OnnxRuntime()
    monkeypatch.setitem(sys.modules, "onnxruntime", SimpleNamespace(__version__="1.28.0"))
    env = {"ORT_INTRA_OP_NUM_THREADS": "1", "ORT_INTER_OP_NUM_THREADS": "2"}
    assert lib.count_vars == lib.pool_vars("inter-op") == () and not lib.imposes({"ORT_INTER_OP_NUM_THREADS": "x"})
    assert predict(model_of(lib), env, machine(4)).count == 4
    assert predict(pool_model(lib, lib.pool("inter-op")), env, machine(4)).count == 4
    monkeypatch.setitem(sys.modules, "onnxruntime", SimpleNamespace(__version__="1.29.0"))
    assert (lib.count_vars, lib.pool_vars("inter-op")) == (("ORT_INTRA_OP_NUM_THREADS",), ("ORT_INTER_OP_NUM_THREADS",))
    assert predict(model_of(lib), env, machine(4)).count == 1
    assert predict(pool_model(lib, lib.pool("inter-op")), env, machine(4)).count == 2
