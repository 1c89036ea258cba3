"""fork/wait: many tasks, nesting, exceptions, contextvars, os.fork children, exit with tasks in flight."""
from __future__ import annotations

import json
import sys
import traceback

import pytest
from conftest import clean_env, run_json, run_py

pytestmark = pytest.mark.timeout(60)


def test_100k_tiny_tasks_all_complete_in_order_of_their_futures():
    out = run_json(
        "import json, parinfo.runtime as rt\n"
        "fs = [rt.fork(pow, i, 2) for i in range(100000)]\n"
        "vals = [rt.wait(f) for f in fs]\n"
        "each = sum(rt.wait(rt.fork(pow, i, 2)) for i in range(20000))\n"
        "print(json.dumps({'ok': vals == [i * i for i in range(100000)], 'each': each,"
        " 'done': all(f.done() for f in fs), 'threads': rt.info()['pool_threads']}))",
        env=clean_env(PARINFO_NUM_INTEROP_THREADS="2", PARINFO_ADAPTIVE="0"))  # every task to the pool
    assert out == {"ok": True, "each": sum(i * i for i in range(20000)), "done": True, "threads": 2}


def test_nested_fork_wait_three_deep_with_one_interop_thread_does_not_deadlock():
    out = run_json(
        "import json, parinfo.runtime as rt\n"
        "rt.set_num_interop_threads(1)\n"
        "def level(d):\n"
        "    if d == 0:\n        return 1\n"
        "    fs = [rt.fork(level, d - 1) for _ in range(3)]\n"
        "    return sum(rt.wait(f) for f in fs)\n"
        "fs = [rt.fork(level, 3) for _ in range(4)]\n"
        "print(json.dumps([rt.wait(f) for f in fs]))", timeout=30)
    assert out == [27, 27, 27, 27]


def test_exception_in_a_task_reaches_wait_with_its_traceback():
    import parinfo.runtime as rt

    def inner_failure(x):
        raise KeyError(f"bad {x}")

    fut = rt.fork(inner_failure, 7)
    with pytest.raises(KeyError) as info:
        rt.wait(fut)
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "inner_failure" in frames
    assert isinstance(fut.exception(), KeyError) and fut.done()
    with pytest.raises(KeyError):
        fut.result()


def test_contextvars_propagate_into_tasks_and_changes_stay_there():
    import contextvars

    import parinfo.runtime as rt

    var = contextvars.ContextVar("request_id", default="none")
    var.set("r-42")

    def task():
        seen = var.get()
        var.set("changed in task")
        return seen

    assert [rt.wait(rt.fork(task)) for _ in range(20)] == ["r-42"] * 20
    assert var.get() == "r-42"


def test_kwargs_callbacks_and_result_timeout():
    import threading

    import parinfo.runtime as rt

    assert rt.wait(rt.fork(dict, a=1, fn=2)) == {"a": 1, "fn": 2}
    gate, started = threading.Event(), threading.Event()

    def blocker():
        started.set()
        return gate.wait(10)

    fut = rt.fork(blocker)
    seen = []
    fut.add_done_callback(lambda f: seen.append(f.result()))
    assert started.wait(10)  # a pool worker runs it now
    with pytest.raises(TimeoutError):
        fut.result(timeout=0.05)
    assert not fut.done()
    gate.set()
    assert fut.result(timeout=10) is True and fut.done()
    assert seen == [True]
    late = []
    fut.add_done_callback(late.append)
    assert late == [fut]
    with pytest.raises(TypeError, match="parinfo Future"):
        rt.wait(42)
    with pytest.raises(TypeError, match="callable"):
        rt.fork(42)


def test_wait_on_unstarted_task_runs_it_on_the_waiting_thread():
    out = run_json(
        "import json, threading, parinfo.runtime as rt\n"
        "rt.set_num_interop_threads(1)\n"
        "gate = threading.Event()\n"
        "blocker = rt.fork(gate.wait, 10)\n"
        "f = rt.fork(threading.get_ident)\n"
        "ran_on = rt.wait(f)\n"
        "gate.set(); rt.wait(blocker)\n"
        "print(json.dumps(ran_on == threading.get_ident()))")
    assert out is True


def test_sequential_backend_runs_tasks_inline():
    out = run_json(
        "import json, threading, parinfo.runtime as rt\n"
        "f = rt.fork(threading.get_ident)\n"
        "print(json.dumps({'done_at_fork': f.done(), 'inline': rt.wait(f) == threading.get_ident(),"
        " 'threads': threading.active_count(), 'info': rt.info()['inter_pool_started']}))",
        env=clean_env(PARINFO_BACKEND="sequential"))
    assert out == {"done_at_fork": True, "inline": True, "threads": 1, "info": True}


