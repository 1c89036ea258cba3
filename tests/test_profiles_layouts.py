"""Instance layouts on fake sysfs trees: logical CPUs or physical cores, NUMA nodes never crossed unless
asked, node lists, and each instance's memory nodes; layouts that do not fit are one line at file:line."""
from __future__ import annotations

import textwrap

import pytest
from conftest import clean_env, run_cli
from fake_trees import FakeMachine

from parinfo.errors import ProfileError
from parinfo.machine.topology import machine_facts
from parinfo.profiles.loading import resolve_profile


@pytest.fixture
def write(tmp_path):
    def _write(text: str) -> str:
        path = tmp_path / "p.yaml"
        path.write_text("version: 1\n" + textwrap.dedent(text))
        return str(path)
    return _write


def facts(tmp_path, n: int, *, smt: int = 1, numa: int = 1):
    """``n`` logical CPUs (cores first, then their second threads) on ``numa`` nodes, read from sysfs."""
    return machine_facts(FakeMachine(tmp_path).cpus(n, smt=smt, numa=numa).build())


def cpus(plan) -> list[tuple[int, ...]]:
    return [i.cpus for i in plan.instances]


def test_physical_cores_pin_one_cpu_per_core_and_logical_cpus_every_sibling(tmp_path, write):
    f = facts(tmp_path, 8, smt=2)  # cores 0-3, siblings 4-7
    physical = resolve_profile(write("instances: 2\nintra_op: usable_cpus\n"), f)
    assert cpus(physical) == [(0, 1), (2, 3)]
    assert [i.intra_op for i in physical.instances] == [2, 2]
    logical = resolve_profile(write("instances: {count: 2, cpus: logical_cpus}\nintra_op: usable_cpus\n"), f)
    assert cpus(logical) == [(0, 1, 4, 5), (2, 3, 6, 7)]
    assert [i.intra_op for i in logical.instances] == [4, 4]
    assert "every CPU of each" in logical.affinity_why


def test_instances_stay_inside_numa_nodes_unless_asked(tmp_path, write):
    f = facts(tmp_path, 8, numa=2)  # node 0: CPUs 0-3, node 1: CPUs 4-7
    plan = resolve_profile(write("instances: 3\n"), f)  # 8 // 3 = 2 cores each: 3 blocks of 2 fit inside nodes
    assert cpus(plan) == [(0, 1), (4, 5), (2, 3)]
    assert [i.nodes for i in plan.instances] == [(0,), (1,), (0,)]
    f = facts(tmp_path, 6, numa=2)  # 3 cores per node: three instances of 2 cores only fit across nodes
    with pytest.raises(ProfileError, match="do not fit inside the NUMA nodes"):
        resolve_profile(write("instances: {count: 3, cores_per_instance: 2}\n"), f)
    crossing = resolve_profile(write("instances: {count: 3, cores_per_instance: 2, cross_numa: true}\n"), f)
    assert cpus(crossing) == [(0, 1), (2, 3), (4, 5)]
    assert [i.nodes for i in crossing.instances] == [(0,), (0, 1), (1,)]
    assert any("span two NUMA nodes" in n for n in crossing.notes)


def test_a_count_that_only_fits_across_nodes_shrinks_the_instances_with_a_note(tmp_path, write):
    f = facts(tmp_path, 6, numa=2)  # 3 cores per node
    assert cpus(resolve_profile(write("instances: 2\n"), f)) == [(0, 1, 2), (3, 4, 5)]
    plan = resolve_profile(write("instances: 1\n"), f)  # one instance gets one node's 3 cores, not all 6
    assert cpus(plan) == [(0, 1, 2)]
    assert any("3 cores each instead of 6, so that no instance spans two NUMA nodes" in n for n in plan.notes)
    assert cpus(resolve_profile(write("instances: {count: 1, cross_numa: true}\n"), f)) == [(0, 1, 2, 3, 4, 5)]


def test_cores_per_instance_that_no_node_holds_is_an_error_at_its_line(tmp_path, write):
    f = facts(tmp_path, 10, numa=2)  # 5 cores per node
    path = write("instances:\n  cores_per_instance: 3\n  count: 3\n")
    with pytest.raises(ProfileError, match=r"p\.yaml:\d+:\d+: instances: 3 instances x 3 cores do not fit inside the "
                                         r"NUMA nodes \(usable cores per node: 5, 5\).*lower cores_per_instance "
                                         r"to 2.*cross_numa: true"):
        resolve_profile(path, f)
    f = facts(tmp_path, 6, numa=2)
    path = write("instances:\n  cores_per_instance: 4\n")
    with pytest.raises(ProfileError, match=r"p\.yaml:3:23: cores_per_instance is 4 but no NUMA node has that many"):
        resolve_profile(path, f)
    ok = resolve_profile(write("instances: {cores_per_instance: 4, cross_numa: true}\n"), f)
    assert cpus(ok) == [(0, 1, 2, 3)]


