"""The push of the intra-op count into native pools and torch, and the oversubscription budget."""
from __future__ import annotations

import pytest
from conftest import HAVE_NUMPY, clean_env, run_json

pytestmark = [pytest.mark.timeout(90),
              pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")]

BLAS = ("def blas():\n"
        "    from threadpoolctl import threadpool_info\n"
        "    return sorted({p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas'})\n")


def test_push_is_visible_through_threadpoolctl_with_numpy_loaded():
    out = run_json(
        "import json, numpy, parinfo.runtime as rt\n" + BLAS +
        "before = blas()\n"
        "rt.set_num_threads(1); one = blas()\n"
        "rt.configure(intra_op=3, source='profile x')\n"
        "after_profile = blas()\n"
        "print(json.dumps({'before': before, 'one': one, 'after_profile': after_profile,"
        " 'push': rt.info()['native_push']}))")
    assert out["one"] == [1]
    assert out["after_profile"] == [1]  # the explicit call outranks the profile
    push = out["push"]
    assert push["count"] == 1 and push["source"]["text"] == "explicit call"
    assert any(p["internal_api"] in ("openblas", "mkl", "blis") and p["num_threads"] == 1
               for p in push["pools"])


def test_profile_push_and_libraries_loaded_after_the_push_get_the_count():
    out = run_json(
        "import json, parinfo.runtime as rt\n" + BLAS +
        "rt.configure(intra_op=1, source='profile latency')\n"
        "import numpy\n"
        "rt.parallel_for(0, 10, 1, lambda a, b: None)\n"
        "print(json.dumps({'blas': blas(), 'push': rt.info()['native_push']}))")
    assert out["blas"] == [1]
    assert out["push"]["source"]["text"] == "profile latency"


def test_importing_and_reading_pushes_nothing():
    out = run_json(
        "import json, numpy, parinfo.runtime as rt\n" + BLAS +
        "before = blas(); rt.info(); rt.get_num_threads()\n"
        "rt.parallel_for(0, 100, 1, lambda a, b: None); rt.wait(rt.fork(int))\n"
        "print(json.dumps({'same': blas() == before, 'push': rt.info()['native_push']}))",
        env=clean_env(OPENBLAS_NUM_THREADS="1", PARINFO_NUM_THREADS="2"))
    assert out == {"same": True, "push": None}


def test_budget_caps_process_wide_blas_while_tasks_overlap_and_restores_it():
    from parinfo.machine.topology import machine_facts

    if machine_facts().usable_cpus < 2:
        pytest.skip("needs 2 usable CPUs (OpenBLAS caps itself to the affinity)")
    out = run_json(
        "import json, threading, numpy, parinfo.runtime as rt\n" + BLAS +
        "rt.set_num_interop_threads(2)\n"
        "before = blas()\n"
        "barrier = threading.Barrier(2, timeout=10)\n"
        "def task():\n"
        "    barrier.wait()\n"
        "    seen = blas()\n"
        "    barrier.wait()\n"
        "    return seen\n"
        "fs = [rt.fork(task) for _ in range(2)]\n"
        "during = [rt.wait(f) for f in fs]\n"
        "print(json.dumps({'before': before, 'during': during, 'after': blas(),"
        " 'budget': rt.info()['budget']}))",
        env=clean_env(OPENBLAS_NUM_THREADS="2"))
    assert out["before"] == [2]
    assert out["during"] == [[1], [1]]
    assert out["after"] == [2]
    assert out["budget"]["lanes"] == 0 and out["budget"]["cap_per_lane"] is None


@pytest.mark.torch
def test_push_is_visible_through_torch_getters():
    out = run_json(
        "import json, threading, torch, parinfo.runtime as rt\n"
        "rt.set_num_threads(1)\n"
        "main = torch.get_num_threads()\n"
        "rt.set_num_threads(2)\n"
        "main2 = torch.get_num_threads()\n"
        "in_task = rt.wait(rt.fork(torch.get_num_threads))\n"
        "print(json.dumps({'main': main, 'main2': main2, 'in_task': in_task,"
        " 'push': rt.info()['native_push']['torch']}))")
    assert out["main"] == 1 and out["main2"] == 2
    assert out["push"] == "torch.set_num_threads(2)"


@pytest.mark.torch
def test_torch_imported_after_the_push_gets_the_count_in_tasks():
    out = run_json(
        "import json, parinfo.runtime as rt\n"
        "rt.set_num_threads(1)\n"
        "import torch\n"
        "in_task = rt.wait(rt.fork(torch.get_num_threads))\n"
        "print(json.dumps({'in_task': in_task, 'main': torch.get_num_threads()}))")
    assert out == {"in_task": 1, "main": 1}


@pytest.mark.torch
def test_budget_caps_torch_in_overlapping_tasks_and_gives_the_count_back():
    from parinfo.machine.topology import machine_facts

    cap = max(1, machine_facts().usable_cpus // 2)
    out = run_json(
        "import json, threading, torch, parinfo.runtime as rt\n"
        "torch.set_num_threads(2)\n"
        "rt.set_num_interop_threads(2)\n"
        "barrier = threading.Barrier(2, timeout=10)\n"
        "def task():\n"
        "    barrier.wait()\n"
        "    n = torch.get_num_threads()\n"
        "    barrier.wait()\n"
        "    return n\n"
        "fs = [rt.fork(task) for _ in range(2)]\n"
        "during = [rt.wait(f) for f in fs]\n"
        "alone = rt.wait(rt.fork(torch.get_num_threads))\n"
        "print(json.dumps({'during': during, 'main': torch.get_num_threads(), 'alone': alone,"
        " 'push': rt.info()['native_push']}))")
    assert out["during"] == [min(2, cap)] * 2
    assert out["main"] == 2 and out["alone"] == 2
    assert out["push"] is None


def test_budget_gives_back_a_pool_count_set_after_the_push():
    from parinfo.machine.topology import machine_facts

    if machine_facts().usable_cpus < 2:
        pytest.skip("needs 2 usable CPUs")
    out = run_json(
        "import json, threading, numpy, parinfo.runtime as rt\n" + BLAS +
        "from threadpoolctl import threadpool_limits\n"
        "rt.set_num_threads(2)\n"
        "threadpool_limits(3, user_api='blas')  # e.g. a profile's own BLAS count\n"
        "barrier = threading.Barrier(2, timeout=10)\n"
        "def task():\n"
        "    barrier.wait(); seen = blas(); barrier.wait()\n"
        "    return seen\n"
        "during = [rt.wait(f) for f in [rt.fork(task) for _ in range(2)]]\n"
        "print(json.dumps({'during': during, 'after': blas()}))")
    assert out == {"during": [[1], [1]], "after": [3]}


@pytest.mark.torch
def test_idle_workers_leave_no_openmp_team_behind():
    # libgomp counts idle team threads of every thread against the CPUs and throttles every
    # team's spin once they outnumber them: a team left on an idle worker slowed torch on the
    # main thread 1.7x for the rest of the process. Its threads inherit the worker's name.
    out = run_json(
        "import json, os, time, torch, parinfo\n"
        "from parinfo.runtime import RUNTIME\n"
        "def names():\n"
        "    return sorted(open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task'))\n"
        "x = torch.rand(512, 512)\n"
        "torch.mm(x, x)\n"
        "f = parinfo.fork(torch.mm, x, x)\n"
        "time.sleep(0.2)  # a worker takes it and runs it with torch's 2 threads\n"
        "parinfo.wait(f)\n"
        "time.sleep(0.2)\n"
        "print(json.dumps({'names': names(), 'released': RUNTIME.limits.teams_released,\n"
        "                  'torch': torch.get_num_threads()}))", env=clean_env(PARINFO_NUM_THREADS="2"))
    assert out["torch"] == 2
    assert out["names"].count("parinfo-inter-0") == 1 and out["released"] >= 1
