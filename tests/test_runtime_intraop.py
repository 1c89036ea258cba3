"""parallel_for / parallel_reduce: coverage, chunking, nesting, exceptions, shared bounded pool."""
from __future__ import annotations

import itertools
import traceback

import pytest
from conftest import clean_env, run_json

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("begin,end,grain", [(0, 1, 1), (0, 100, 1), (3, 1000, 7), (-50, 50, 200),
                                             (0, 17, 16), (5, 5, 1), (9, 2, 1)])
def test_chunks_cover_the_range_exactly_once(begin, end, grain):
    import threading

    import parinfo.runtime as rt

    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def body(a, b):
        with lock:
            seen.append((a, b))

    rt.parallel_for(begin, end, grain, body)
    covered = sorted(i for a, b in seen for i in range(a, b))
    assert covered == list(range(begin, end))
    assert len(seen) <= max(1, rt.get_num_threads())
    if len(seen) > 1:
        assert all(b - a >= grain for a, b in sorted(seen)[:-1])


def test_parallel_reduce_matches_serial_and_folds_in_order():
    import parinfo.runtime as rt

    total = rt.parallel_reduce(0, 10001, 100, 0, lambda a, b, ident: ident + sum(range(a, b)),
                               lambda x, y: x + y)
    assert total == sum(range(10001))
    # a non-commutative combine shows the left-to-right order
    text = rt.parallel_reduce(0, 26, 1, "", lambda a, b, ident: "".join(chr(97 + i) for i in range(a, b)),
                              lambda x, y: x + y)
    assert text == "abcdefghijklmnopqrstuvwxyz"
    assert rt.parallel_reduce(4, 4, 1, 99, lambda a, b, i: 0, max) == 99


def test_region_flags_thread_numbers_and_nested_calls_run_inline():
    out = run_json(
        "import json, threading, parinfo.runtime as rt\n"
        "rt.set_num_threads(4)\n"
        "rec = []; lock = threading.Lock()\n"
        "def body(a, b):\n"
        "    inner = []\n"
        "    rt.parallel_for(0, 100, 1, lambda c, d: inner.append((c, d, threading.get_ident())))\n"
        "    with lock:\n"
        "        rec.append({'num': rt.get_thread_num(), 'region': rt.in_parallel_region(),"
        " 'inner': [(c, d) for c, d, _ in inner], 'same': all(t == threading.get_ident() for *_, t in inner)})\n"
        "rt.parallel_for(0, 4, 1, body)\n"
        "print(json.dumps({'rec': rec, 'outside': rt.in_parallel_region(), 'num': rt.get_thread_num()}))")
    assert out["outside"] is False and out["num"] == 0
    assert sorted(r["num"] for r in out["rec"]) == [0, 1, 2, 3]
    for r in out["rec"]:
        assert r["region"] is True and r["inner"] == [[0, 100]] and r["same"] is True


