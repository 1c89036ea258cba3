"""Counts, set-once rules, bad values, provenance of defaults, backend selection, info()."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import clean_env, run_json, words

pytestmark = pytest.mark.timeout(60)

MSG = ("cannot set number of interop threads after parallel work has started "
       "or set_num_interop_threads called")


def _usable() -> tuple[int, int]:
    from parinfo.machine.topology import machine_facts

    f = machine_facts()
    return f.usable_physical_cores, f.usable_cpus


def test_second_set_num_interop_threads_raises_the_reference_message():
    out = run_json(
        "import json, parinfo.runtime as rt\n"
        "rt.set_num_interop_threads(1)\n"
        "try:\n    rt.set_num_interop_threads(1)\nexcept RuntimeError as e:\n    msg = str(e)\n"
        "print(json.dumps({'msg': msg, 'n': rt.get_num_interop_threads()}))")
    assert MSG in out["msg"] and out["n"] == 1


def test_set_num_interop_threads_after_fork_raises():
    out = run_json(
        "import json, parinfo.runtime as rt\n"
        "rt.wait(rt.fork(int))\n"
        "try:\n    rt.set_num_interop_threads(2)\nexcept RuntimeError as e:\n    msg = str(e)\n"
        "print(json.dumps({'msg': msg}))")
    assert MSG in out["msg"]


def test_reading_interop_count_or_running_parallel_for_still_allows_setting_it():
    out = run_json(
        "import json, parinfo.runtime as rt\n"
        "rt.get_num_interop_threads(); rt.info()\n"
        "rt.parallel_for(0, 100, 1, lambda a, b: None)\n"
        "started = rt.info()['inter_pool_started']\n"
        "rt.set_num_interop_threads(3)\n"
        "print(json.dumps({'n': rt.get_num_interop_threads(), 'started': started,"
        " 'src': rt.info()['inter_op']['source']}))")
    assert words(out) == {"n": 3, "started": False, "src": "explicit call"} and out["src"]["kind"] == "explicit call"


def test_configure_follows_the_set_once_rule_and_records_its_source():
    out = run_json(
        "import json, parinfo.runtime as rt\n"
        "rt.configure(intra_op=3, inter_op=1, source='profile latency')\n"
        "i = rt.info()\n"
        "try:\n    rt.configure(inter_op=2, source='profile other')\nexcept RuntimeError as e:\n    msg = str(e)\n"
        "print(json.dumps({'i': i, 'msg': msg}))")
    assert words(out["i"]["intra_op"]) == {"count": 3, "source": "profile latency"}
    assert out["i"]["inter_op"]["count"] == 1
    assert out["i"]["inter_op"]["source"]["text"] == "profile latency"
    assert MSG in out["msg"]


def test_explicit_call_takes_precedence_over_a_later_profile():
    out = run_json(
        "import json, parinfo.runtime as rt\n"
        "rt.set_num_threads(3)\n"
        "rt.configure(intra_op=1, source='profile latency')\n"
        "print(json.dumps(rt.info()['intra_op']))")
    assert out["count"] == 3 and out["source"]["text"] == "explicit call"
    assert "profile latency asked 1" in out["not_applied"][0]


def test_set_num_threads_changes_the_process_wide_count_from_any_thread():
    out = run_json(
        "import json, threading, parinfo.runtime as rt\n"
        "t = threading.Thread(target=rt.set_num_threads, args=(5,)); t.start(); t.join()\n"
        "seen = []\n"
        "rt.parallel_for(0, 1000, 1, lambda a, b: seen.append((a, b)))\n"
        "print(json.dumps({'main': rt.get_num_threads(), 'chunks': len(seen)}))")
    assert out == {"main": 5, "chunks": 5}


@pytest.mark.parametrize("bad,exc,word", [
    (0, ValueError, "0"), (-1, ValueError, "-1"), (True, TypeError, "bool"),
    (2.0, TypeError, "float"), ("2", TypeError, "str"), (None, TypeError, "NoneType"),
])
@pytest.mark.parametrize("fn", ["set_num_threads", "set_num_interop_threads"])
def test_bad_values_are_refused_naming_the_value(fn, bad, exc, word):
    import parinfo.runtime as rt

    before = rt.info()
    with pytest.raises(exc) as info:
        getattr(rt, fn)(bad)
    assert word in str(info.value) and fn in str(info.value)
    after = rt.info()
    assert after["intra_op"] == before["intra_op"]
    assert after["inter_op"]["locked"] == before["inter_op"]["locked"]


def test_configure_checks_both_values_before_applying_either():
    out = run_json(
        "import json, parinfo.runtime as rt\n"
        "try:\n    rt.configure(intra_op=3, inter_op=0, source='profile x')\nexcept ValueError as e:\n    m = str(e)\n"
        "print(json.dumps({'m': m, 'i': rt.info()}))")
    assert "0" in out["m"]
    assert out["i"]["intra_op"]["source"]["text"].startswith("default")
    assert out["i"]["inter_op"]["locked"] is False


def test_counts_above_usable_cpus_are_allowed():
    out = run_json("import json, parinfo.runtime as rt\nrt.set_num_threads(1000)\n"
                   "print(json.dumps(rt.get_num_threads()))")
    assert out == 1000


PROBE = ("import json, parinfo.runtime as rt\n"
         "i = rt.info(); print(json.dumps({'intra': i['intra_op'], 'inter': i['inter_op']}))")


@pytest.mark.parametrize("env,count,source", [
    ({}, None, "default: usable physical cores"),
    ({"OMP_NUM_THREADS": "3"}, 3, "env OMP_NUM_THREADS"),
    ({"OMP_NUM_THREADS": "3,1"}, 3, "env OMP_NUM_THREADS"),
    ({"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "4"}, 4, "env MKL_NUM_THREADS"),
    ({"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "4", "PARINFO_NUM_THREADS": "5"}, 5,
     "env PARINFO_NUM_THREADS"),
    ({"PARINFO_NUM_THREADS": "5", "PARINFO_PROFILE": "latency"}, 5,
     "profile latency (PARINFO_NUM_THREADS)"),
    ({"MKL_NUM_THREADS": "abc", "OMP_NUM_THREADS": "3"}, 3,
     "env OMP_NUM_THREADS (ignored invalid MKL_NUM_THREADS='abc')"),
    ({"OMP_NUM_THREADS": "0"}, None,
     "default: usable physical cores (ignored invalid OMP_NUM_THREADS='0')"),
])
def test_intra_op_provenance_under_variables(env, count, source):
    out = run_json(PROBE, env=clean_env(**env))
    assert words(out["intra"]) == {"count": count or _usable()[0], "source": source}


def test_inter_op_provenance_under_variables():
    out = run_json(PROBE, env=clean_env(PARINFO_NUM_INTEROP_THREADS="3", OMP_NUM_THREADS="7"))
    assert out["inter"]["count"] == 3 and out["inter"]["source"]["text"] == "env PARINFO_NUM_INTEROP_THREADS"
    out = run_json(PROBE, env=clean_env(PARINFO_NUM_INTEROP_THREADS="3", PARINFO_PROFILE="batch"))
    assert out["inter"]["source"]["text"] == "profile batch (PARINFO_NUM_INTEROP_THREADS)"
    out = run_json(PROBE, env=clean_env(PARINFO_NUM_INTEROP_THREADS="x"))
    assert out["inter"]["count"] == _usable()[1]
    assert out["inter"]["source"]["text"] == "default: usable CPUs (ignored invalid PARINFO_NUM_INTEROP_THREADS='x')"


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset is not installed")
def test_both_defaults_follow_affinity_under_taskset():
    out = run_json(PROBE, prefix=["taskset", "-c", "0"])
    assert words(out["intra"]) == {"count": 1, "source": "default: usable physical cores"}
    assert words(out["inter"]) == {"count": 1, "source": "default: usable CPUs", "locked": False}
    # an explicit variable still wins over the affinity
    out = run_json(PROBE, prefix=["taskset", "-c", "0"], env=clean_env(OMP_NUM_THREADS="2"))
    assert words(out["intra"]) == {"count": 2, "source": "env OMP_NUM_THREADS"}


def test_explicit_call_beats_variables():
    out = run_json("import json, parinfo.runtime as rt\nrt.set_num_threads(2)\n"
                   "print(json.dumps(rt.info()['intra_op']))",
                   env=clean_env(PARINFO_NUM_THREADS="4", MKL_NUM_THREADS="3"))
    assert words(out) == {"count": 2, "source": "explicit call"}


@pytest.mark.parametrize("value,backend,source", [
    (None, "native", "default"),
    ("sequential", "sequential", "env PARINFO_BACKEND"),
    ("native", "native", "env PARINFO_BACKEND"),
    ("tbb", "native", "default (ignored invalid PARINFO_BACKEND='tbb')"),
])
def test_backend_is_chosen_from_the_environment(value, backend, source):
    env = clean_env() if value is None else clean_env(PARINFO_BACKEND=value)
    out = run_json("import json, parinfo.runtime as rt\ni = rt.info()\n"
                   "print(json.dumps([i['backend'], i['backend_source']]))", env=env)
    assert words(out) == [backend, source]


def test_info_is_json_and_starts_no_pool_nor_imports_torch():
    out = run_json(
        "import json, sys, threading, parinfo.runtime as rt\n"
        "n = threading.active_count(); i = rt.info(); rt.get_num_threads(); rt.get_num_interop_threads()\n"
        "print(json.dumps({'i': i, 'threads': threading.active_count() - n,"
        " 'torch': 'torch' in sys.modules}))")
    i = out["i"]
    assert out["threads"] == 0 and out["torch"] is False
    assert i["intra_pool_started"] is False and i["inter_pool_started"] is False
    assert i["pool_threads"] == 0 and i["native_push"] is None
    json.dumps(i)


def test_info_counts_the_pool_threads_parinfo_created():
    out = run_json(
        "import json, threading, parinfo.runtime as rt\n"
        "rt.set_num_threads(3)\n"
        "rt.parallel_for(0, 30, 1, lambda a, b: None)\n"
        "rt.wait(rt.fork(int))\n"
        "one = rt.info()['pool_threads']\n"
        "gate = threading.Event()\n"
        "fs = [rt.fork(gate.wait, 10) for _ in range(2)]\n"
        "two = rt.info()['pool_threads']\n"
        "gate.set(); [rt.wait(f) for f in fs]\n"
        "print(json.dumps({**rt.info(), 'one': one, 'two': two}))",
        env=clean_env(PARINFO_NUM_INTEROP_THREADS="2"))
    assert out["intra_pool_started"] and out["inter_pool_started"]
    # inter-op workers start as tasks in flight need them, up to the count
    assert out["one"] == 2 + 1
    assert out["two"] == out["pool_threads"] == 2 + 2


def test_importing_and_reading_the_runtime_changes_no_environment_variable():
    out = run_json(
        "import json, os\n"
        "before = dict(os.environ)\n"
        "import parinfo.runtime as rt\n"
        "rt.info(); rt.get_num_threads(); rt.get_num_interop_threads()\n"
        "rt.parallel_for(0, 100, 1, lambda a, b: None); rt.wait(rt.fork(int))\n"
        "print(json.dumps(sorted(set(os.environ.items()) ^ set(before.items()))))")
    assert out == []


@pytest.mark.parametrize("env", [
    {"OMP_NUM_THREADS": "1000"},
    {"PARINFO_NUM_THREADS": "99999999999999999999"},
    {"PARINFO_NUM_INTEROP_THREADS": "50000"},
    {"PARINFO_NUM_INTEROP_THREADS": "99999999999999999999", "OMP_NUM_THREADS": "100000"},
])
def test_huge_counts_start_only_the_threads_the_work_needs_and_never_pass_the_ceiling(env):
    out = run_json(
        "import json, os, threading, time, parinfo.runtime as rt\n"
        "def names(p):\n"
        "    return sum(t.name.startswith(p) for t in threading.enumerate())\n"
        "t0 = time.monotonic()\n"
        "rt.parallel_for(0, 2, 1, lambda a, b: None)\n"
        "small_intra = names('parinfo-intra')\n"
        "rt.wait(rt.fork(int))\n"
        "small_inter = names('parinfo-interop')\n"
        "rt.parallel_for(0, 10**6, 1, lambda a, b: None)\n"
        "gate = threading.Event()\n"
        "fs = [rt.fork(gate.wait, 10) for _ in range(500)]\n"
        "big = [names('parinfo-intra'), names('parinfo-interop')]\n"
        "gate.set(); [rt.wait(f) for f in fs]\n"
        "print(json.dumps({'small': [small_intra, small_inter], 'big': big, 'info': rt.info(),"
        " 'cpus': os.cpu_count(), 'secs': time.monotonic() - t0}))",
        env=clean_env(**env), timeout=60)
    ceiling = 4 * out["cpus"]
    assert out["info"]["pool_ceiling"] == ceiling
    assert out["small"] == [1, 1]  # a 2-chunk loop and one task: one worker each
    assert out["big"][0] <= ceiling - 1 and out["big"][1] <= ceiling
    assert out["secs"] < 30
    for key in ("intra_op", "inter_op"):
        count = out["info"][key]["count"]
        assert out["info"][key].get("capped_to") == (ceiling if count > ceiling else None)
