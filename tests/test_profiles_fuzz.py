"""Random documents and random bytes given to the loader and resolver: only ProfileError escapes."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st
from profile_machines import MACHINES

from parinfo.errors import ProfileError
from parinfo.profiles.loading import LIBRARIES, TOP_KEYS, resolve_profile
from parinfo.profiles.plan import Plan

_DIR = Path(tempfile.mkdtemp(prefix="parinfo-fuzz-"))
_OWNER = os.getpid()


def _cleanup() -> None:
    if os.getpid() == _OWNER:  # not in children that other tests os.fork() from this process
        shutil.rmtree(_DIR, ignore_errors=True)


atexit.register(_cleanup)
FACTS = [MACHINES["1cpu"], MACHINES["2numa_x28"], MACHINES["affinity_subset"]]
SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _resolve_file(data: bytes) -> None:
    path = _DIR / "fuzz.yaml"
    path.write_bytes(data)
    for facts in FACTS:
        try:
            plan = resolve_profile(path, facts)
        except ProfileError as exc:
            assert str(exc) and "\n" not in exc.message
            return
        assert isinstance(plan, Plan)
        assert plan.intra_op.value >= 1 and plan.inter_op.value >= 1


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False),
                    st.text(max_size=20))
plain = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)), max_leaves=12)

tokens = st.sampled_from(["usable_cpus", "physical_cores", "numa_nodes", "cores_per_instance", "instances",
                          "min", "max", "(", ")", ",", "+", "-", "*", "//", "/", "0", "1", "2", "64", "4096",
                          "x", " "])
expressions = st.lists(tokens, max_size=12).map(" ".join)
counts = st.one_of(st.integers(-5, 5000), expressions, scalars)
affinity = st.one_of(st.sampled_from(["none", "compact", "spread", "0-3", "0,1,100", "3-1", ""]),
                     st.lists(st.one_of(st.integers(-2, 200), st.text(max_size=5)), max_size=4), scalars)
node_lists = st.one_of(st.sampled_from(["0", "0-1", "1-0", "0,7", ""]),
                       st.lists(st.one_of(st.integers(-2, 9), st.text(max_size=3)), max_size=3))
instances = st.one_of(counts, st.dictionaries(
    st.sampled_from(["count", "per_numa_node", "cores_per_instance", "cpi", "cpus", "cross_numa", "nodes"]),
    st.one_of(counts, st.booleans(), st.sampled_from(["physical_cores", "logical_cpus", "smt"]), node_lists),
    max_size=4))
env = st.dictionaries(st.sampled_from(["OMP_WAIT_POLICY", "OMP_NUM_THREADS", "KMP_BLOCKTIME", "MKL_DYNAMIC",
                                       "OMP_PROC_BIND", "NOT_A_VAR", "OMP_PLACES"]),
                      st.one_of(st.sampled_from(["passive", "active", "TRUE", "0", "close", "", "x"]), scalars),
                      max_size=3)
OPTIONAL = {
    "name": scalars, "description": scalars, "intra_op": counts, "inter_op": counts,
    "libraries": st.one_of(st.dictionaries(st.sampled_from([*LIBRARIES, "openblas"]), counts, max_size=3), scalars),
    "env": st.one_of(env, scalars), "affinity": affinity, "instances": instances,
    "extends": st.sampled_from(["latency", "nope", "./fuzz.yaml", "/", "../x.yaml"]),
    "quota_rounding": st.one_of(st.sampled_from(["floor", "ceil", "nearest", "Ceil", "round"]), scalars),
    "allocator": st.one_of(st.sampled_from(["jemalloc", "tcmalloc", "auto", "default", "glibc", "JEMALLOC"]), scalars,
                           st.dictionaries(st.sampled_from(["name", "conf", "nme"]),
                                           st.one_of(st.sampled_from(["jemalloc", "tcmalloc", "auto",
                                                                      "background_thread:true", "a b"]), scalars),
                                           max_size=3)),
    "openmp": st.one_of(st.sampled_from(["intel", "gnu", "llvm", "default", "iomp", "Intel"]), scalars),
    "memory": st.one_of(st.sampled_from(["local", "interleave", "none", "bind", "Local"]), scalars),
    "threads": st.one_of(st.sampled_from(["caller", "every", "all", "Every", "4"]), scalars),
    "wait_policy": st.one_of(st.sampled_from(["passive", "active", "default", "Passive", "spin"]), scalars),
    "workers": scalars,  # not a key of the language
}
profiles = st.fixed_dictionaries({"version": st.one_of(st.just(1), scalars)}, optional=OPTIONAL)


@SETTINGS
@given(profiles)
def test_profile_shaped_documents(doc):
    _resolve_file(yaml.safe_dump(doc).encode())


@SETTINGS
@given(plain)
def test_any_yaml_document(doc):
    _resolve_file(yaml.safe_dump(doc).encode())


@SETTINGS
@given(st.text(max_size=300))
def test_any_text(text):
    _resolve_file(text.encode("utf-8", "surrogatepass"))


@SETTINGS
@given(st.binary(max_size=300))
def test_any_bytes(data):
    _resolve_file(data)


@SETTINGS
@given(st.lists(st.sampled_from(["version: 1\n", "intra_op: ", "&a ", "*a ", "[", "]", "{", "}", ": ", "- ",
                                 "\n  ", "!!str ", "!!python/name:os.system ", "<<: ", "usable_cpus", "'", '"',
                                 "---\n", "%YAML 1.1\n", "? ", "|\n  ", "\t", "# c\n", "0x1F", "1e3"]),
               max_size=30).map("".join))
def test_yaml_syntax_soup(text):
    _resolve_file(text.encode())


def test_every_key_of_the_language_is_fuzzed():
    assert set(TOP_KEYS) == {"version", *OPTIONAL} - {"workers"}
