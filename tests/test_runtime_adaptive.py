"""Adaptive decisions per call site: parallel_for inlines below a measured break-even and splits
above it; fork runs a site's tasks in lanes or inline, whichever was faster; PARINFO_ADAPTIVE=0
switches it off; TorchScript callables fork through torch's own pool (tests/test_runtime_torchfork.py)."""
from __future__ import annotations

import os
import textwrap

import pytest
from conftest import clean_env, run_json

needs_two = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")


def _run(code: str, **env: str) -> dict:
    return run_json(textwrap.dedent(code), env=clean_env(PARINFO_NUM_THREADS="2", **env), timeout=120)


SITES = """
import json, threading, time
import parinfo
from parinfo.runtime import RUNTIME
main = threading.get_ident()
where = {"tiny": set(), "slow": set()}
def tiny(a, b):
    where["tiny"].add(threading.get_ident() == main)
def slow(a, b):
    time.sleep(0.004 * (b - a))  # releases the GIL: two chunks at once take half the time
    where["slow"].add(threading.get_ident() == main)
for _ in range(40):
    parinfo.parallel_for(0, 2, 1, slow)
where = {"tiny": set(), "slow": set()}
for _ in range(200):
    parinfo.parallel_for(0, 2, 1, tiny)
where["tiny"] = set()
for _ in range(20):
    parinfo.parallel_for(0, 2, 1, tiny)
    parinfo.parallel_for(0, 2, 1, slow)
picks = {fn.__name__: RUNTIME.adaptive.region_site(fn, 2, 2).pick for fn in (tiny, slow)}
print(json.dumps({"picks": picks, "tiny_on_main_only": where["tiny"] == {True},
                  "slow_on_workers": False in where["slow"], "info": parinfo.runtime.info()["adaptive"]}))
"""


@needs_two
def test_parallel_for_inlines_tiny_work_and_splits_work_that_gains():
    out = _run(SITES)
    assert out["picks"] == {"tiny": 1, "slow": 2}
    assert out["tiny_on_main_only"] and out["slow_on_workers"]
    assert out["info"]["enabled"] and out["info"]["regions_inline"] >= 1


OFF = """
import json, threading, parinfo
from parinfo.runtime import adaptive
SWITCH
gate = threading.Barrier(2, timeout=10)  # passes only when both chunks run at once
for _ in range(50):
    parinfo.parallel_for(0, 2, 1, lambda a, b: gate.wait())
print(json.dumps(parinfo.runtime.info()["adaptive"]))
"""


@needs_two
def test_the_off_switch_splits_every_region():
    assert _run(OFF.replace("SWITCH", ""), PARINFO_ADAPTIVE="0")["enabled"] is False
    out = _run(OFF.replace("SWITCH", "parinfo.runtime.set_adaptive(False)"), PARINFO_ADAPTIVE="1")
    assert out["enabled"] is False and out["region_sites"] == 0


def test_the_chooser_explores_exploits_and_rechecks():
    from parinfo.runtime.adaptive import EXPLORE, RECHECK_FIRST, WARMUP, RegionSite

    site = RegionSite(4)
    for _ in range(WARMUP):  # not recorded
        assert site.choose() == 4
        site.record(4, 100.0)
    assert site.cands == [4, 2, 1]
    cost = {4: 3.0, 2: 2.0, 1: 1.0}
    tried = []
    for _ in range(3 * EXPLORE):
        n = site.choose()
        tried.append(n)
        site.record(n, cost[n])
    assert tried == [4] * EXPLORE + [2] * EXPLORE + [1] * EXPLORE  # the split as asked first
    assert site.pick == 1 and site.left == RECHECK_FIRST
    for _ in range(RECHECK_FIRST):
        assert site.choose() == 1
    cost = {4: 0.5, 2: 2.0, 1: 1.0}  # the work changed: the re-check finds it
    for _ in range(3 * EXPLORE):
        n = site.choose()
        site.record(n, cost[n])
    assert site.pick == 4 and site.left == RECHECK_FIRST


