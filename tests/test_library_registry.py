"""The library registry (parinfo/process/libraries.py) is the one place that knows a library.

numba is the proof: it is one record there, and the report, the variable table and the provenance
pick it up without any other module naming it.
"""
from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest
from conftest import clean_env, run_json

from parinfo.process import libraries as reg
from parinfo.process.environment import environment_report
from parinfo.process.variables import THREAD_VARS, validate

PACKAGE = Path(__file__).resolve().parent.parent / "parinfo"
HAVE_NUMBA = importlib.util.find_spec("numba") is not None

SETTINGS = ("import json, os, sys, numba; from parinfo.process.provenance import library_settings; "
            "from parinfo.machine.topology import machine_facts; {before}"
            "rows = [r.to_dict() for r in library_settings([], None, os.environ, None, machine_facts()) "
            "if r.library == 'numba']; "
            "p = sys.modules['numba.np.ufunc.parallel']; "
            "print(json.dumps({{'rows': rows, 'launched': bool(p._is_initialized)}}))")

FAKE_NUMBA = """\
import os, sys, types
config = types.SimpleNamespace(NUMBA_DEFAULT_NUM_THREADS=6,
                               NUMBA_NUM_THREADS=int(os.environ.get('NUMBA_NUM_THREADS') or 6))
_mask = config.NUMBA_NUM_THREADS
parallel = types.ModuleType('numba.np.ufunc.parallel')
parallel._is_initialized = False
sys.modules['numba.np.ufunc.parallel'] = parallel
def get_num_threads():
    parallel._is_initialized = True   # the real one launches the threading layer
    return _mask
def set_num_threads(n):
    global _mask
    parallel._is_initialized = True
    _mask = n
"""


def _library_facts() -> set[str]:
    """Every variable and file name prefix the registry knows."""
    facts = set(THREAD_VARS)
    for rec in reg.records():
        facts |= set(rec.variables) | set(rec.count_vars) | set(rec.prefixes) | set(rec.not_prefixes)
        facts |= set(rec.static_prefixes) | {f for f, _ in rec.layer_files} | {f for f, _ in rec.linked_into}
        facts |= {var for _, var in rec.roles}
        facts |= set(rec.count_symbol.names) if rec.count_symbol else set()
    return facts


def _code_strings(path: Path) -> list[ast.Constant]:
    """The string constants of a module that are code, not docstrings (f-string parts included)."""
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [n for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_no_string_in_code_outside_the_registry_names_a_library_fact():
    facts = _library_facts()
    assert {"OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "KMP_DUPLICATE_LIB_OK", "libgomp", "libtorch_cpu",
            "libmkl_core", "PARINFO_BACKEND", "blas_cpu_number"} <= facts
    pattern = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(sorted(map(re.escape, facts), key=len, reverse=True)) + ")")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "process/libraries.py":
            continue
        for node in _code_strings(path):
            found += [f"{rel}:{node.lineno} {m.group(1)}" for m in pattern.finditer(node.value)
                      if (rel, m.group(1)) not in _BELOW_THE_REGISTRY]
    assert found == []


# Facts read below the registry's layer (machine/ cannot import process/): the registry takes them
# from there, so they are still written once.
_BELOW_THE_REGISTRY = {("machine/rounding.py", "PARINFO_QUOTA_ROUNDING")}


