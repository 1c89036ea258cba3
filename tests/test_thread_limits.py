"""Limits that hold where the program's own threads call: parinfo.thread_limits, worker_initializer,
limit_new_threads and the profile key ``threads: every``.

Ground truth is read in each thread itself, in a fresh subprocess: omp_get_max_threads() of
scikit-learn's libgomp, OpenBLAS's count through threadpoolctl's controller (numpy's wheel:
pthreads, one shared pool), torch.get_num_threads() where torch is importable. Without parinfo a
ThreadPoolExecutor worker gets the machine's count (2 here); with it, 1.
"""
from __future__ import annotations

import importlib.util
import os
import textwrap

import pytest
from conftest import HAVE_NUMPY, clean_env, run_json

HAVE_SKLEARN = importlib.util.find_spec("sklearn") is not None
needs_libs = pytest.mark.skipif(not (HAVE_NUMPY and HAVE_SKLEARN), reason="needs numpy and scikit-learn (libgomp)")
needs_two = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")

HEAD = """
import json, threading
from concurrent.futures import ThreadPoolExecutor
import numpy, sklearn.utils  # numpy's OpenBLAS, scikit-learn's libgomp
from threadpoolctl import ThreadpoolController
import parinfo
TORCH = {torch}
if TORCH:
    import torch
CONTROLLER = ThreadpoolController()

def read():
    out = {{}}
    for lib in CONTROLLER.lib_controllers:
        if lib.internal_api in ("openmp", "openblas"):
            out.setdefault(lib.internal_api, set()).add(lib.get_num_threads())
    out = {{k: sorted(v) for k, v in out.items()}}
    if TORCH:
        out["torch"] = [torch.get_num_threads()]
    return out

def in_thread(fn):
    box = []
    t = threading.Thread(target=lambda: box.append(fn()))
    t.start(); t.join()
    return box[0]
"""


def _run(body: str, torch: bool = False) -> dict:
    code = textwrap.dedent(HEAD).format(torch=torch) + textwrap.dedent(body)
    return run_json(code, env=clean_env(), timeout=120)


def _all(reads: dict, n: int) -> bool:
    return bool(reads) and all(v == [n] for v in reads.values())


EXECUTOR = """
kw = {{"initializer": parinfo.worker_initializer(1)}} if {with_api} else {{}}
with ThreadPoolExecutor(2, **kw) as ex:
    workers = [ex.submit(read).result() for _ in range(4)]
print(json.dumps({{"workers": workers, "main": read()}}))
"""


@needs_libs
@needs_two
@pytest.mark.parametrize("torch", [False, pytest.param(True, marks=pytest.mark.torch)])
def test_executor_workers_get_the_limit_in_their_own_thread(torch):
    out = _run(EXECUTOR.format(with_api=True), torch)
    assert all(_all(w, 1) for w in out["workers"]), out
    assert {"openmp", "openblas"} <= set(out["workers"][0])
    # per-thread pools are untouched in the main thread; OpenBLAS-pthreads is one shared pool
    assert out["main"]["openmp"] == [2] and out["main"]["openblas"] == [1]


@needs_libs
@needs_two
@pytest.mark.parametrize("torch", [False, pytest.param(True, marks=pytest.mark.torch)])
def test_without_the_initializer_workers_keep_the_machine_count(torch):
    out = _run("import threadpoolctl; threadpoolctl.threadpool_limits(1)\n"
               + EXECUTOR.format(with_api=False), torch)
    worker = out["workers"][0]
    assert worker["openmp"] == [2] and worker["openblas"] == [1]  # the case: only OpenBLAS is shared
    if torch:
        assert worker["torch"] == [2]


@needs_libs
@needs_two
@pytest.mark.parametrize("torch", [False, pytest.param(True, marks=pytest.mark.torch)])
def test_context_manager_restores_the_counts_before(torch):
    out = _run("""
    before = read()
    with parinfo.thread_limits(1) as done:
        inside = read()
        with parinfo.thread_limits(1, user_api="openmp"):
            nested = read()
        after_nested = read()
    print(json.dumps({"before": before, "inside": inside, "nested": nested, "after_nested": after_nested,
                      "after": read(), "scopes": sorted({(o.library, o.scope) for o in done.limits}),
                      "shared": list(done.process_only)}))
    """, torch)
    assert _all(out["before"], 2) and _all(out["after"], 2)
    assert _all(out["inside"], 1) and _all(out["nested"], 1) and _all(out["after_nested"], 1)
    scopes = dict(map(tuple, out["scopes"]))
    assert scopes["libgomp"] == "thread" and scopes["openblas"] == "process" and scopes["parinfo"] == "thread"
    assert out["shared"] and all(name.startswith("openblas pool") for name in out["shared"])


