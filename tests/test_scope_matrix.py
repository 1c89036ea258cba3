"""Which threads a limit reaches, per threading layer, in real processes: the registry's scope facts
(``Library.scopes``, :func:`parinfo.process.library_parts.predicted_count`) against what each
thread reads in its own thread (:mod:`parinfo.process.scope_probe`).

One subprocess per layer runs every case of that layer: a limit set in the main thread and in a
worker (through parinfo's setter, which is the call the first facts describe, and through a
library's other calls: MKL's global one, OpenBLAS's ``_local`` one), and ``threadpool_limits`` in
the main thread. For each case the probe reads the pool in the main thread, a worker running since
before, the worker that set it, and a worker started after; every cell must be the count the facts
predict. The limit is 1, or 3 where the default is 1 (BLIS), so a cell the limit reached shows.
A layer whose runtime is absent skips with what to install.
"""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field

import openmp_pair
import pytest
from conftest import clean_env, run_py

from parinfo.process import libraries as reg
from parinfo.process.library_parts import SetIn, ThreadKind, predicted_count

pytestmark = pytest.mark.once  # real servers, processes or cgroups: .ci/run runs these on its first Python only

#: Runs in the subprocess: the layer's set-up, then each case through the probe. A case's limit
#: and restore are Python lines with ``n`` (the limit), ``d`` (the main thread's count before),
#: ``POOL`` (parinfo's setter for a native pool) and what the set-up defined in scope.
SCRIPT = r"""
import ctypes, json, os, sys
import threadpoolctl
import parinfo
from parinfo.process import scope_probe as sp, setter
from parinfo.process.library_parts import SetIn
PLAN = json.loads(sys.argv[1])

def report_cells(reader):  # what the per-thread report says of the pool in each thread: [count, exact, why]
    def observe(ids):
        teams = parinfo.inspect().teams
        out = {}
        for kind, tid in ids.items():
            thread = next((t for t in (teams.threads if teams else []) if t.native_id == tid), None)
            cell = None if thread is None else next((c for c in thread.cells if (
                c.pool == reader.family or c.pool == reader.family + " intra-op")
                and (reader.key == reader.family or os.path.basename(c.filepath or "") in reader.key)), None)
            out[kind] = None if cell is None else [cell.count, cell.exact, str(cell.why)]
        return out
    return observe

exec(PLAN["setup"])
pools = sp.readers()
native = {f"{p.record.name}:{os.path.basename(p.path)}": p for p in setter.native_pools()}
runs = []
for case in PLAN["cases"]:
    reader = next(r for r in pools if r.family == case["family"] and case["file"] in r.key)
    d = reader.read()
    names = dict(globals(), n=1 if d != 1 else 3, d=d, POOL=native.get(reader.key), KEPT=[])
    if case["guard"] and not eval(case["guard"], names):
        continue
    run = sp.measure(eval("lambda: " + case["limit"], names), SetIn(case["set_in"]), pools, report_cells(reader))
    exec(case["restore"], names)
    runs.append(dict(run.to_data(), case=case["name"], family=reader.family, key=reader.key, layer=reader.layer,
                     n=names["n"]))
print(json.dumps(runs))
"""


@dataclass(frozen=True)
class Case:
    """One way to set a limit: ``call`` names the facts that predict it ("": the call parinfo's
    setter makes, the family's first facts); ``guard``: a Python test that it exists here;
    ``family``: the pool it checks when not its layer's."""

    name: str
    set_in: SetIn
    limit: str
    restore: str
    call: str = ""
    guard: str = ""
    family: str = ""


def _both(name: str, limit: str, restore: str, call: str = "", guard: str = "") -> list[Case]:
    return [Case(f"{name} in {where}", where, limit, restore, call, guard) for where in SetIn]


SETTER = _both("parinfo's setter", "POOL.set(n)", "POOL.set(d)")
THREADPOOLCTL = [Case("threadpool_limits in main", SetIn.MAIN, "KEPT.append(threadpoolctl.threadpool_limits(n))",
                      "KEPT.pop().restore_original_limits()")]
#: parinfo's API in a worker: what an executor's initializer does (the per-thread report sees it).
INITIALIZER = Case("parinfo.worker_initializer in worker", SetIn.WORKER, "parinfo.worker_initializer(n)()",
                   "POOL.set(d)")
NATIVE = [*SETTER, *THREADPOOLCTL, INITIALIZER]


@dataclass(frozen=True)
class Layer:
    """A threading layer: ``setup`` loads it; the pool checked is ``family``'s whose probe key
    holds ``file``; ``missing`` says why it cannot run here ("" : it can)."""

    name: str
    setup: str
    family: str
    missing: str
    cases: list[Case]
    file: str = ""
    env: dict[str, str] = field(default_factory=dict)


def _first(pattern: str) -> str:
    return next(iter(sorted(glob.glob(pattern))), "")


def _module(name: str) -> str:
    return "" if importlib.util.find_spec(name) else f"{name} is not installed"


