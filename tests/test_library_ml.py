"""TensorFlow and JAX (parinfo/process/library_ml.py): in real processes with the real wheels, each
count parinfo.inspect() gives equals the pools the library starts at its first op (TensorFlow's
intra-op threads and its tf_Compute inter-op threads, XLA's tf_XLAEigen threads), with and without
their variables, with a 1-CPU affinity and in a 0.5-CPU quota; parinfo's read starts no thread and
no runtime; and the family rules on fake facts."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import clean_env
from profile_machines import machine

from parinfo.process import libraries as reg
from parinfo.process.defaults import NO_FACTS
from parinfo.process.library_ml import Jax, TensorFlow, cpu_devices, signed_int32
from parinfo.process.library_parts import Does, Takes
from parinfo.process.provenance import model_of, pool_model, predict
from parinfo.records.source import Kind

# parinfo reads first (it must start no thread and leave the runtime unstarted), then the first op
# starts the pools: TensorFlow's intra-op pool adds that many unnamed threads ("python"), its
# inter-op pool that many "tf_Compute"; XLA's Eigen pool that many "tf_XLAEigen". SET (intra,inter)
# calls TensorFlow's setters before the first op.
_PROBE = r'''
import collections, json, os, sys
def names():
    c = collections.Counter()
    for t in os.listdir("/proc/self/task"):
        try:
            c[open(f"/proc/self/task/{t}/comm").read().strip()] += 1
        except OSError:
            pass
    return c
WHICH, SET = sys.argv[1], sys.argv[2:]
if WHICH == "tensorflow":
    import tensorflow as tf
    from tensorflow.python.eager import context
    if SET:
        tf.config.threading.set_intra_op_parallelism_threads(int(SET[0]))
        tf.config.threading.set_inter_op_parallelism_threads(int(SET[1]))
    def started(): return bool(getattr(context._context, "_initialized", False))
    def first_op(): tf.constant(1.0) + 1
else:
    import jax, jax.numpy as jnp
    from jax._src import xla_bridge
    def started(): return bool(xla_bridge._backends)
    def first_op(): (jnp.ones(4) + 1).block_until_ready()
import parinfo
def said():
    return {s.library: [s.count, s.source.kind.value] for s in parinfo.inspect().settings
            if s.library.split()[0] == WHICH}
before = names()
early = said()
out = {"early": early, "started_by_read": sum(names().values()) - sum(before.values()),
       "runtime_started": started()}
first_op()
after = names()
out["did"] = {"tensorflow": after["python"] - before["python"], "tensorflow inter-op": after["tf_Compute"],
              "jax": after["tf_XLAEigen"]}
os.environ["TF_NUM_INTEROP_THREADS"] = os.environ["NPROC"] = "7"  # too late: a started pool keeps its size
out["late"] = said()
print(json.dumps(out))
'''


def _probe(which: str, env: dict[str, str], prefix: list[str] | None = None, *setters: int) -> dict:
    cmd = [*(prefix or []), sys.executable, "-c", _PROBE, which, *map(str, setters)]
    proc = subprocess.run(cmd, env=clean_env(TF_CPP_MIN_LOG_LEVEL="3", **env), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check(out: dict, rows: tuple[str, ...]) -> dict[str, list]:
    """parinfo's read started nothing; the counts it gave before the first op are the pools that op
    started; after it, the pools it counts by their threads keep those counts, whatever the variables
    say now (TensorFlow's intra-op threads carry no name: its row stays what the variables give)."""
    assert out["started_by_read"] == 0 and not out["runtime_started"], out
    for row in rows:
        assert out["early"][row][0] == out["did"][row], (row, out)
        if row != "tensorflow":
            assert out["late"][row][0] == out["did"][row], (row, out)
    return out["early"]


_TF = ("tensorflow", "tensorflow inter-op")
_IN_QUOTA = ["sh", "-c", 'echo $$ > "$0" && exec "$@"']


@pytest.mark.pools("tensorflow")
def test_tensorflow_counts_equal_the_pools_its_first_op_starts():
    said = _check(_probe("tensorflow", {}), _TF)
    assert said["tensorflow"] == [len(os.sched_getaffinity(0)), "library default"]
    said = _check(_probe("tensorflow", {"TF_NUM_INTRAOP_THREADS": "3", "TF_NUM_INTEROP_THREADS": " +4 "}), _TF)
    assert said == {"tensorflow": [3, "variable"], "tensorflow inter-op": [4, "variable"]}
    # values it skips: the default; a setter called before the first op wins over the variables
    said = _check(_probe("tensorflow", {"TF_NUM_INTRAOP_THREADS": "3x", "TF_NUM_INTEROP_THREADS": "-1"}), _TF)
    assert [said[r][1] for r in _TF] == ["library default", "library default"]
    out = _probe("tensorflow", {"TF_NUM_INTRAOP_THREADS": "2"}, None, 1, 3)
    assert _check(out, _TF) == {"tensorflow": [1, "run-time call"], "tensorflow inter-op": [3, "run-time call"]}


@pytest.mark.pools("tensorflow")
def test_tensorflow_follows_affinity_not_the_quota(quota_cgroup):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs to tell a 1-CPU affinity apart")
    pinned = _check(_probe("tensorflow", {}, ["taskset", "-c", "0"]), _TF)
    assert pinned["tensorflow"][0] == pinned["tensorflow inter-op"][0] == 1
    quota = _check(_probe("tensorflow", {}, [*_IN_QUOTA, os.path.join(quota_cgroup, "cgroup.procs")]), _TF)
    assert quota["tensorflow"][0] == quota["tensorflow inter-op"][0] == len(os.sched_getaffinity(0))


@pytest.mark.pools("jax")
def test_jax_count_equals_the_eigen_pool_its_first_op_starts():
    cpus = len(os.sched_getaffinity(0))
    assert _check(_probe("jax", {}), ("jax",))["jax"] == [cpus, "library default"]
    assert _check(_probe("jax", {"NPROC": " 3"}), ("jax",))["jax"] == [3, "variable"]
    assert _check(_probe("jax", {"NPROC": "0"}), ("jax",))["jax"] == [1, "variable"]
    assert _check(_probe("jax", {"NPROC": "3x"}), ("jax",))["jax"] == [cpus, "library default"]
    # never fewer threads than CPU devices, whichever variable makes them
    forced = {"XLA_FLAGS": "--xla_force_host_platform_device_count=3", "NPROC": "1"}
    assert _check(_probe("jax", forced), ("jax",))["jax"] == [3, "variable"]
    assert _check(_probe("jax", {"JAX_NUM_CPU_DEVICES": "3"}), ("jax",))["jax"][0] == 3


@pytest.mark.pools("jax")
def test_jax_follows_affinity_not_the_quota(quota_cgroup):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs to tell a 1-CPU affinity apart")
    assert _check(_probe("jax", {}, ["taskset", "-c", "0"]), ("jax",))["jax"][0] == 1
    quota = _check(_probe("jax", {}, [*_IN_QUOTA, os.path.join(quota_cgroup, "cgroup.procs")]), ("jax",))
    assert quota["jax"][0] == len(os.sched_getaffinity(0))


@pytest.mark.pools("tensorflow", "jax")
def test_apply_container_in_a_half_cpu_quota_gives_each_pool_one_thread(quota_cgroup):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs, so that the quota is below what the libraries see")
    enter = [*_IN_QUOTA, os.path.join(quota_cgroup, "cgroup.procs")]
    launch = [sys.executable, "-m", "parinfo", "apply", "container", "--"]
    for which, rows in (("tensorflow", _TF), ("jax", ("jax",))):
        out = _probe(which, {}, [*enter, *launch])
        assert {row: out["did"][row] for row in rows} == dict.fromkeys(rows, 1), out
        assert all(out["early"][row] == [1, "variable"] for row in rows), out


# parinfo.apply() in a process that imported both before their first op: the variables reach them.
_APPLY = r'''
import collections, json, os
import tensorflow as tf, jax.numpy as jnp
import parinfo
result = parinfo.apply("single-thread")
how = {s.library: [str(s.where), s.when] for s in result.applied if s.library in ("tensorflow", "jax")}
tf.constant(1.0) + 1
(jnp.ones(4) + 1).block_until_ready()
c = collections.Counter(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
print(json.dumps({"how": how, "inter": c["tf_Compute"], "eigen": c["tf_XLAEigen"],
                  "said": {s.library: s.count for s in parinfo.inspect().settings}}))
'''


@pytest.mark.pools("tensorflow", "jax")
def test_apply_in_process_reaches_both_before_their_first_op():
    proc = subprocess.run([sys.executable, "-c", _APPLY], env=clean_env(TF_CPP_MIN_LOG_LEVEL="3"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["inter"] == out["eigen"] == 1, out
    assert out["said"]["tensorflow"] == out["said"]["tensorflow inter-op"] == out["said"]["jax"] == 1
    assert {lib: how[1] for lib, how in out["how"].items()} == {
        "tensorflow": "when its first op starts the eager context", "jax": "when its first op starts the CPU backend"}


# -- the family rules on fake facts ------------------------------------------------------------------
def test_tensorflow_default_is_the_cpus_in_affinity_whatever_the_quota():
    lib = TensorFlow()
    assert lib.default(machine(8, affinity=[0, 1, 2], quota=0.5), NO_FACTS)[0] == 3
    assert lib.pool_default("inter-op", machine(4, quota=1.0), NO_FACTS)[0] == 4
    env = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "5", "OMP_NUM_THREADS": "7"}
    inter = pool_model(lib, lib.pool("inter-op"))
    assert (predict(model_of(lib), env, machine(2)).count, predict(inter, env, machine(2)).count) == (1, 5)
    assert predict(model_of(lib), {"OMP_NUM_THREADS": "1"}, machine(2)).count == 2  # not its variable


def test_tensorflow_parses_as_safe_strto32_and_aborts_on_a_negative_intra_op_count():
    lib = TensorFlow()
    assert [signed_int32(v) for v in (" 3", "+3 ", "-2", "007", "3x", "1.5", "", str(2**31))] == [
        3, 3, -2, 7, None, None, None, None]
    intra, inter = "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"
    assert lib.reading(intra, " 3") == lib.reading(inter, "+3") == lib.reading(intra, "3")
    assert lib.reading(intra, "0").does is lib.reading(inter, "0").does is Does.DEFAULT
    assert lib.reading(intra, "-1").does is Does.RAISES and lib.reading(inter, "-1").does is Does.IGNORES
    assert lib.reading(intra, "3x").does is Does.IGNORES
    count, source = lib.imposed({intra: "-1"}) or (0, None)
    assert count is None and source is not None and source.kind is Kind.UNKNOWN
    assert lib.imposed({intra: "0"}) is None and lib.imposed({intra: "-1"}, "inter-op") is None


def test_jax_default_is_the_cpus_in_affinity_at_least_its_devices():
    lib = Jax()
    assert lib.default(machine(8, affinity=[0, 1], quota=0.5), NO_FACTS)[0] == 2
    ctx = lib.context(None, {"XLA_FLAGS": "--xla_dump_to=/tmp --xla_force_host_platform_device_count=6"})
    assert lib.default(machine(4), ctx)[0] == 6 and lib.default(machine(8), ctx)[0] == 8
    assert cpu_devices(None, {"JAX_NUM_CPU_DEVICES": "3",
                              "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})[0] == 3
    assert cpu_devices(None, {"JAX_NUM_CPU_DEVICES": "-1"}) == (1, "")
    assert cpu_devices(SimpleNamespace(config=SimpleNamespace(jax_num_cpu_devices=5)), {})[0] == 5
    forced = {"NPROC": "1", "XLA_FLAGS": "--xla_force_host_platform_device_count=3"}
    assert predict(model_of(lib), forced, machine(2)).count == 3
    assert lib.imposed(forced) is not None and lib.imposed({"NPROC": "4", **{"XLA_FLAGS": forced["XLA_FLAGS"]}}) is None
    assert [predict(model_of(lib), {"NPROC": v}, machine(2)).count for v in ("0", "-3", " +3", "3x")] == [1, 1, 3, 2]


def test_jax_num_cpu_devices_is_read_by_python_int_at_import():
    lib = Jax()
    assert lib.reading("JAX_NUM_CPU_DEVICES", "abc").does is Does.RAISES
    assert lib.reading("JAX_NUM_CPU_DEVICES", "0").does is Does.RAISES
    assert lib.reading("JAX_NUM_CPU_DEVICES", "-1").does is Does.DEFAULT
    assert lib.reading("JAX_NUM_CPU_DEVICES", " 3").count == 3
    assert lib.reading("XLA_FLAGS", "--anything") is None


def test_their_variables_are_listed_only_while_their_module_is_loaded():
    for var, module in (("TF_NUM_INTRAOP_THREADS", "tensorflow"), ("TF_NUM_INTEROP_THREADS", "tensorflow"),
                        ("JAX_NUM_CPU_DEVICES", "jax"), ("XLA_FLAGS", "jax")):
        assert not reg.listed_unset(var, modules=()) and reg.listed_unset(var, modules={module})
    assert not reg.listed_unset("NPROC", modules={"jax"})  # a generic name: listed only when set
    assert reg.THREAD_VARS["NPROC"].readers == ("jax",)
    assert reg.POOL_VARS["TF_NUM_INTEROP_THREADS"] == "inter_op"
    assert reg.LIBRARY_VARS["tensorflow"] == ("TF_NUM_INTRAOP_THREADS",) and reg.LIBRARY_VARS["jax"] == ("NPROC",)


def test_uptake_before_and_after_the_runtime_starts(monkeypatch):
    tf, jax = TensorFlow(), Jax()
    eager = SimpleNamespace(_context=None)
    monkeypatch.setitem(sys.modules, "tensorflow.python.eager.context", eager)
    module = SimpleNamespace(config=SimpleNamespace(threading=SimpleNamespace(
        get_intra_op_parallelism_threads=lambda: 0, get_inter_op_parallelism_threads=lambda: 0)))
    assert tf.uptake(module, 2).takes is Takes.AT_USE and tf.read_count(module) is None
    eager._context = SimpleNamespace(_initialized=False)
    module.config.threading.get_intra_op_parallelism_threads = lambda: 3
    assert tf.read_count(module) == 3 and tf.uptake(module, 2).takes is Takes.CODE
    eager._context._initialized = True
    assert tf.uptake(module, 2).takes is Takes.STARTED and "set_intra_op_parallelism_threads(2)" in tf.uptake(
        module, 2).code
    bridge = SimpleNamespace(_backends={})
    monkeypatch.setitem(sys.modules, "jax._src.xla_bridge", bridge)
    assert jax.uptake(None, 2).takes is Takes.AT_USE and jax.read_count(None) is None
    bridge._backends = {"cpu": object()}
    assert jax.uptake(None, 2).takes is Takes.STARTED


_TARGET = r'''
import sys
import tensorflow as tf, jax.numpy as jnp
tf.constant(1.0) + 1
(jnp.ones(4) + 1).block_until_ready()
print("ready", flush=True)
sys.stdin.read()
'''


@pytest.mark.pools("tensorflow", "jax")
def test_from_outside_each_is_a_predicted_row_and_owns_its_threads():
    target = subprocess.Popen([sys.executable, "-c", _TARGET], env=clean_env(TF_CPP_MIN_LOG_LEVEL="3",
                              TF_NUM_INTEROP_THREADS="3"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        shown = subprocess.run([sys.executable, "-m", "parinfo", "show", "--pid", str(target.pid), "--json"],
                               capture_output=True, text=True, timeout=120)
    finally:
        target.communicate("", timeout=60)
    assert shown.returncode == 0, shown.stderr[-2000:]
    report = json.loads(shown.stdout)
    rows = {s["library"]: s for s in report["settings"] if s.get("owner") in ("tensorflow", "jax")}
    assert set(rows) == {"tensorflow", "tensorflow inter-op", "jax"}
    assert all(row["count"] is None and row["source"]["text"].startswith("unknown (") for row in rows.values())
    assert "would be 3 by env TF_NUM_INTEROP_THREADS=3" in rows["tensorflow inter-op"]["source"]["text"]
    owners = {(t["name"], t.get("owner")) for t in report["threads"]["threads"]}
    assert {("tf_Compute", "tensorflow"), ("tf_XLAEigen", "jax")} <= owners, owners


def test_their_files_name_their_owner():
    from parinfo.process.stack_words import owner_of_file

    assert owner_of_file("/v/lib/python3.11/site-packages/jaxlib/_jax.so") == "jax"
    assert owner_of_file("/v/lib/python3.11/site-packages/tensorflow/libtensorflow_framework.so.2") == "tensorflow"