def test_the_scan_sees_a_fact_written_in_code(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text('"""Docs may say OMP_NUM_THREADS."""\nX = f"set {1} OMP_NUM_THREADS"\n')
    assert [n.value for n in _code_strings(planted)] == ["set ", " OMP_NUM_THREADS"]


def test_every_record_is_consistent():
    names = [r.name for r in reg.records()]
    assert len(names) == len(set(names))
    for rec in reg.records():
        assert set(rec.variables) <= set(THREAD_VARS), rec.name
        assert rec.scope in ("thread", "process") and rec.listed in ("always", "loaded")
        assert rec.profile_var is None or rec.profile_var in rec.count_vars or rec.name == "flexiblas"
        if rec.cap_vars:
            assert rec.cap is not None
    for var in THREAD_VARS.values():
        assert var.readers, f"{var.name} is read by no library"


def test_facts_from_the_records():
    assert reg.library("mkl").count_vars == ("MKL_NUM_THREADS", "OMP_NUM_THREADS")
    assert reg.library("parinfo").count_vars == ("PARINFO_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")
    assert reg.library("libgomp").scope == "thread" and reg.library("openblas").scope == "process"
    assert reg.by_prefix("libscipy_openblas64_-32a4b2a6.so").name == "openblas"
    assert reg.by_prefix("libtbbmalloc.so.2") is None and reg.by_prefix("libomptarget.so") is None
    assert THREAD_VARS["PYTHON_CPU_COUNT"].python == (3, 13)
    assert THREAD_VARS["OMP_NUM_THREADS"].readers[:4] == ("libgomp", "libiomp", "libomp", "torch")
    assert THREAD_VARS["MKL_NUM_THREADS"].readers == ("mkl", "torch")
    fields = dict(f.split("=", 1) for f in reg.hook_facts().split())
    assert fields["pool.openblas"].split(",")[-1] == "OMP_NUM_THREADS"


def test_numba_is_one_record_with_its_variables():
    rec = reg.library("numba")
    assert rec.module == "numba" and rec.count_vars == ("NUMBA_NUM_THREADS",)
    assert (rec.getter, rec.setter, rec.scope, rec.profile_key) == ("get_num_threads", "set_num_threads",
                                                                    "thread", None)
    assert {"tbb", "omp", "workqueue"} <= set(THREAD_VARS[rec.layer_var or ""].choices)
    assert validate("NUMBA_THREADING_LAYER", "omp") is None
    assert validate("NUMBA_THREADING_LAYER", "pthreads") is not None
    assert validate("NUMBA_NUM_THREADS", "0") is not None


def test_numba_variables_are_listed_only_when_set_or_numba_is_loaded():
    code = ("import json, sys; from parinfo.process.environment import environment_report; "
            "names = [r.name for r in environment_report({}, {})]; "
            "set_ = [r.name for r in environment_report({'NUMBA_NUM_THREADS': '2'}, {})]; "
            "print(json.dumps([names, set_, 'numba' in sys.modules]))")
    names, with_value, imported = run_json(code, env=clean_env())
    assert "NUMBA_NUM_THREADS" not in names and "NUMBA_NUM_THREADS" in with_value and not imported
    rows = {r.name: r.to_dict() for r in environment_report({"NUMBA_NUM_THREADS": "x"}, {})}
    assert rows["NUMBA_NUM_THREADS"]["readers"] == ["numba"] and rows["NUMBA_NUM_THREADS"]["valid"] is False


def test_numba_stand_in_is_read_without_launching_its_threads(tmp_path):
    (tmp_path / "numba.py").write_text(FAKE_NUMBA)
    rows = run_json(SETTINGS.format(before=""), env=clean_env(PYTHONPATH=str(tmp_path), NUMBA_NUM_THREADS="3"))
    assert rows["launched"] is False
    (row,) = rows["rows"]
    assert (row["count"], row["source"]["text"], row["precedence"]) == (3, "env NUMBA_NUM_THREADS=3",
                                                                        ["NUMBA_NUM_THREADS"])
    rows = run_json(SETTINGS.format(before="numba.set_num_threads(2); "), env=clean_env(PYTHONPATH=str(tmp_path)))
    (row,) = rows["rows"]
    assert row["count"] == 2 and row["source"]["text"] == "set at run time (numba.set_num_threads)"
    rows = run_json(SETTINGS.format(before=""), env=clean_env(PYTHONPATH=str(tmp_path)))
    assert rows["rows"][0]["source"]["text"].startswith("default: 6 (numba.config.NUMBA_DEFAULT_NUM_THREADS")


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed")
def test_real_numba_count_and_source_without_launching_its_threads():
    rows = run_json(SETTINGS.format(before=""), env=clean_env(NUMBA_NUM_THREADS="1"))
    assert rows["launched"] is False
    (row,) = rows["rows"]
    assert row["count"] == 1 and row["source"]["kind"] == "variable"
    assert row["source"]["text"] == "env NUMBA_NUM_THREADS=1"
    rows = run_json(SETTINGS.format(before="numba.set_num_threads(1); "), env=clean_env())
    (row,) = rows["rows"]
    assert rows["launched"] is True and row["count"] == 1
    assert row["source"]["kind"] in ("run-time call", "library default")  # default when this machine has one CPU