@needs_libs
@needs_two
def test_decorator_limits_each_thread_that_calls_and_gives_shared_counts_back_after_the_last():
    out = _run("""
    gate = threading.Barrier(3)
    @parinfo.thread_limits(1)
    def work():
        gate.wait()  # all three inside at once
        seen = read()
        gate.wait()
        return seen
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(work())) for _ in range(3)]
    for t in threads: t.start()
    for t in threads: t.join()
    print(json.dumps({"seen": seen, "main": read(), "fresh": in_thread(read)}))
    """)
    assert len(out["seen"]) == 3 and all(_all(s, 1) for s in out["seen"])
    assert _all(out["main"], 2) and _all(out["fresh"], 2)  # the shared OpenBLAS count is back at 2


@needs_libs
@needs_two
@pytest.mark.parametrize("torch", [False, pytest.param(True, marks=pytest.mark.torch)])
def test_start_hook_reaches_a_plain_thread_and_is_undone(torch):
    out = _run("""
    import sys
    def other(frame, event, arg):  # a profiler's thread hook that must keep working
        calls.append(event)
    calls = []
    threading.setprofile(other)
    hook = parinfo.limit_new_threads(1)
    reached = in_thread(read)
    got = [t for t in parinfo.limited_threads() if t.how == "new thread"]
    active = hook.active
    hook.undo()
    print(json.dumps({"reached": reached, "after": in_thread(read), "main": read(), "active": active,
                      "logged": len(got), "profile_kept": threading.getprofile() is other,
                      "profiler_called": "call" in calls}))
    """, torch)
    assert _all(out["reached"], 1) and out["active"]
    assert out["logged"] == 0  # that thread has ended: the log keeps live threads only
    assert _all(out["after"], 2) and _all(out["main"], 2)
    assert out["profile_kept"] and out["profiler_called"]


@needs_libs
@needs_two
def test_joblib_threading_backend_workers_reached_through_new_threads():
    pytest.importorskip("joblib")
    out = _run("""
    from joblib import Parallel, delayed, parallel_config
    try:
        with parallel_config(backend="threading", inner_max_num_threads=1):
            Parallel(n_jobs=2)(delayed(read)() for _ in range(2))
        refused = False
    except AssertionError:
        refused = True  # joblib's threading backend takes no inner limit
    with parinfo.thread_limits(1, new_threads=True):
        inside = Parallel(n_jobs=2, backend="threading")(delayed(read)() for _ in range(4))
    after = Parallel(n_jobs=2, backend="threading")(delayed(read)() for _ in range(4))
    print(json.dumps({"refused": refused, "inside": inside, "after": after}))
    """)
    assert out["refused"]
    assert all(_all(r, 1) for r in out["inside"])
    assert all(_all(r, 2) for r in out["after"])


@needs_libs
@needs_two
def test_profile_key_threads_every_reaches_threads_started_after_apply():
    out = _run("""
    applied = parinfo.apply({"version": 1, "intra_op": 1, "threads": "every"})
    print(json.dumps({"worker": in_thread(read), "lines": applied.lines()["applied"]}))
    """)
    assert _all(out["worker"], 1)
    assert any("every thread started from now on" in line for line in out["lines"])


def test_bad_counts_and_names_are_refused():
    import parinfo

    with pytest.raises(ValueError):
        parinfo.thread_limits(0)
    with pytest.raises(TypeError):
        parinfo.worker_initializer(True)
    with pytest.raises(ValueError, match="user_api"):
        parinfo.thread_limits(1, user_api="nope")