def _mkl_rt() -> str:
    """An MKL runtime (libmkl_rt.so.*): PARINFO_TEST_MKL, or one that `pip install mkl` put here."""
    return os.environ.get("PARINFO_TEST_MKL") or _first(os.path.join(sys.prefix, "lib", "libmkl_rt.so.*"))


def _load(path: str | None, name: str = "lib") -> str:
    return f"{name} = ctypes.CDLL({path!r}, ctypes.RTLD_GLOBAL)\n"


def _layers() -> list[Layer]:
    gomp = _first("/usr/lib/*/libgomp.so.1")
    omp, iomp, mkl = openmp_pair.libomp(), openmp_pair.libiomp(), _mkl_rt()
    ob_omp = _first("/usr/lib/*/openblas-openmp/libopenblas.so.0")
    blis = {layer: _first(f"/usr/lib/*/blis-{layer}/libblis.so.4") for layer in ("pthread", "openmp")}
    local = "openblas_set_num_threads_local"
    mkl_global = _both("MKL_Set_Num_Threads", "lib.MKL_Set_Num_Threads(n)", "lib.MKL_Set_Num_Threads(d)",
                       "MKL_Set_Num_Threads")
    module_cases = {name: [*_both(f"{name}.set_num_threads", f"{name}.set_num_threads(n)",
                                  f"{name}.set_num_threads(d)"),
                           Case(INITIALIZER.name, SetIn.WORKER, INITIALIZER.limit, f"{name}.set_num_threads(d)")]
                    for name in ("torch", "numexpr", "numba")}
    return [
        Layer("libgomp (scikit-learn's wheel)", "import sklearn.utils._openmp_helpers\n", "libgomp",
              _module("sklearn"), NATIVE, file="libgomp-"),
        Layer("libgomp (Debian libgomp1)", _load(gomp), "libgomp", "" if gomp else "apt-get install libgomp1",
              NATIVE),
        Layer("LLVM libomp (Debian libomp5)", _load(omp), "libomp", "" if omp else "apt-get install libomp-dev",
              NATIVE),
        Layer("Intel libiomp5 (intel-openmp)", _load(iomp), "libiomp", "" if iomp else "pip install intel-openmp",
              NATIVE),
        Layer("OpenBLAS pthreads (numpy's wheel)", "import numpy\n", "openblas", _module("numpy"),
              [*NATIVE, *_both(local, f"getattr(POOL.controller.dynlib, {local!r})(n)", "POOL.set(d)", local,
                               f"hasattr(POOL.controller.dynlib, {local!r})")]),
        Layer("OpenBLAS openmp (Debian libopenblas0-openmp)", _load(ob_omp), "openblas",
              "" if ob_omp else "apt-get install libopenblas0-openmp", NATIVE),
        *(Layer(f"BLIS {layer} (Debian libblis4-{layer})", _load(path), "blis",
                "" if path else f"apt-get install libblis4-{layer}", NATIVE) for layer, path in blis.items()),
        Layer("MKL (mkl wheel, intel threading)", _load(iomp, "iomp") + _load(mkl), "mkl",
              "" if mkl and iomp else "pip install mkl intel-openmp (or PARINFO_TEST_MKL=libmkl_rt.so)",
              [*mkl_global, *NATIVE], env={"LD_LIBRARY_PATH": os.path.dirname(mkl)}),
        Layer("torch intra-op", "import torch\n", "torch", _module("torch"),
              # under threadpool_limits, torch's count is its OpenMP runtime's in each thread
              [*module_cases["torch"], *(Case(c.name, c.set_in, c.limit, c.restore, family="libgomp")
                                         for c in THREADPOOLCTL)]),
        Layer("numexpr", "import numexpr\n", "numexpr", _module("numexpr"), module_cases["numexpr"]),
        Layer("numba", "import numba\n", "numba", _module("numba"), module_cases["numba"]),
    ]


LAYERS = _layers()


def _run(layer: Layer) -> list[dict]:
    plan = {"setup": layer.setup, "cases": [
        {"name": c.name, "set_in": c.set_in.value, "limit": c.limit, "restore": c.restore, "guard": c.guard,
         "family": c.family or layer.family, "file": "" if c.family else layer.file} for c in layer.cases]}
    code = f"import sys; sys.argv[1:] = [{json.dumps(plan)!r}]\n" + SCRIPT
    proc = run_py(code, env=clean_env(**layer.env), timeout=180)
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def _mismatches(layer: Layer, run: dict) -> list[str]:
    """The cells of one case whose count is not what the facts predict."""
    case = next(c for c in layer.cases if c.name == run["case"])
    family = run["family"]
    facts = reg.library(family).scope_facts(run["layer"], case.call)
    assert facts is not None, f"{family} has no scope facts for layer {run['layer']!r}, call {case.call!r}"
    key, n, wrong = run["key"], run["n"], []
    for kind, counts in run["after"].items():
        before = run["before"][kind][key]
        want = predicted_count(facts, case.set_in, ThreadKind(kind), n, before)
        if counts[key] != want:
            wrong.append(f"{layer.name}, {case.name}: {kind} thread reads {counts[key]}, facts predict {want}")
    return wrong