def test_a_node_list_lays_instances_over_those_nodes_only(tmp_path, write):
    f = facts(tmp_path, 16, smt=2, numa=2)  # node 0: cores 0-3 (+8-11), node 1: cores 4-7 (+12-15)
    plan = resolve_profile(write("instances: {count: 2, nodes: [1]}\n"), f)
    assert cpus(plan) == [(4, 5), (6, 7)]
    assert [i.nodes for i in plan.instances] == [(1,), (1,)]
    per_node = resolve_profile(write("instances: {per_numa_node: true, nodes: \"0-1\", cpus: logical_cpus}\n"), f)
    assert cpus(per_node) == [(0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15)]


def test_instances_on_the_command_line_keep_the_profiles_layout(tmp_path, write):
    f = facts(tmp_path, 16, smt=2, numa=2)
    plan = resolve_profile(write("instances: {count: 1, nodes: [1], cpus: logical_cpus}\n"), f, instances=2)
    assert cpus(plan) == [(4, 5, 12, 13), (6, 7, 14, 15)]


def test_a_node_that_does_not_exist_is_one_line_at_its_key(tmp_path, write):
    f = facts(tmp_path, 8, numa=2)
    path = write("instances:\n  count: 2\n  nodes: [0, 3]\n")
    with pytest.raises(ProfileError) as err:
        resolve_profile(path, f)
    assert str(err.value).startswith(f"{path}:4:10: instances.nodes: NUMA node 3 does not exist here "
                                     "(nodes with CPUs: 0-1)")
    assert "\n" not in str(err.value)


def test_node_numbers_are_the_kernels_even_with_a_memory_only_node_first(tmp_path, write):
    root = (FakeMachine(tmp_path).cpus(4).remove("sys/devices/system/node/node0")
            .file("sys/devices/system/node/node0/cpulist", "\n")
            .file("sys/devices/system/node/node2/cpulist", "0-3\n").build())
    f = machine_facts(root)
    assert f.numa_nodes == ((0, 1, 2, 3),) and f.node_ids == (2,)
    plan = resolve_profile(write("instances: {count: 2, nodes: 2}\nmemory: local\n"), f)
    assert [i.nodes for i in plan.instances] == [(2,), (2,)]
    with pytest.raises(ProfileError, match="NUMA node 0 does not exist here \\(nodes with CPUs: 2\\)"):
        resolve_profile(write("instances: {count: 2, nodes: [0]}\n"), f)


def test_memory_names_the_nodes_of_the_programs_cpus(tmp_path, write):
    f = facts(tmp_path, 8, numa=2)
    plan = resolve_profile(write("memory: local\naffinity: [4, 5]\n"), f)
    assert plan.memory == "local" and plan.memory_nodes == (1,)
    whole = resolve_profile(write("memory: interleave\n"), f)
    assert whole.memory_nodes == (0, 1) and "interleaved over nodes 0-1" in whole.memory_why
    assert resolve_profile(write("intra_op: 1\n"), f).memory == "none"
    one = resolve_profile(write("memory: local\n"), facts(tmp_path, 2))
    assert any("one NUMA node" in n for n in one.notes)


def test_memory_with_unknown_nodes_says_it_is_left_to_the_kernel(tmp_path, write):
    root = FakeMachine(tmp_path).cpus(2).remove("sys/devices/system/node").build()
    plan = resolve_profile(write("memory: local\n"), machine_facts(root))
    assert plan.memory_nodes == () and any("NUMA nodes are unknown" in n for n in plan.notes)


@pytest.mark.parametrize("text, message", [
    ("memory: bind\n", "unknown memory 'bind' (write one of local, interleave, none)"),
    ("instances: {count: 2, cpus: smt}\n", "unknown instances.cpus 'smt'"),
    ("instances: {count: 2, cross_numa: 1}\n", "'instances.cross_numa' must be true or false"),
    ("instances: {count: 2, nodes: []}\n", "'instances.nodes' is an empty list"),
    ("instances: {count: 2, nodes: [a]}\n", "instances.nodes:"),
])
def test_bad_layout_keys_are_one_line_and_exit_2(write, text, message):
    proc = run_cli("apply", write(text), env=clean_env())
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "p.yaml:" in proc.stderr