@needs_two
def test_fork_sites_choose_inline_or_lanes():
    out = _run("""
        import json, threading, time, parinfo
        from parinfo.runtime import RUNTIME
        def slow_on_workers(k):  # fast on the waiting thread, slow on a pool worker
            on_worker = threading.current_thread().name.startswith("parinfo-interop")
            time.sleep(0.02 if on_worker else 0.002)
            return k
        def sleepy(k):
            time.sleep(0.005)  # releases the GIL: tasks in lanes overlap
            return k
        for _ in range(40):
            assert [parinfo.wait(f) for f in [parinfo.fork(slow_on_workers, k) for k in range(2)]] == [0, 1]
        for _ in range(30):
            assert [parinfo.wait(f) for f in [parinfo.fork(sleepy, k) for k in range(4)]] == [0, 1, 2, 3]
        print(json.dumps({"inline": RUNTIME.adaptive.fork_site(slow_on_workers).pick,
                          "lanes": RUNTIME.adaptive.fork_site(sleepy).pick}))
    """, PARINFO_NUM_INTEROP_THREADS="2")
    assert out == {"inline": "inline", "lanes": "pool"}


def test_an_inline_site_never_deadlocks_a_task_that_waits_for_its_forker():
    out = _run("""
        import json, threading, time, parinfo
        from parinfo.runtime import RUNTIME
        from parinfo.runtime.adaptive import INLINE
        go = threading.Event()
        def waits():
            return go.wait(30)
        RUNTIME.adaptive.fork_site(waits).pin(INLINE)
        f = parinfo.fork(waits)
        time.sleep(0.05)
        go.set()
        print(json.dumps({"ran": f.result(timeout=30), "site": RUNTIME.adaptive.fork_site(waits).pick}))
    """)
    assert out == {"ran": True, "site": "inline"}


@pytest.mark.torch
@needs_two
def test_scripted_callables_fork_on_torchs_pool_sized_by_parinfo():
    out = _run("""
        import json, os, threading, torch, parinfo
        def body(x):
            for _ in range(20):
                x = torch.tanh(x @ x)
            return x
        x = torch.rand(64, 64)
        heavy = torch.jit.trace(body, (x,))  # a ScriptFunction (scripting needs a source file)
        futs = [parinfo.fork(heavy, x) for _ in range(4)]
        outs = [parinfo.wait(f) for f in futs]
        ok = all(torch.allclose(o, heavy(x)) for o in outs)
        res = {"kinds": sorted({type(f).__module__ + "." + type(f).__name__ for f in futs}), "ok": ok,
               "torch_interop": torch.get_num_interop_threads(), "parinfo_interop": parinfo.get_num_interop_threads(),
               "locked": parinfo.runtime.info()["inter_op"]["locked"],
               "plain": parinfo.wait(parinfo.fork(lambda: 7))}
        print(json.dumps(res), flush=True)
        os._exit(0)  # torch may abort at exit after scripted fork
    """, PARINFO_NUM_INTEROP_THREADS="3")
    assert out["ok"] and out["plain"] == 7
    assert out["kinds"] == ["torch.Future"]
    assert out["torch_interop"] == out["parinfo_interop"] == 3 and out["locked"]


@pytest.mark.torch
@needs_two
def test_eight_callers_change_native_limits_at_most_once_per_hundred_tasks():
    out = _run("""
        import json, threading, torch, numpy, parinfo
        def task(k):
            return k + 1
        def caller():
            for k in range(2000):
                assert parinfo.wait(parinfo.fork(task, k)) == k + 1
        ts = [threading.Thread(target=caller) for _ in range(8)]
        [t.start() for t in ts]; [t.join() for t in ts]
        print(json.dumps({"changes": parinfo.runtime.info()["budget"]["native_changes"], "tasks": 16000,
                          "lanes": parinfo.runtime.info()["budget"]["lanes"]}))
    """)
    assert out["lanes"] == 0
    assert out["changes"] / out["tasks"] <= 0.01


def test_every_late_inline_task_is_rescued_not_only_the_first():
    # a worker watches the tasks left to their waiters; after running the first late one it
    # must go on watching (it once stopped for good: later tasks waited for their waiters, and
    # the list of finished tasks it prunes grew without bound)
    out = _run("""
        import json, threading, parinfo
        from parinfo.runtime import RUNTIME
        from parinfo.runtime.adaptive import INLINE
        def mark(ev):
            ev.set()
        RUNTIME.adaptive.fork_site(mark).pin(INLINE)
        ran = []
        for _ in range(5):
            ev = threading.Event()
            f = parinfo.fork(mark, ev)
            ran.append(ev.wait(10))  # the forker does not wait for f: a worker must run it
            parinfo.wait(f)
        print(json.dumps({"ran": ran, "left": len(RUNTIME.inter.deferred)}))
    """)
    assert out["ran"] == [True] * 5 and out["left"] <= 1
