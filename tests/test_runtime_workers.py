"""``on_every_worker``: a function run once on every worker of both pools, and first on workers
started later; per-thread OpenMP limits reach parinfo's pool threads (ground truth:
omp_get_max_threads() through ctypes, read in each pool thread)."""
from __future__ import annotations

import importlib.util
import textwrap

import pytest
from conftest import HAVE_NUMPY, clean_env, run_json

HAVE_SKLEARN = importlib.util.find_spec("sklearn") is not None
needs_gomp = pytest.mark.skipif(not (HAVE_NUMPY and HAVE_SKLEARN), reason="needs scikit-learn (its libgomp)")

START_POOLS = """
import json, threading, time
import parinfo
from parinfo.runtime import on_every_worker
parinfo.set_num_threads(3)
parinfo.set_num_interop_threads(INTER)
b = threading.Barrier(INTER + 1)
[parinfo.wait(f) for f in [parinfo.fork(b.wait) for _ in range(INTER)] + [b.wait() and None or parinfo.fork(int)]]
parinfo.parallel_for(0, 3, 1, lambda a, c: time.sleep(0.05))
workers = sorted(t.name for t in threading.enumerate() if t.name.startswith(("parinfo-intra-", "parinfo-interop-")))
"""


def _start(inter: int = 2) -> str:
    return textwrap.dedent(START_POOLS).replace("INTER", str(inter))


def _run(code: str, **env: str) -> dict:
    return run_json(_start() + textwrap.dedent(code), env=clean_env(**env), timeout=120)


def test_runs_once_on_every_live_worker_and_a_second_call_replaces_it():
    out = _run("""
        calls = []
        r1 = on_every_worker("k", lambda: calls.append(("a", threading.current_thread().name)))
        r2 = on_every_worker("k", lambda: calls.append(("b", threading.current_thread().name)))
        r3 = on_every_worker("other", lambda: calls.append(("c", threading.current_thread().name)))
        print(json.dumps({"workers": workers, "r": [r1, r2, r3], "calls": sorted(calls)}))
    """)
    w = out["workers"]
    assert len(w) == 4 and "parinfo-interop-1" in w
    for r in out["r"]:
        assert sorted(r["ran"]) == w and r["pending"] == []
    assert out["calls"] == sorted([[k, n] for k in "abc" for n in w])  # once each, none twice


def test_workers_started_later_run_the_stored_functions_first():
    out = _run("""
        ran, first = [], {}
        on_every_worker("mark", lambda: ran.append(threading.current_thread().name), timeout=5)
        parinfo.set_num_threads(4)  # the intra-op pool grows at the next region
        def chunk(a, c):
            me = threading.current_thread().name
            first.setdefault(me, me in ran)
            time.sleep(0.05)
        parinfo.parallel_for(0, 4, 1, chunk)
        print(json.dumps({"ran": ran, "first": first}))
    """)
    new = [n for n in out["first"] if n == "parinfo-intra-3"]
    assert new and out["first"]["parinfo-intra-3"] is True
    assert out["ran"].count("parinfo-intra-3") == 1


def test_a_busy_worker_is_pending_and_runs_it_before_its_next_job():
    out = _run("""
        go, ran = threading.Event(), []
        f = parinfo.fork(go.wait)
        time.sleep(0.2)
        r = on_every_worker("k", lambda: ran.append(threading.current_thread().name), timeout=0.5)
        go.set(); parinfo.wait(f)
        time.sleep(0.2)
        parinfo.wait(parinfo.fork(int))
        print(json.dumps({"r": r, "ran": sorted(ran), "workers": workers}))
    """)
    r = out["r"]
    assert len(r["pending"]) == 1 and r["pending"][0].startswith("parinfo-interop-")
    assert sorted(r["ran"] + r["pending"]) == out["workers"]
    assert out["ran"] == out["workers"]  # the busy one caught up after its task, once


def test_errors_are_reported_per_worker():
    out = _run("""
        r = on_every_worker("bad", lambda: 1 / 0)
        print(json.dumps({"r": r, "workers": workers}))
    """)
    assert sorted(out["r"]["errors"]) == out["workers"]
    assert all(v.startswith("ZeroDivisionError") for v in out["r"]["errors"].values())


def test_bad_arguments():
    from parinfo.runtime import on_every_worker

    with pytest.raises(TypeError):
        on_every_worker("", print)
    with pytest.raises(TypeError):
        on_every_worker("k", 3)
    with pytest.raises(ValueError):
        on_every_worker("k", print, timeout=-1)


READ_OMP = """
import ctypes
from threadpoolctl import threadpool_info
gomp = [p["filepath"] for p in threadpool_info() if p["internal_api"] == "openmp"]
omp = ctypes.CDLL(gomp[0])
def truth():
    got = {}
    on_every_worker("read", lambda: got.__setitem__(threading.current_thread().name, omp.omp_get_max_threads()))
    return got
"""


@needs_gomp
def test_set_num_threads_reaches_openmp_in_every_pool_thread():
    out = run_json("import sklearn.ensemble\n" + _start() + READ_OMP + textwrap.dedent("""
        def set_from_another_thread(n):
            t = threading.Thread(target=parinfo.set_num_threads, args=(n,)); t.start(); t.join()
        set_from_another_thread(3)
        before = truth()
        set_from_another_thread(1)
        after = truth()
        print(json.dumps({"before": before, "after": after, "workers": workers,
                          "push": parinfo.runtime.info()["native_push"]["workers"]}))
    """), env=clean_env(), timeout=120)
    assert sorted(out["after"]) == out["workers"]
    assert set(out["before"].values()) == {3}
    assert set(out["after"].values()) == {1}
    assert sorted(out["push"]["ran"]) == out["workers"]


@needs_gomp
def test_apply_reaches_parinfos_pool_threads_and_says_so():
    out = run_json("import sklearn.ensemble\n" + _start(1) + READ_OMP + textwrap.dedent("""
        parinfo.set_num_threads(1)  # so the pushed count is not what the profile sets
        r = parinfo.apply("single-thread").lines()
        print(json.dumps({"truth": truth(), "workers": workers, "threads": r["threads"],
                          "gaps": r["not_in_force"]}))
    """), env=clean_env(), timeout=120)
    assert sorted(out["truth"]) == out["workers"] and set(out["truth"].values()) == {1}
    line = [t for t in out["threads"] if t.startswith("openmp pool")]
    assert line and all(f"parinfo's own pool threads ({', '.join(sorted(out['workers']))}"
                        f"), each set in its own thread" in sorted_names(t) for t in line)
    assert not any("were busy" in g or "not reached" in g for g in out["gaps"])


def sorted_names(line: str) -> str:
    """The line with the list of pool threads in sorted order (threading.enumerate's order varies)."""
    key = "parinfo's own pool threads ("
    i = line.find(key)
    if i < 0:
        return line
    j = line.index(")", i)
    names = sorted(line[i + len(key):j].split(", "))
    return line[:i + len(key)] + ", ".join(names) + line[j:]
