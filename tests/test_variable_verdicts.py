"""Bad values of the thread variables: a variable row's verdict and its words come from what each
of its readers does with the value (the library's own parse, measured here in real processes for
the libraries that parse their variables themselves), and no value, however odd, raises."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import clean_env
from hypothesis import HealthCheck, given, settings, strategies as st
from profile_machines import machine

from parinfo.diagnostics import count_rules
from parinfo.process import libraries as reg
from parinfo.process.environment import environment_report
from parinfo.process.library_parts import Does
from parinfo.process.provenance import model_of, pool_model, predict
from parinfo.process.variables import judge, readings

#: Every module a reader lives in: each reader of each variable is shown (a borrowed one included).
ALL_MODULES = {r.module for r in reg.records() if r.module}


def _row(name: str, value: str):
    (row,) = [r for r in environment_report({name: value}, {name: value}, modules=ALL_MODULES, python=(3, 14))
              if r.name == name]
    return row


# (variable, value, valid before this change, valid now): each change is a verdict that was wrong.
CHANGED = [
    ("ARROW_IO_THREADS", "+3", True, False),  # Arrow: "Invalid value" on stderr, 8
    ("ARROW_IO_THREADS", " 3", True, False),
    ("ARROW_IO_THREADS", "2147483648", True, False),  # beyond a C int: refused
    ("OMP_NUM_THREADS", "99999999999", True, False),  # Arrow: beyond a C int, its default
    ("ORT_INTRA_OP_NUM_THREADS", "+3", True, False),  # ONNX Runtime raises
    ("ORT_INTRA_OP_NUM_THREADS", "0", False, True),  # 0: its default
    ("ORT_INTER_OP_NUM_THREADS", " 3", True, False),
    ("RAYON_NUM_THREADS", " 3", True, False),  # rayon skips it
    ("RAYON_NUM_THREADS", "0", False, True),  # 0: its default
    ("POLARS_MAX_THREADS", "0", False, True),
    ("OPENCV_FOR_THREADS_NUM", "0", False, True),
    ("OPENCV_FOR_THREADS_NUM", "+3", True, False),  # cv2.error
    ("TOKENIZERS_PARALLELISM", "", False, True),  # tokenizers: false
]


@pytest.mark.parametrize(("name", "value", "before", "now"), CHANGED)
def test_a_verdict_follows_what_the_readers_do(name, value, before, now):
    from parinfo.process.variables import validate

    assert (validate(name, value) is None) is before
    assert _row(name, value).valid is now


def test_readers_that_disagree_are_each_named_with_what_they_do():
    row = _row("OMP_NUM_THREADS", "1x")
    assert row.valid is False
    assert row.problem == ("libgomp prints a warning and uses its default; libiomp, libomp, torch, mkl, "
                           "openblas, blis, numexpr ignore it and use their defaults; pyarrow takes 1")
    report = SimpleNamespace(machine=SimpleNamespace(invalid={}), environment=[row])
    (found,) = count_rules.invalid_variables(report)  # type: ignore[arg-type]
    assert found.message == f"OMP_NUM_THREADS='1x' is invalid: {row.problem}"
    assert found.why.startswith("its readers disagree: pyarrow takes it")
    assert _row("ORT_INTRA_OP_NUM_THREADS", "+3").problem == "onnxruntime raises RuntimeError when a session is made"
    assert _row("POLARS_MAX_THREADS", "1x").problem == "polars prints a warning and uses its default"


def test_a_report_without_these_libraries_keeps_parinfos_words():
    (row,) = [r for r in environment_report({"OMP_NUM_THREADS": "1x"}, {"OMP_NUM_THREADS": "1x"}, modules=(),
                                            python=(3, 14)) if r.name == "OMP_NUM_THREADS"]
    assert row.problem == "'1x' is not a positive integer" and "pyarrow" not in row.readers
    assert readings("OMP_NUM_THREADS", "1x", row.readers) is None
    assert judge("MKL_NUM_THREADS", "abc", ("mkl", "torch")) == "'abc' is not a positive integer"


_TEXT = st.text(st.characters(blacklist_characters="\0"), max_size=30)
_VALUES = st.one_of(_TEXT, st.integers(-(2**70), 2**70).map(str), st.sampled_from(["", " ", "+", "-0", "\u0663"]),
                    st.integers(0, 2**70).map(lambda n: f"+{n}"), st.integers(0, 99).map(lambda n: f" {n} "),
                    st.integers(30, 6000).map(lambda n: "9" * n))  # past Python's 4300-digit cap on int()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_VALUES)
def test_no_value_of_any_variable_raises(value):
    facts = machine(4)
    for name in reg.THREAD_VARS:
        env = {name: value}
        row = _row(name, value)
        assert row.valid in (True, False) and (row.problem is None) is (row.valid is True)
        report = SimpleNamespace(machine=SimpleNamespace(invalid={}), environment=[row])
        count_rules.invalid_variables(report)  # type: ignore[arg-type]
        for lib in map(reg.library, reg.THREAD_VARS[name].readers):
            said = lib.reading(name, value)
            assert said is None or isinstance(said.does, Does)
            lib.imposed(env)
            predict(model_of(lib), env, facts)
            for pool in lib.pools:
                predict(pool_model(lib, pool), env, facts)


# One process per round of values: each library reads its variables as it loads or first uses them,
# and says what it did: a count, a warning (stderr or a Python warning naming the variable), an error.
_PROBE = r'''
import json, os, warnings
def n(): return len(os.listdir("/proc/self/task"))
def v(x):  # the protobuf of a one-node model (Relu), as tests/test_library_inference.py builds it
    out = bytearray()
    while True:
        b, x = x & 0x7f, x >> 7
        out.append(b | 0x80 if x else b)
        if not x: return bytes(out)
def f(num, payload):
    if isinstance(payload, int): return v(num << 3) + v(payload)
    return v(num << 3 | 2) + v(len(payload)) + payload
def s(num, text): return f(num, text.encode())
shape = f(1, f(1, 4)); tensor = f(1, f(1, 1) + f(2, shape))
def info(name): return s(1, name) + f(2, tensor)
graph = f(1, s(1, "x") + s(2, "y") + s(3, "n") + s(4, "Relu")) + s(2, "g") + f(11, info("x")) + f(12, info("y"))
model = f(1, 8) + f(8, s(1, "") + f(2, 13)) + f(7, graph)
did = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import pyarrow as pa, polars as pl
    did["ARROW_IO_THREADS"] = ["takes", pa.io_thread_count()]
    did["OMP_NUM_THREADS"] = ["takes", pa.cpu_count()]
    did["POLARS_MAX_THREADS"] = ["takes", pl.thread_pool_size()]
if any("POLARS_MAX_THREADS" in str(w.message) for w in caught):
    did["POLARS_MAX_THREADS"][0] = "warns"
import cv2, onnxruntime as ort
from tokenizers import Tokenizer, models, pre_tokenizers
try:
    did["OPENCV_FOR_THREADS_NUM"] = ["takes", cv2.getNumThreads()]
except cv2.error:
    did["OPENCV_FOR_THREADS_NUM"] = ["raises", None]
b = n()
try:
    kept = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    did["ORT_INTRA_OP_NUM_THREADS"] = ["takes", n() - b + 1]
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    b = n()
    try:
        also = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        did["ORT_INTER_OP_NUM_THREADS"] = ["takes", n() - b - (did["ORT_INTRA_OP_NUM_THREADS"][1] - 1) + 1]
    except Exception:
        did["ORT_INTER_OP_NUM_THREADS"] = ["raises", None]
except Exception:
    did["ORT_INTRA_OP_NUM_THREADS"] = ["raises", None]
tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
b = n()
tok.encode_batch(["a b a b c"] * 4000)
did["RAYON_NUM_THREADS"] = ["takes", n() - b]
print(json.dumps(did))
'''

_VARS = ("ARROW_IO_THREADS", "OMP_NUM_THREADS", "POLARS_MAX_THREADS", "OPENCV_FOR_THREADS_NUM",
         "ORT_INTRA_OP_NUM_THREADS", "RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM", "OMP_THREAD_LIMIT",
         "ORT_INTER_OP_NUM_THREADS")
#: Rounds of values, one per variable of _VARS; none asks a pool for more threads than a test can start
#: (the inter-op pool is measured only where the intra-op value lets a session be made).
_ROUNDS = (
    ("+3", "1x", " 2", "+3", "abc", " 3", " false", "1x", "1"),
    ("3", "2,3", "0", "0", "0", "+3", "banana", " 1", " 3"),
    ("", "", "1x", "", "", "0", "False ", "abc", "2"),
    ("2147483648", "99999999999", "abc", "4294967297", "007", "99999999999999999999", "", "", "0"),
    ("\u0663", "-1", "-1", "3 ", "-1", "1x", "0", "+1", "1"),
)


def _run(env: dict[str, str]) -> dict[str, list]:
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=clean_env(**env), capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    did: dict[str, list] = json.loads(proc.stdout.strip().splitlines()[-1])
    if "Invalid value for ARROW_IO_THREADS" in proc.stderr:
        did["ARROW_IO_THREADS"][0] = "warns"
    return did


_READER = {"ARROW_IO_THREADS": "pyarrow", "OMP_NUM_THREADS": "pyarrow", "POLARS_MAX_THREADS": "polars",
           "OPENCV_FOR_THREADS_NUM": "opencv", "ORT_INTRA_OP_NUM_THREADS": "onnxruntime",
           "RAYON_NUM_THREADS": "tokenizers", "ORT_INTER_OP_NUM_THREADS": "onnxruntime"}


@pytest.mark.pools("pyarrow", "polars", "onnxruntime", "tokenizers", "cv2")
def test_what_each_library_does_with_a_value_is_what_parinfo_says():
    base = _run({})
    for values in _ROUNDS:
        env = dict(zip(_VARS, values, strict=True))
        did = _run(env)
        pooled = reg.library("tokenizers").reading("TOKENIZERS_PARALLELISM", env["TOKENIZERS_PARALLELISM"])
        assert pooled is not None and pooled.does is Does.TAKES
        limit = reg.library("pyarrow").reading("OMP_THREAD_LIMIT", env["OMP_THREAD_LIMIT"])
        assert limit is not None and limit.does in (Does.TAKES, Does.IGNORES)
        for var, reader in _READER.items():
            said = reg.library(reader).reading(var, env[var])
            assert said is not None, (var, env[var])
            if var == "ORT_INTER_OP_NUM_THREADS" and var not in did:
                continue  # no session could be made: its intra-op value raised
            if var == "RAYON_NUM_THREADS" and "false" in pooled.words:
                assert did[var] == ["takes", 0], env  # batches ran in the calling thread
                continue
            default = base[var][1]
            if var == "POLARS_MAX_THREADS" and said.does is Does.DEFAULT:  # rayon's: RAYON_NUM_THREADS first
                default = reg.library("tokenizers").count_in("RAYON_NUM_THREADS", env) or default
            want = {Does.TAKES: ["takes", said.count], Does.DEFAULT: ["takes", default],
                    Does.IGNORES: ["takes", base[var][1]], Does.WARNS: ["warns", base[var][1]],
                    Does.RAISES: ["raises", None]}[said.does]
            if var == "OMP_NUM_THREADS" and limit.count is not None:  # Arrow caps its CPU pool at the limit
                want[1] = min(want[1], limit.count)
            assert did[var] == want, (var, env[var], said)


def test_omp_thread_limit_is_read_by_every_openmp_runtime_and_arrow():
    row = _row("OMP_THREAD_LIMIT", "1x")
    assert {"libgomp", "libiomp", "libomp", "pyarrow"} <= set(row.readers)
    # libgomp: "Invalid value for environment variable OMP_THREAD_LIMIT" and no limit (measured); Arrow takes 1
    assert row.valid is False
    assert "libgomp prints a warning" in str(row.problem) and "pyarrow takes 1" in str(row.problem)
    assert _row("OMP_THREAD_LIMIT", "2").valid is True


def test_a_generic_name_is_judged_only_while_a_library_that_reads_it_is_loaded():
    env = {"NPROC": "abc"}
    assert not [r for r in environment_report(env, env, modules=(), python=(3, 14)) if r.name == "NPROC"]
    (row,) = [r for r in environment_report(env, env, modules=("jax",), python=(3, 14)) if r.name == "NPROC"]
    assert row.readers == ["jax"] and row.valid is False
