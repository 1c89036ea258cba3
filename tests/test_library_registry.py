"""The library registry (parinfo/process/libraries.py and the modules it names) is the one place that knows a
library.

numba is the proof: it is one record there, and the report, the variable table and the provenance
pick it up without any other module naming it.
"""
from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from conftest import clean_env, run_json

from parinfo.process import libraries as reg
from parinfo.process.environment import environment_report
from parinfo.process.variables import THREAD_VARS, validate
from parinfo.records.convert import dump

PACKAGE = Path(__file__).resolve().parent.parent / "parinfo"
HAVE_NUMBA = importlib.util.find_spec("numba") is not None

SETTINGS = ("import json, os, sys, numba; from parinfo.records.convert import dump; "
            "from parinfo.process.provenance import library_settings; "
            "from parinfo.machine.topology import machine_facts; {before}"
            "rows = [dump(r) for r in library_settings([], None, os.environ, None, machine_facts()) "
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


# The registry's modules: the questions (libraries), the parts of a family, the base class, the
# families, the entries and the thread variables.
REGISTRY = {"process/libraries.py", "process/library_parts.py", "process/library_base.py",
            "process/library_runtimes.py", "process/library_blas.py", "process/library_modules.py",
            "process/library_entries.py", "process/thread_vars.py", "process/library_learners.py",
            "process/library_inference.py", "process/library_frames.py", "process/library_ml.py"}


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
        if rel in REGISTRY:
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


# A record's behaviour fields and the enums of their values: outside the registry, code asks the
# record (set_by_threadpoolctl, set_in_module, per_thread, per_thread_in, kind is LibraryKind.X...)
# instead of comparing these fields, or what scope_of answers, with words.
_BEHAVIOUR = {"push": reg.Push, "scope": reg.Scope, "scope_of": reg.Scope, "kind": reg.LibraryKind}


def _operand_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    return node.attr if isinstance(node, ast.Attribute) else None


def _operand_words(node: ast.expr) -> set[str]:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {n.value for n in items if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _behaviour_by_word(path: Path) -> list[str]:
    """``rec.push == "setter"``, ``lib.kind != "python"``, ``scope_of(x) == "thread"``,
    ``rec.scope in ("thread", ...)``: comparisons of a behaviour field with one of its words."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        words = set().union(*map(_operand_words, operands))
        for name in {_operand_name(o) for o in operands} & _BEHAVIOUR.keys():
            if words & {m.value for m in _BEHAVIOUR[name]}:
                found.append(f"{node.lineno} .{name}")
    return found


def test_no_code_outside_the_registry_dispatches_on_a_behaviour_word():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel not in REGISTRY:
            found += [f"{rel}:{hit}" for hit in _behaviour_by_word(path)]
    assert found == []


def test_the_behaviour_scan_sees_a_comparison_with_a_word(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text('a = rec.push == "threadpoolctl"\nb = "python" != lib.kind\n'
                       'c = r.scope_of(x) == "thread"\nd = r.scope in ("process", "x")\n'
                       'e = tok.kind == "op"\nf = rec.push is Push.SETTER\n')
    assert _behaviour_by_word(planted) == ["1 .push", "2 .kind", "3 .scope_of", "4 .scope"]


class _Module:
    """A stand-in for a Python-module library: a count, and a setter that refuses 0."""

    def __init__(self) -> None:
        self.n, self.inter = 3, 1

    def get_num_threads(self) -> int:
        return self.n

    def set_num_threads(self, n: int) -> None:
        if n < 1:
            raise ValueError("must be positive")
        self.n = n

    def get_num_interop_threads(self) -> int:
        return self.inter

    def set_num_interop_threads(self, n: int) -> None:
        self.inter = n


def test_a_record_sets_and_reads_its_module_as_it_says():
    module = _Module()
    numexpr, torch = reg.library("numexpr"), reg.library("torch")
    assert numexpr.read_count(module) == 3
    numexpr.push_count(module, 2)
    assert numexpr.read_count(module) == 2
    with pytest.raises(ValueError, match="positive"):  # a refusal reaches the setter module
        numexpr.push_count(module, 0)
    torch.push_interop(module, 4)
    assert (torch.read_count(module), torch.read_interop(module)) == (2, 4)
    assert (torch.set_call(), torch.interop_call(2)) == ("torch.set_num_threads", "torch.set_num_interop_threads(2)")
    module.get_num_threads = lambda: True  # not a count
    assert numexpr.read_count(module) is None
    with pytest.raises(TypeError):  # a native pool is set through threadpoolctl, not a module
        reg.library("openblas").push_count(module, 1)
    assert reg.library("openblas").read_count(module) is None


def test_numba_is_read_without_calling_its_getter(monkeypatch):
    monkeypatch.delitem(sys.modules, "numba.np.ufunc.parallel", raising=False)  # its threads not launched
    module = _Module()
    module.config = type("config", (), {"NUMBA_NUM_THREADS": 5})
    module.get_num_threads = lambda: pytest.fail("numba's getter launches its threads")
    assert reg.library("numba").read_count(module) == 5


def test_every_record_is_consistent():
    names = [r.name for r in reg.records()]
    assert len(names) == len(set(names))
    for rec in reg.records():
        assert set(rec.variables) <= set(THREAD_VARS), rec.name
        assert isinstance(rec.scope, reg.Scope) and rec.listed in ("always", "loaded")
        assert isinstance(rec.push, reg.Push) and isinstance(rec.kind, reg.LibraryKind)
        assert rec.profile_var is None or rec.profile_var in rec.count_vars or rec.name == "flexiblas"
        if rec.cap_vars:  # the variables that steer its cap: its family has one
            assert type(rec).cap is not reg.Library.cap, rec.name
        # a module that parinfo sets through its functions says which; no other record names any
        assert (rec.calls is not None) == (rec.push is reg.Push.SETTER) == rec.set_in_module, rec.name
        assert rec.interop_calls is None or rec.calls is not None, rec.name
        assert rec.set_along is None or reg.library(rec.set_along.framework).set_in_module, rec.name
    for var in THREAD_VARS.values():
        assert var.readers, f"{var.name} is read by no library"


def test_facts_from_the_records():
    assert reg.library("mkl").count_vars == ("MKL_NUM_THREADS", "OMP_NUM_THREADS")
    assert reg.library("parinfo").count_vars == ("PARINFO_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")
    assert reg.library("libgomp").per_thread and not reg.library("openblas").per_thread
    assert reg.library("openblas").per_thread_in("openmp") and not reg.library("openblas").per_thread_in("pthreads")
    assert reg.library("openblas").scope_of("pthreads") is reg.Scope.PROCESS
    assert reg.library("libgomp").scope_of(None) == "thread"  # the word an Outcome carries
    assert reg.library("openblas").set_by_threadpoolctl and not reg.library("tbb").set_by_threadpoolctl
    assert [r.name for r in reg.python_libraries()] == ["numexpr", "inductor", "numba", "xgboost", "lightgbm",
                                                        "pyarrow", "polars", "duckdb", "onnxruntime", "tokenizers",
                                                        "opencv", "tensorflow", "jax"]
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
    assert rec.calls is not None and (rec.calls.getter, rec.calls.setter) == ("get_num_threads", "set_num_threads")
    assert (rec.per_thread, rec.profile_key, rec.set_call(2)) == (True, "numba", "numba.set_num_threads(2)")
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
    rows = {r.name: dump(r) for r in environment_report({"NUMBA_NUM_THREADS": "x"}, {})}
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