def test_parinfo_regions_follow_the_thread_ceiling():
    out = run_json(textwrap.dedent("""
    import json, threading, time
    import parinfo
    parinfo.set_num_threads(2)
    def chunk(a, b, seen):
        seen.add(threading.get_ident())
        time.sleep(0.01)  # long enough that a second thread takes a chunk when it may
    def used():
        seen = set()
        parinfo.parallel_for(0, 8, 1, lambda a, b: chunk(a, b, seen))
        return len(seen)
    with parinfo.thread_limits(1, user_api="parinfo"):
        capped = used()
    print(json.dumps({"capped": capped, "free": max(used() for _ in range(20))}))
    """), env=clean_env(PARINFO_ADAPTIVE="0"), timeout=120)
    assert out["capped"] == 1 and out["free"] == 2


LAUNCHED = """
import json, threading
import numpy, sklearn.utils
TORCH = {torch}
if TORCH:
    import torch
    torch.set_num_threads(2)  # the program's own call: torch's default for threads started later too
from concurrent.futures import ThreadPoolExecutor
from threadpoolctl import ThreadpoolController
CONTROLLER = ThreadpoolController()

def read():
    omp = [lib for lib in CONTROLLER.lib_controllers if lib.internal_api == "openmp"]
    out = {{"openmp": sorted({{lib.get_num_threads() for lib in omp}})}}
    if TORCH:
        out["torch"] = [torch.get_num_threads()]
    import parinfo
    mine = [t for t in parinfo.limited_threads() if t.native_id == threading.get_native_id()]
    out["hooked"] = [t.how for t in mine]
    return out

with ThreadPoolExecutor(1) as ex:
    print(json.dumps(ex.submit(read).result()))
"""


@needs_libs
@pytest.mark.parametrize("torch", [False, pytest.param(True, marks=pytest.mark.torch)])
@pytest.mark.parametrize("threads", ["every", "caller"])
def test_launched_program_threads_get_the_profile_at_their_start(tmp_path, torch, threads):
    import json

    from conftest import run_cli

    profile = tmp_path / "p.yaml"
    profile.write_text(f"version: 1\nname: p\nintra_op: 1\nthreads: {threads}\n")
    program = tmp_path / "prog.py"
    program.write_text(textwrap.dedent(LAUNCHED).format(torch=torch))
    done = run_cli("apply", str(profile), "--", __import__("sys").executable, str(program), timeout=120)
    assert done.returncode == 0, done.stderr
    worker = json.loads(done.stdout.strip().splitlines()[-1])
    assert worker["openmp"] == [1]  # OMP_NUM_THREADS=1 from the profile: every thread starts at it
    assert worker["hooked"] == (["new thread"] if threads == "every" else [])
    if torch:
        assert worker["torch"] == ([1] if threads == "every" else [2])


MKL = """
import ctypes, json
ctypes.CDLL("libmkl_rt.so.2", mode=ctypes.RTLD_GLOBAL)
from concurrent.futures import ThreadPoolExecutor
from threadpoolctl import ThreadpoolController
import parinfo
MKL = [lib for lib in ThreadpoolController().lib_controllers if lib.internal_api == "mkl"][0]
out = {"main": MKL.get_num_threads()}
with ThreadPoolExecutor(1) as ex:
    out["without"] = ex.submit(MKL.get_num_threads).result()
with ThreadPoolExecutor(1, initializer=parinfo.worker_initializer(1)) as ex:
    out["with"] = ex.submit(MKL.get_num_threads).result()
with parinfo.thread_limits(1) as done:
    out["inside"] = MKL.get_num_threads()
    out["scope"] = [o.scope for o in done.limits if o.library == "mkl"]
    with ThreadPoolExecutor(1) as ex:
        out["other"] = ex.submit(MKL.get_num_threads).result()
out["after"] = MKL.get_num_threads()
print(json.dumps(out))
"""


@needs_two
@pytest.mark.skipif(not os.environ.get("PARINFO_TEST_MKL_LIBS"),
                    reason="set PARINFO_TEST_MKL_LIBS to the folders of libmkl_rt.so.2 and libiomp5.so (the mkl and "
                           "intel-openmp wheels' lib folders)")
def test_mkl_limit_is_set_through_its_local_call_in_that_thread_alone():
    env = clean_env(LD_LIBRARY_PATH=os.environ["PARINFO_TEST_MKL_LIBS"])
    out = run_json(textwrap.dedent(MKL), env=env, timeout=120)
    assert out["main"] == 2 and out["without"] == 2 and out["with"] == 1
    assert out["inside"] == 1 and out["scope"] == ["thread"] and out["other"] == 2 and out["after"] == 2
