"""The pieces both pools share: the region guard, the worker crew, and a Future whose scheduling
is fixed when the pool creates it."""
from __future__ import annotations

import ast
import pathlib
import queue
import sys
import threading

import pytest
from conftest import clean_env, run_json, with_statement_gap

from parinfo.runtime.crew import STOP, Crew
from parinfo.runtime.native import NativeLimits
from parinfo.runtime.region import RegionGuard, ThreadRegions
from parinfo.runtime.settings import RuntimeSettings
from parinfo.runtime.workers import WorkerSetup


def test_the_guard_restores_the_region_state_after_nesting_and_after_an_exception():
    guard = RegionGuard()
    seen = []

    def inner(a, b):
        seen.append(("inner", guard.active, guard.chunk))
        raise ValueError("inner")

    def outer(a, b):
        guard.chunk = 3  # a runner numbering its chunks
        with pytest.raises(ValueError):
            guard.run(inner, a, b)
        seen.append(("outer", guard.active, guard.chunk))
        return a + b

    assert guard.run(outer, 1, 2) == 3
    assert seen == [("inner", True, 0), ("outer", True, 3)]
    assert (guard.active, guard.chunk) == (False, 0)


def test_each_thread_has_its_own_guard():
    regions = ThreadRegions()
    other: list[RegionGuard] = []
    t = threading.Thread(target=lambda: other.append(regions.guard))
    t.start()
    t.join()
    assert regions.guard is regions.guard and other[0] is not regions.guard


def _crew() -> Crew:
    return Crew("parinfo-test", WorkerSetup(), NativeLimits(RuntimeSettings()))


def test_a_crew_names_its_workers_serves_jobs_and_stops_on_stop():
    crew, jobs = _crew(), queue.SimpleQueue()
    handled: list[tuple[str, object]] = []

    def work() -> None:
        crew.serve(jobs, lambda job: handled.append((threading.current_thread().name, job)) or True)

    crew.start(7, work)
    for job in ("a", "b", STOP):
        jobs.put(job)
    crew.join(lambda: jobs.put(STOP))
    assert handled == [("parinfo-test-7", "a"), ("parinfo-test-7", "b")]
    assert crew.alive_threads() == 0


def test_an_interrupted_start_whose_thread_never_ran_is_forgotten(monkeypatch):
    crew = _crew()

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        crew.start(1, lambda: None)
    assert crew.workers == []


def test_after_fork_a_crew_keeps_its_list_and_moves_to_a_new_epoch():
    crew = _crew()
    listed = crew.workers
    crew.workers.append(threading.current_thread())
    crew.after_fork_in_child()
    assert crew.workers is listed and listed == [] and crew.epoch == 1


def test_the_pools_write_no_private_field_of_another_object():
    # the state machine owns its state: a pool sets a Future's scheduling when it creates it
    runtime = pathlib.Path(__file__).resolve().parents[1] / "parinfo" / "runtime"
    for name in ("interop.py", "intraop.py", "crew.py"):
        tree = ast.parse((runtime / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                owner = node.value.id if isinstance(node.value, ast.Name) else ""
                assert not (node.attr.startswith("_") and owner != "self"), f"{name}:{node.lineno}"


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT via os.kill")
@pytest.mark.skipif(with_statement_gap() is not None, reason=with_statement_gap() or "")
def test_ctrl_c_in_a_loop_of_regions_never_leaves_the_thread_inside_a_region():
    out = run_json(
        "import json, os, queue, random, signal, threading, time, parinfo.runtime as rt\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "delays = queue.SimpleQueue()\n"
        "def sender():\n"
        "    while (d := delays.get()) is not None:\n"
        "        time.sleep(d); os.kill(os.getpid(), signal.SIGINT)\n"
        "threading.Thread(target=sender, daemon=True).start()\n"
        "rt.set_num_threads(2)\n"
        "f = lambda a, b: None\n"
        "rt.parallel_for(0, 4, 1, f)\n"
        "left = 0\n"
        "for run in range(300):\n"
        "    delays.put(random.uniform(0.0002, 0.002))\n"
        "    try:\n"
        "        while True:\n"
        "            rt.parallel_for(0, 1 + run % 4, 1, f)\n"
        "    except KeyboardInterrupt:\n"
        "        pass\n"
        "    left += rt.in_parallel_region() or rt.get_thread_num() != 0\n"
        "print(json.dumps({'left': left}))",
        env=clean_env(PARINFO_ADAPTIVE="0"), timeout=60)
    assert out == {"left": 0}


def test_the_pools_are_built_at_first_use_and_a_report_builds_none():
    out = run_json(
        "import json, os, sys, parinfo\n"
        "from parinfo.runtime.state import RUNTIME\n"
        "pools = ('parinfo.runtime.interop', 'parinfo.runtime.intraop')\n"
        "loaded = lambda: sorted(m for m in pools if m in sys.modules)\n"
        "parinfo.parallel_info(); parinfo.set_num_threads(2); info = parinfo.runtime.info()\n"
        "before = [loaded(), info['intra_pool_started'], info['inter_pool_started'], info['pool_threads']]\n"
        "parinfo.parallel_for(0, 8, 1, lambda a, b: None)\n"
        "value = parinfo.wait(parinfo.fork(lambda: 7))\n"
        "info = parinfo.runtime.info()\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.write(w, str(parinfo.wait(parinfo.fork(lambda: 8))).encode()); os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print(json.dumps({'before': before, 'after': [loaded(), info['intra_pool_started'],\n"
        "                  info['inter_pool_started'], info['pool_threads'] > 0], 'value': value,\n"
        "                  'child': os.read(r, 8).decode(), 'same': RUNTIME.fork == RUNTIME.inter.fork}))\n",
        env=clean_env())
    assert out["before"] == [[], False, False, 0]
    assert out["after"] == [["parinfo.runtime.interop", "parinfo.runtime.intraop"], True, True, True]
    assert (out["value"], out["child"], out["same"]) == (7, "8", True)