def _report_mismatches(layer: Layer, run: dict) -> list[str]:
    """The cells where the per-thread report (made in the main thread while every thread lived)
    says other than what that thread read. A cell marked exact must be the count read there; a
    predicted one too, except where a worker set a limit by a call the report cannot see from
    another thread (a library's own call, threadpoolctl, parinfo's low-level setter: every worker
    case but parinfo's initializer); a cell it cannot read (torch after torch.set_num_threads, MKL
    once this thread's count was set at run time) must say unknown."""
    key, wrong = run["key"], []
    unseen = run["set_in"] == SetIn.WORKER.value and run["case"] != INITIALIZER.name
    for kind, counts in run["after"].items():
        cell = run["observed"].get(kind)
        where = f"{layer.name}, {run['case']}: {kind} thread"
        if cell is None:
            wrong.append(f"{where}: no cell in the report")
            continue
        count, exact, why = cell
        if count is None:
            if layer.family not in ("torch", "mkl") or why != "unknown":
                wrong.append(f"{where}: unknown ({why}) where the report should know")
        elif count != counts[key] and (exact or not unseen):
            wrong.append(f"{where} reads {counts[key]}, the report says {count} ({why}, exact: {exact})")
    return wrong


PARAMS = [pytest.param(layer, id=layer.name, marks=[pytest.mark.torch] if layer.family == "torch" else [])
          for layer in LAYERS]


@pytest.mark.parametrize("layer", PARAMS)
def test_each_thread_gets_the_count_the_scope_facts_predict(layer: Layer) -> None:
    if layer.missing:
        pytest.skip(f"{layer.name} is not here: {layer.missing}")
    runs = _run(layer)
    assert {r["case"] for r in runs} >= {c.name for c in layer.cases if not c.guard}
    wrong = [line for run in runs for line in _mismatches(layer, run)]
    assert not wrong, "\n".join(wrong)
    wrong = [line for run in runs for line in _report_mismatches(layer, run)]
    assert not wrong, "\n".join(wrong)
    for run in runs:  # the limit shows in the thread that set it, so a cell it reached is seen
        setter, key = "setter" if run["set_in"] == "worker" else "main", run["key"]
        assert run["after"][setter][key] == run["n"] != run["before"][setter][key], run["case"]


@pytest.mark.skipif(bool(_module("sklearn") or _module("numpy")), reason="needs numpy and scikit-learn")
def test_an_executors_workers_read_what_the_facts_predict_under_threadpool_limits_in_main() -> None:
    """The issue's case: threadpool_limits(1) in the main thread, then a ThreadPoolExecutor(2): each
    worker keeps its OpenMP default (libgomp: per thread) and gets OpenBLAS's 1 (one pool)."""
    proc = run_py("""
import json
from concurrent.futures import ThreadPoolExecutor
import numpy, sklearn.utils._openmp_helpers, threadpoolctl
from parinfo.process import scope_probe as sp
pools = sp.readers()
default = sp.read_here(pools)
kept = threadpoolctl.threadpool_limits(1)
with ThreadPoolExecutor(2) as ex:
    workers = sp.read_in_workers(ex, 2, pools)
print(json.dumps({"default": default, "workers": workers, "layers": {r.key: [r.family, r.layer] for r in pools}}))
""", env=clean_env())
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(out["workers"]) == 2
    for key, (family, layer) in out["layers"].items():
        facts = reg.library(family).scope_facts(layer)
        assert facts is not None, key
        want = predicted_count(facts, SetIn.MAIN, ThreadKind.NEW, 1, out["default"][key])
        got = {name: counts[key] for name, counts in out["workers"].items()}
        assert got == dict.fromkeys(out["workers"], want), key
    assert {"libgomp", "openblas"} <= {family for family, _ in out["layers"].values()}


def tally() -> dict[str, int]:
    """How the per-thread report's cells compare with each thread's own reading, over every layer
    here: ``python tests/test_scope_matrix.py`` prints it (the figures a closing note quotes)."""
    counts = {"layers": 0, "cases": 0, "cells": 0, "exact, equal": 0, "predicted, equal": 0, "unknown, with why": 0,
              "predicted, differs (the worker set its own limit by a call the report cannot see)": 0}
    for layer in LAYERS:
        if layer.missing:
            print(f"{layer.name}: skipped ({layer.missing})")
            continue
        runs = _run(layer)
        assert not [line for run in runs for line in _report_mismatches(layer, run)], layer.name
        counts["layers"] += 1
        counts["cases"] += len(runs)
        for run in runs:
            for kind, read in run["after"].items():
                count, exact, _ = run["observed"][kind]
                key = ("unknown, with why" if count is None else
                       ("exact, equal" if exact else "predicted, equal") if count == read[run["key"]] else
                       "predicted, differs (the worker set its own limit by a call the report cannot see)")
                counts[key] += 1
                counts["cells"] += 1
    return counts


if __name__ == "__main__":
    for name, n in tally().items():
        print(f"{name}: {n}")