def test_first_exception_in_a_chunk_is_reraised_with_its_traceback():
    import parinfo.runtime as rt

    def failing_chunk(a, b):
        if b == 100:  # the last chunk, whatever the count
            raise ZeroDivisionError(f"chunk {a}")

    with pytest.raises(ZeroDivisionError) as info:
        rt.parallel_for(0, 100, 1, failing_chunk)
    assert "failing_chunk" in [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    # the pool still works afterwards
    assert rt.parallel_reduce(0, 100, 1, 0, lambda a, b, i: b - a, lambda x, y: x + y) == 100


def test_bad_arguments_are_refused():
    import parinfo.runtime as rt

    with pytest.raises(ValueError, match="grain_size"):
        rt.parallel_for(0, 10, 0, lambda a, b: None)
    with pytest.raises(TypeError, match="float"):
        rt.parallel_for(0, 10.0, 1, lambda a, b: None)


def test_contextvars_propagate_into_chunks():
    out = run_json(
        "import contextvars, json, threading, parinfo.runtime as rt\n"
        "rt.set_num_threads(3)\n"
        "var = contextvars.ContextVar('v', default='unset'); var.set('caller')\n"
        "seen = []\n"
        "def chunk(a, b):\n"
        "    seen.append((var.get(), threading.get_ident()))\n"
        "    var.set('changed in chunk')\n"
        "rt.parallel_for(0, 3, 1, chunk)\n"
        "print(json.dumps({'vals': sorted(v for v, _ in seen), 'after': var.get()}))")
    assert out["vals"] == ["caller"] * 3
    assert out["after"] == "caller"


def test_many_application_threads_share_one_bounded_pool():
    out = run_json(
        "import json, os, threading, time, parinfo.runtime as rt\n"
        "rt.set_num_threads(3)\n"
        "peak = [0]; stop = threading.Event()\n"
        "def sample():\n"
        "    while not stop.is_set():\n"
        "        peak[0] = max(peak[0], len(os.listdir('/proc/self/task')))\n"
        "        time.sleep(0.001)\n"
        "s = threading.Thread(target=sample); s.start()\n"
        "results = {}\n"
        "def app(k):\n"
        "    for rep in range(30):\n"
        "        acc = rt.parallel_reduce(0, 3000, 10, 0, lambda a, b, i: sum(range(a, b)), lambda x, y: x + y)\n"
        "        assert acc == sum(range(3000))\n"
        "    results[k] = True\n"
        "ts = [threading.Thread(target=app, args=(k,)) for k in range(8)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "stop.set(); s.join()\n"
        "print(json.dumps({'ok': len(results), 'peak': peak[0], 'pool': rt.info()['pool_threads']}))",
        timeout=50)
    assert out["ok"] == 8
    assert out["pool"] == 2
    # main + sampler + 8 application threads + 2 pool workers
    assert out["peak"] <= 1 + 1 + 8 + 2


def test_count_change_applies_to_regions_that_start_after_it():
    out = run_json(
        "import json, threading, parinfo.runtime as rt\n"
        "rt.set_num_threads(2)\n"
        "first = []; second = []\n"
        "def body(a, b):\n"
        "    if a == 0:\n"
        "        rt.set_num_threads(4)\n"
        "    first.append((a, b))\n"
        "rt.parallel_for(0, 100, 1, body)\n"
        "rt.parallel_for(0, 100, 1, lambda a, b: second.append((a, b)))\n"
        "print(json.dumps({'first': len(first), 'second': len(second), 'pool': rt.info()['pool_threads']}))")
    assert out == {"first": 2, "second": 4, "pool": 3}


def test_shrinking_the_count_retires_surplus_workers():
    out = run_json(
        "import json, time, parinfo.runtime as rt\n"
        "rt.set_num_threads(4); rt.parallel_for(0, 8, 1, lambda a, b: None)\n"
        "big = rt.info()['pool_threads']\n"
        "rt.set_num_threads(2); rt.parallel_for(0, 8, 1, lambda a, b: None)\n"
        "for _ in range(200):\n"
        "    if rt.info()['pool_threads'] == 1: break\n"
        "    time.sleep(0.01)\n"
        "print(json.dumps([big, rt.info()['pool_threads']]))")
    assert out == [3, 1]


def test_sequential_backend_runs_regions_inline_in_one_chunk():
    out = run_json(
        "import json, threading, parinfo.runtime as rt\n"
        "seen = []\n"
        "rt.parallel_for(0, 1000, 1, lambda a, b: seen.append((a, b, rt.in_parallel_region())))\n"
        "print(json.dumps({'seen': seen, 'threads': threading.active_count()}))",
        env=clean_env(PARINFO_BACKEND="sequential"))
    assert out == {"seen": [[0, 1000, True]], "threads": 1}


def test_numpy_integers_are_accepted_as_bounds_and_counts():
    pytest.importorskip("numpy")
    out = run_json(
        "import json, numpy as np, parinfo.runtime as rt\n"
        "rt.set_num_threads(np.int64(2))\n"
        "seen = []\n"
        "rt.parallel_for(np.int64(0), np.int32(10), np.int64(3), lambda a, b: seen.append([a, b]))\n"
        "print(json.dumps({'n': rt.get_num_threads(), 'seen': sorted(seen)}))")
    assert out == {"n": 2, "seen": [[0, 5], [5, 10]]}


def test_several_chunks_raising_reraise_the_first_with_the_others_attached():
    out = run_json(
        "import json, threading, traceback, parinfo.runtime as rt\n"
        "rt.set_num_threads(4)\n"
        "gate = threading.Barrier(4, timeout=10)\n"
        "def body(a, b):\n"
        "    gate.wait()  # all four chunks run at once, then all raise\n"
        "    raise ValueError(f'chunk {a}')\n"
        "try:\n"
        "    rt.parallel_for(0, 4, 1, body)\n"
        "except ValueError as e:\n"
        "    err = e\n"
        "text = ''.join(traceback.format_exception(err))\n"
        "print(json.dumps({'first': str(err), 'notes': getattr(err, '__notes__', []),"
        " 'others': sorted(str(x) for x in err.parinfo_other_errors), 'shown': 'more chunk' in text}))")
    assert out["first"].startswith("chunk ")
    assert out["notes"][0] == "parinfo: 3 more chunk(s) of this parallel region raised too:"
    assert len(out["notes"]) == 4 and all("ValueError: chunk " in n for n in out["notes"][1:])
    everything = sorted([out["first"], *out["others"]])
    assert everything == ["chunk 0", "chunk 1", "chunk 2", "chunk 3"]
    assert out["shown"] is True


def test_the_callers_chunk_leads_by_what_it_runs_while_a_worker_wakes():
    # one chunk per thread: workers start about POOL.wake_ns after the caller, so the caller's
    # first chunk is that much work longer and both finish together; chunks still tile the range
    import contextvars

    from parinfo.runtime import RUNTIME
    from parinfo.runtime.intraop import _Job

    def chunks(size: int, n: int, lead: int) -> list[tuple[int, int]]:
        got: list[tuple[int, int]] = []
        job = _Job(RUNTIME.intra, lambda a, b: got.append((a, b)), 10, 10 + size, n, contextvars.copy_context(),
                   False, False, lead)
        job.work()  # the caller alone runs every chunk, in order
        return got

    assert chunks(100, 2, 20) == [(10, 70), (70, 110)]
    assert chunks(100, 3, 10) == [(10, 50), (50, 80), (80, 110)]
    assert chunks(100, 2, 0) == [(10, 60), (60, 110)]
    assert chunks(5, 2, 5) == [(10, 13), (13, 15)]  # no room for a lead: an even split
    for size, n, lead in [(1001, 2, 37), (7, 3, 2), (1 << 20, 4, 999)]:
        got = chunks(size, n, lead)
        assert got[0][0] == 10 and got[-1][1] == 10 + size and len(got) == n
        assert all(a[1] == b[0] for a, b in itertools.pairwise(got))


def test_a_measured_site_gives_the_caller_a_lead():
    out = run_json(
        "import json, threading, time, parinfo\n"
        "from parinfo.runtime import RUNTIME\n"
        "ADAPT, POOL = RUNTIME.adaptive, RUNTIME.intra\n"
        "firsts = []\n"
        "def body(a, b):\n"
        "    if a == 0:\n"
        "        firsts.append(b)\n"
        "    time.sleep((b - a) * 2e-6)  # releases the GIL, like numpy\n"
        "for _ in range(60):\n"
        "    parinfo.parallel_for(0, 1000, 1, body)\n"
        "site = ADAPT.region_site(body, 1000, 2, 1000)\n"
        "site.pin(2)\n"
        "firsts.clear()\n"
        "for _ in range(20):\n"
        "    parinfo.parallel_for(0, 1000, 1, body)\n"
        "print(json.dumps({'firsts': firsts, 'wake_ns': POOL.wake_ns, 'per_item': site.per_item}))",
        env=clean_env(PARINFO_NUM_THREADS="2"))
    assert out["wake_ns"] > 0 and out["per_item"] > 0
    assert len(out["firsts"]) == 20 and all(500 < f <= 750 for f in out["firsts"])
