"""Every shipped profile loads by name and resolves on very different machines, as its comments say."""
from __future__ import annotations

import pytest
from profile_machines import MACHINES

from parinfo.profiles.loading import list_profiles, load_profile, resolve_profile, shipped_names
from parinfo.records.convert import dump

SHIPPED = ["balanced", "container", "latency", "multi-instance", "single-thread", "throughput"]


def test_the_six_profiles_are_shipped_with_descriptions():
    assert shipped_names() == SHIPPED
    items = list_profiles()
    assert [i["name"] for i in items] == SHIPPED
    assert all(len(i["description"]) > 20 for i in items)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profiles_teach_with_comments(name):
    from parinfo.profiles.loading import shipped_path

    text = shipped_path(name).read_text()
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    assert len(comments) >= 3
    assert load_profile(name).name == name


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_resolves_everywhere(name, machine):
    facts = MACHINES[machine]
    plan = resolve_profile(name, facts)
    counts = [plan.intra_op.value, plan.inter_op.value, *(s.value for s in plan.libraries.values())]
    assert all(isinstance(c, int) and c >= 1 for c in counts)
    assert plan.intra_op.value <= facts.usable_cpus
    assert plan.env["PARINFO_NUM_THREADS"] == str(plan.intra_op.value)
    allowed = set(facts.usable_cpu_list)
    seen: set[int] = set()
    for inst in plan.instances:
        assert set(inst.cpus) <= allowed
        assert not seen & set(inst.cpus), "instances share no CPU"
        seen |= set(inst.cpus)
        assert 1 <= inst.intra_op <= len(inst.cpus)
    if plan.affinity is not None:
        assert set(plan.affinity) <= allowed
    assert dump(plan)["name"] == name


@pytest.mark.parametrize("machine, intra", [("1cpu", 1), ("2cpus", 2), ("16cores_smt", 16), ("2numa_x28", 56),
                                            ("quota_0.5", 1), ("affinity_subset", 4)])
def test_latency_uses_every_usable_physical_core(machine, intra):
    plan = resolve_profile("latency", MACHINES[machine])
    assert (plan.intra_op.value, plan.inter_op.value) == (intra, 1)
    assert plan.libraries["blas"].value == intra
    assert plan.intra_op.why == f"usable_physical_cores = {intra}"


@pytest.mark.parametrize("machine, inter", [("1cpu", 1), ("16cores_smt", 32), ("quota_0.5", 1),
                                            ("affinity_subset", 6)])
def test_throughput_runs_one_op_per_usable_cpu(machine, inter):
    plan = resolve_profile("throughput", MACHINES[machine])
    assert (plan.intra_op.value, plan.inter_op.value) == (1, inter)


def test_balanced_keeps_both_pools_within_the_cores():
    for facts in MACHINES.values():
        plan = resolve_profile("balanced", facts)
        assert plan.intra_op.value * plan.inter_op.value <= max(2, facts.usable_physical_cores)
    plan = resolve_profile("balanced", MACHINES["2numa_x28"])
    assert plan.intra_op.why == "max(1, usable_physical_cores // 2) = max(1, 56 // 2) = 28"
    assert not plan.notes


def test_multi_instance_gives_one_instance_per_numa_node():
    facts = MACHINES["2numa_x28"]
    plan = resolve_profile("multi-instance", facts)
    assert len(plan.instances) == 2
    for inst, node in zip(plan.instances, facts.numa_nodes, strict=False):
        assert len(inst.cpus) == 28 and set(inst.cpus) <= set(node)
        assert inst.intra_op == 28 and inst.inter_op == 1
        assert inst.env["OMP_NUM_THREADS"] == "28"


def test_multi_instance_with_instances_override_splits_nodes_evenly():
    facts = MACHINES["2numa_x28"]
    plan = resolve_profile("multi-instance", facts, instances=4)
    assert [len(i.cpus) for i in plan.instances] == [14, 14, 14, 14]
    nodes = [{n for n, cpus in enumerate(facts.numa_nodes) if set(i.cpus) <= set(cpus)} for i in plan.instances]
    assert all(len(n) == 1 for n in nodes), "no instance spans NUMA nodes"
    assert sorted(n.pop() for n in nodes) == [0, 0, 1, 1]


def test_multi_instance_under_a_quota_runs_one_instance_on_one_cpu():
    plan = resolve_profile("multi-instance", MACHINES["quota_0.5"])
    assert len(plan.instances) == 1 and len(plan.instances[0].cpus) == 1


def test_multi_instance_stays_inside_the_affinity():
    facts = MACHINES["affinity_subset"]
    plan = resolve_profile("multi-instance", facts, instances=3)
    assert sorted(c for i in plan.instances for c in i.cpus) == [0, 1, 2]


def test_container_follows_the_quota_and_sleeps_idle_threads():
    plan = resolve_profile("container", MACHINES["quota_0.5"])
    assert plan.intra_op.value == 1
    assert plan.env["OMP_WAIT_POLICY"] == "passive" and plan.env["OPENBLAS_THREAD_TIMEOUT"] == "4"
    assert plan.env_why["OMP_WAIT_POLICY"] == "wait_policy: passive"


def test_single_thread_sets_every_library_to_one():
    plan = resolve_profile("single-thread", MACHINES["2numa_x28"])
    assert {k: s.value for k, s in plan.libraries.items()} == dict.fromkeys(
        ["blas", "openmp", "mkl", "torch", "numexpr", "numba", "polars", "duckdb", "onnxruntime", "tokenizers",
         "opencv", "tensorflow", "jax"], 1)
    assert {plan.env[v] for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                  "BLIS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "NUMBA_NUM_THREADS",
                                  "POLARS_MAX_THREADS", "ORT_INTRA_OP_NUM_THREADS", "ORT_INTER_OP_NUM_THREADS",
                                  "RAYON_NUM_THREADS", "OPENCV_FOR_THREADS_NUM", "TF_NUM_INTRAOP_THREADS",
                                  "TF_NUM_INTEROP_THREADS", "NPROC")} == {"1"}
