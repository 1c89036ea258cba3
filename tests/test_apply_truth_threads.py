"""parinfo.apply() and limits that hold per thread: what it reports equals what each thread runs.

OpenMP keeps its count per calling thread. Ground truth is omp_get_max_threads() called through
ctypes in each thread (the caller, the main thread, a thread started afterwards), and
torch.get_num_threads() in each thread; every case runs in a fresh subprocess.
"""
from __future__ import annotations

import importlib.util
import os
import textwrap

import pytest
from conftest import HAVE_NUMPY, clean_env, run_json

HAVE_SKLEARN = importlib.util.find_spec("sklearn") is not None
needs_gomp = pytest.mark.skipif(not (HAVE_NUMPY and HAVE_SKLEARN), reason="needs scikit-learn (its libgomp)")
needs_two = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")

# A Dask worker plugin's set-up runs in the event-loop thread, not in the threads that run tasks.
LOOP = """
import ctypes, json, threading
import sklearn.ensemble  # loads scikit-learn's libgomp
from threadpoolctl import threadpool_info
import parinfo

gomp = [p["filepath"] for p in threadpool_info() if p["internal_api"] == "openmp"]
omp = ctypes.CDLL(gomp[0])
truth, result = {}, {}

def in_thread(name, fn):
    t = threading.Thread(target=fn, name=name); t.start(); t.join()

def loop():
    result.update(parinfo.apply("single-thread").lines())
    truth["caller"] = omp.omp_get_max_threads()

in_thread("event-loop", loop)
truth["main"] = omp.omp_get_max_threads()
in_thread("task-0", lambda: truth.update(later=omp.omp_get_max_threads()))
print(json.dumps({"truth": truth, "r": {k: result[k] for k in ("applied", "not_in_force", "threads")}}))
"""


def _run(code: str, **env: str) -> dict:
    return run_json(textwrap.dedent(code), env=clean_env(**env), timeout=120)


@needs_gomp
@needs_two
def test_openmp_limit_set_from_another_thread_is_reported_for_that_thread_only():
    out = _run(LOOP)
    truth, r = out["truth"], out["r"]
    assert truth["caller"] == 1
    assert truth["main"] > 1 and truth["later"] > 1  # ground truth: the limit reached no other thread
    gomp_applied = [a for a in r["applied"] if a.startswith("openmp pool")]
    assert gomp_applied and all(a.endswith("limited to 1 in this thread") for a in gomp_applied)
    gaps = [g for g in r["not_in_force"] if g.startswith("openmp pool")]
    assert len(gaps) == 1
    gap = gaps[0]
    assert "is limited to 1 in this thread (event-loop, tid " in gap
    assert f"threads started from now on run {truth['later']}" in gap
    assert "MainThread" in gap and f"({truth['main']} unless they set one)" in gap
    assert "initializer=parinfo.worker_initializer(1)" in gap and "threads: every" in gap
    assert "parinfo apply PROFILE -- COMMAND" in gap
    assert any(t.startswith("openmp pool") and "only (OpenMP limits are per thread)" in t for t in r["threads"])


@needs_gomp
def test_when_every_thread_starts_at_the_profiles_count_nothing_is_missing():
    out = _run(LOOP, OMP_NUM_THREADS="1")
    assert out["truth"] == {"caller": 1, "main": 1, "later": 1}
    assert out["r"]["not_in_force"] == []
    assert any("threads started from now on start at 1" in t for t in out["r"]["threads"])


@needs_gomp
@needs_two
def test_the_pool_threads_of_parinfo_are_reached_and_named():
    out = _run("""
        import json
        import sklearn.ensemble
        import parinfo
        parinfo.set_num_interop_threads(1)
        parinfo.wait(parinfo.fork(lambda: 1))  # starts parinfo's inter-op pool
        import threading
        r = parinfo.apply("single-thread").lines()
        names = [t.name for t in threading.enumerate()]
        print(json.dumps({"names": names, "gaps": r["not_in_force"]}))
    """)
    ours = [n for n in out["names"] if n.startswith("parinfo-")]
    assert ours
    gaps = [g for g in out["gaps"] if g.startswith("openmp pool")]
    assert len(gaps) == 1
    assert f"parinfo's own pool threads ({', '.join(ours)}), each set in its own thread" in gaps[0]
    assert "were busy" not in gaps[0] and "not reached" not in gaps[0]


@pytest.mark.torch
@needs_two
def test_torch_count_reaches_new_threads_but_not_one_that_already_ran_an_op():
    out = _run("""
        import json, threading, torch, parinfo
        ready, go, done, truth = threading.Event(), threading.Event(), threading.Event(), {}
        def early():
            torch.ones(1 << 20) + 1  # an op torch splits with its intra-op count
            ready.set(); go.wait(); truth["early"] = torch.get_num_threads(); done.set()
        t = threading.Thread(target=early, name="early-worker"); t.start()
        ready.wait()
        r = parinfo.apply("single-thread").lines()
        go.set(); done.wait(); t.join()
        def late():
            torch.ones(1 << 20) + 1; truth["late"] = torch.get_num_threads()
        t2 = threading.Thread(target=late); t2.start(); t2.join()
        truth["caller"] = torch.get_num_threads()
        print(json.dumps({"truth": truth, "threads": r["threads"], "gaps": r["not_in_force"]}))
    """)
    truth = out["truth"]
    assert truth["caller"] == 1 and truth["late"] == 1 and truth["early"] > 1
    line = [t for t in out["threads"] if t.startswith("torch intra-op 1:")]
    assert len(line) == 1
    assert "every thread at its first parallel torch op from now on" in line[0]
    assert "early-worker" in line[0] and "torch.set_num_threads(1)" in line[0]
    assert not any("libgomp.so" in g for g in out["gaps"])  # torch's own copy follows torch
