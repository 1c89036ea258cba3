"""The one module that sets counts (parinfo/process/setter.py): it reaches what its Outcome says,
checked against threadpoolctl and torch's getters in real processes, and no other module sets one."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HAVE_NUMPY, HAVE_TORCH, run_json

PACKAGE = Path(__file__).resolve().parent.parent / "parinfo"

needs_numpy = pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")

# Calls that change a library's count (the record's push_count/push_interop among them: the
# registry says how, the setter module asks it); only the setter module may make them.
SETTING_CALLS = {"set_num_threads", "set_num_interop_threads", "threadpool_limits", "limit",
                 "omp_set_num_threads", "_real_set_num_threads", "push_count", "push_interop"}


def test_no_module_but_the_setter_sets_a_library_count():
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "process/setter.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            # parinfo's own runtime setters are called by name (its count, not a library's)
            if (isinstance(func, ast.Attribute) and name in SETTING_CALLS) or name == "threadpool_limits":
                found.append(f"{rel}:{node.lineno} {name}")
    assert found == []


@needs_numpy
def test_set_counts_reaches_every_pool_and_restore_gives_them_back():
    out = run_json(
        "import json, numpy, threadpoolctl\n"
        "from parinfo.process import setter\n"
        "before = [p['num_threads'] for p in threadpoolctl.threadpool_info()]\n"
        "done = setter.set_counts(1)\n"
        "during = [p['num_threads'] for p in threadpoolctl.threadpool_info()]\n"
        "setter.restore(done)\n"
        "after = [p['num_threads'] for p in threadpoolctl.threadpool_info()]\n"
        "print(json.dumps({'before': before, 'during': during, 'after': after,\n"
        "  'done': [[o.library, o.asked, o.now, o.before, o.reached] for o in done]}))")
    assert out["during"] and set(out["during"]) == {1}
    assert out["after"] == out["before"]
    assert all(reached and now == 1 for _, _, now, _, reached in out["done"])
    assert {lib for lib, *_ in out["done"]} >= {"openblas"}


@needs_numpy
def test_thread_scope_sets_only_per_thread_limits():
    pytest.importorskip("sklearn")
    out = run_json(
        "import json, threading, numpy, sklearn.utils._openmp_helpers, threadpoolctl\n"
        "from parinfo.process import setter\n"
        "def counts():\n"
        "    return {p['internal_api']: p['num_threads'] for p in threadpoolctl.threadpool_info()}\n"
        "before = counts()\n"
        "done = setter.set_counts({'openmp': 1, 'blas': 1}, per_thread_only=True)\n"
        "seen = []\n"
        "t = threading.Thread(target=lambda: seen.append(counts())); t.start(); t.join()\n"
        "print(json.dumps({'done': [[o.library, o.scope, o.now] for o in done], 'before': before,\n"
        "  'here': counts(), 'other': seen[0]}))")
    assert out["done"] and all(lib == "libgomp" and scope == "thread" and now == 1
                               for lib, scope, now in out["done"])
    assert out["here"]["openmp"] == 1
    assert out["here"]["openblas"] == out["before"]["openblas"]  # process-wide: not touched
    assert out["other"]["openmp"] == out["before"]["openmp"]  # another thread keeps its own limit


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_torch_outcomes_match_torch_getters_and_a_refusal_is_named():
    out = run_json(
        "import json, torch\n"
        "from parinfo.process import setter\n"
        "a = setter.set_torch(intra=1, inter=1)\n"
        "b = setter.set_torch(inter=2)\n"
        "print(json.dumps({'a': [[o.target, o.now, o.error] for o in a], 'b': [[o.now, o.error] for o in b],\n"
        "  'torch': [torch.get_num_threads(), torch.get_num_interop_threads()]}))")
    assert out["a"] == [["inter-op", 1, ""], ["intra-op", 1, ""]]
    assert out["torch"] == [1, 1]
    now, error = out["b"][0]
    assert now == 1 and "cannot set number of interop threads" in error


def test_the_hook_loads_the_setter_without_parinfo_on_the_path(tmp_path):
    """The start-up hook runs in interpreters that may not have parinfo: the setter module loads
    by path with the standard library alone."""
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('_s', {str(PACKAGE / 'process' / 'setter.py')!r})\n"
            "m = importlib.util.module_from_spec(spec); sys.modules['_s'] = m; spec.loader.exec_module(m)\n"
            "assert 'parinfo' not in sys.modules, sorted(k for k in sys.modules if 'parinfo' in k)\n"
            "print(m.Outcome('x', 't', 2, 2, 1, 'process').reached)")
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


@needs_numpy
def test_apply_sets_each_pool_once():
    out = run_json(
        "import collections, json, numpy, parinfo, threadpoolctl\n"
        "from parinfo.process.setter import NativePool\n"
        "calls = collections.Counter()\n"
        "real_set, real_checked = NativePool.set, NativePool.set_checked\n"
        "def counted(name, real):\n"
        "    def call(self, n):\n"
        "        calls[self.path] += 1\n"
        "        return real(self, n)\n"
        "    return call\n"
        "NativePool.set, NativePool.set_checked = counted('set', real_set), counted('checked', real_checked)\n"
        "r = parinfo.apply({'version': 1, 'name': 'one', 'intra_op': 1, 'libraries': {'blas': 1}}).lines()\n"
        "print(json.dumps({'calls': list(calls.values()), 'bad': r['not_in_force'],\n"
        "  'blas': [p['num_threads'] for p in threadpoolctl.threadpool_info() if p['user_api'] == 'blas']}))")
    assert out["calls"] and set(out["calls"]) == {1}
    assert out["blas"] and set(out["blas"]) == {1} and out["bad"] == []


@needs_numpy
def test_each_openmp_runtime_gets_its_own_record():
    """libgomp, libiomp and libomp share threadpoolctl's internal_api: the file decides the record
    (only libgomp's frees a thread's team; LLVM/Intel OpenMP's pause acts on the whole process)."""
    pytest.importorskip("sklearn")
    out = run_json(
        "import ctypes, glob, json, numpy, sklearn.utils._openmp_helpers\n"
        "for path in sorted(glob.glob('/usr/lib/llvm-*/lib/libomp.so*'))[-1:]:\n"
        "    ctypes.CDLL(path)  # LLVM libomp beside libgomp, where the machine has it\n"
        "from parinfo.process import setter\n"
        "print(json.dumps([[p.record.name, p.path, bool(p.record.team_release)] for p in setter.native_pools()]))")
    assert "libgomp" in [name for name, _, _ in out]
    for name, path, frees in out:
        base = path.rsplit("/", 1)[-1]
        assert base.startswith(name if name != "openblas" else ("libopenblas", "libscipy_openblas")), (name, path)
        assert frees == (name == "libgomp")


def test_threads_importing_threadpoolctl_at_once_all_get_the_whole_module():
    # pool workers reach the first native view together: none may see threadpoolctl half imported
    from conftest import run_json

    runs = [run_json(_IMPORT_AT_ONCE) for _ in range(10)]  # a race: several fresh processes
    assert [d["errors"] for d in runs] == [[]] * 10
    assert all(len(d["got"]) == 8 and min(d["got"]) >= 1 for d in runs)


_IMPORT_AT_ONCE = """
import json, sys, threading
import numpy
from parinfo.process.setter import import_threadpoolctl
sys.setswitchinterval(1e-6)  # hand the GIL over often, so that one import overlaps the others
start, errors, got = threading.Barrier(8), [], []
def first_view():
    start.wait()
    try:
        got.append(len(import_threadpoolctl().ThreadpoolController().info()))
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=first_view) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"errors": errors, "got": got}))
"""