@pytest.mark.skipif(sys.platform != "linux", reason="os.fork semantics tested on Linux")
def test_os_fork_child_gets_fresh_working_pools_after_parent_used_both():
    out = run_json(
        "import json, os, parinfo.runtime as rt\n"
        "def use():\n"
        "    acc = []\n"
        "    rt.parallel_for(0, 1000, 10, lambda a, b: acc.append(sum(range(a, b))))\n"
        "    fs = [rt.fork(pow, i, 2) for i in range(200)]\n"
        "    return sum(acc) + sum(rt.wait(f) for f in fs)\n"
        "want = use()\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.close(r)\n"
        "    got = use(); info = rt.info()\n"
        "    os.write(w, json.dumps({'got': got, 'threads': info['pool_threads']}).encode())\n"
        "    os._exit(0)\n"
        "os.close(w)\n"
        "data = b''\n"
        "while chunk := os.read(r, 65536):\n    data += chunk\n"
        "_, status = os.waitpid(pid, 0)\n"
        "child = json.loads(data)\n"
        "print(json.dumps({'want': want, 'child': child, 'status': status, 'parent': use()}))",
        timeout=30)
    assert out["status"] == 0
    assert out["child"]["got"] == out["want"] == out["parent"]
    assert out["child"]["threads"] >= 1


def test_exit_with_tasks_in_flight_neither_hangs_nor_aborts():
    proc = run_py(
        "import time, parinfo.runtime as rt\n"
        "rt.set_num_interop_threads(2)\n"
        "def slow(i):\n    time.sleep(0.02)\n    return i\n"
        "def spawner(i):\n    return [rt.fork(slow, j) for j in range(5)]\n"
        "fs = [rt.fork(spawner, i) for i in range(10)]\n"
        "rt.parallel_for(0, 10, 1, lambda a, b: time.sleep(0.01))\n"
        "print('leaving', flush=True)\n", timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "leaving" in proc.stdout
    assert "Traceback" not in proc.stderr and "terminate" not in proc.stderr


def test_exit_via_exception_with_tasks_in_flight_keeps_the_exit_status():
    proc = run_py(
        "import time, parinfo.runtime as rt\n"
        "fs = [rt.fork(time.sleep, 0.01) for i in range(50)]\n"
        "raise SystemExit(3)\n", timeout=30, check=False)
    assert proc.returncode == 3 and proc.stderr == ""


@pytest.mark.torch
def test_exit_with_torch_work_in_flight_neither_hangs_nor_aborts():
    proc = run_py(
        "import torch, parinfo.runtime as rt\n"
        "x = torch.randn(256, 256)\n"
        "def work(k):\n"
        "    fs = [rt.fork(torch.mm, x, x) for _ in range(3)]\n"
        "    return sum(rt.wait(f).sum() for f in fs)\n"
        "rt.wait(rt.fork(work, 0))\n"
        "fs = [rt.fork(work, k) for k in range(20)]\n"
        "print('leaving', flush=True)\n", timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "leaving" in proc.stdout and "terminate" not in proc.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="os.fork semantics tested on Linux")
@pytest.mark.parametrize("where", ["task", "chunk"])
def test_os_fork_on_a_pool_worker_child_exits_normally_when_the_work_returns(where):
    proc = run_py(
        "import json, os, sys, threading, time, parinfo.runtime as rt\n"
        "kids = []\n"
        "def work(*_):\n"
        "    name = threading.current_thread().name\n"
        "    if not name.startswith(('parinfo-interop', 'parinfo-intra')):\n"
        "        return\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        print('child ran on', name)\n"  # buffered: must be flushed at the child's exit
        "        return 'from child'\n"
        "    kids.append(pid)\n"
        "if sys.argv[-1] == 'task':\n"
        "    rt.set_num_interop_threads(1)\n"
        "    rt.fork(work).result(timeout=30)\n"  # only waits: the worker runs it
        "else:\n"
        "    rt.set_num_threads(2)\n"
        "    gate = threading.Barrier(2, timeout=10)\n"
        "    rt.parallel_for(0, 2, 1, lambda a, b: (gate.wait(), work()))\n"
        "statuses = []\n"
        "for pid in kids:\n"
        "    end = time.monotonic() + 20\n"
        "    while time.monotonic() < end:\n"
        "        done, status = os.waitpid(pid, os.WNOHANG)\n"
        "        if done:\n"
        "            statuses.append(os.waitstatus_to_exitcode(status)); break\n"
        "        time.sleep(0.01)\n"
        "    else:\n"
        "        os.kill(pid, 9); statuses.append('hung')\n"
        "print(json.dumps({'statuses': statuses, 'after': rt.wait(rt.fork(pow, 2, 5))}))"
        .replace("sys.argv[-1]", repr(where)), timeout=60)
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["statuses"] == [0]
    assert out["after"] == 32
    assert "child ran on parinfo-" in proc.stdout  # the child's buffered output was flushed
