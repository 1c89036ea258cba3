"""machine_facts on fake sysfs trees: CPUs, cores, sockets, SMT, NUMA, hybrid types, affinity."""
from __future__ import annotations

import pytest
from fake_trees import FakeMachine

from parinfo.machine import sysfs as _sysfs
from parinfo.machine.cpulist import format_cpu_list, parse_cpu_list
from parinfo.machine.procfs import Proc
from parinfo.machine.topology import USABLE_RULE, MachineFacts, machine_facts
from parinfo.records.convert import dump


def test_two_sockets_28_cores_smt_numa(tmp_path):
    root = FakeMachine(tmp_path).cpus(112, smt=2, sockets=2, numa=2).build()
    f = machine_facts(root)
    assert (f.logical_cpus, f.physical_cores, f.sockets, f.smt) == (112, 56, 2, True)
    assert len(f.numa_nodes) == 2
    assert f.numa_nodes[0] == tuple(range(28)) + tuple(range(56, 84))
    assert len(f.core_siblings) == 56 and (0, 56) in f.core_siblings
    assert all(len(c) == 2 for c in f.core_siblings)
    assert f.affinity == tuple(range(112))
    assert (f.usable_cpus, f.usable_physical_cores) == (112, 56)
    assert f.quota is None and f.quota_source.text == "none" and f.cpuset is None
    assert f.core_types == {}
    assert f.unknown == {}


def test_smt_off_when_every_core_has_one_thread(tmp_path):
    f = machine_facts(FakeMachine(tmp_path).cpus(8).build())
    assert (f.logical_cpus, f.physical_cores, f.smt) == (8, 8, False)


def test_smt_disabled_by_offlining_siblings(tmp_path):
    root = FakeMachine(tmp_path).cpus(8, smt=2, offline=[4, 5, 6, 7]).build()
    f = machine_facts(root)
    assert (f.logical_cpus, f.physical_cores, f.smt) == (4, 4, False)


def test_affinity_subset_counts_usable_cpus_and_their_cores(tmp_path):
    # cpus 0 and 8 are the two threads of core 0; cpu 1 is core 1
    root = FakeMachine(tmp_path).cpus(16, smt=2).affinity([0, 8, 1]).build()
    f = machine_facts(root)
    assert f.affinity == (0, 1, 8)
    assert f.usable_cpus == 3
    assert f.usable_physical_cores == 2
    assert f.usable_cpu_list == (0, 1, 8)


def test_hybrid_p_cores_with_smt_and_e_cores(tmp_path):
    root = FakeMachine(tmp_path).hybrid(p_cores=6, e_cores=8).build()
    f = machine_facts(root)
    assert f.logical_cpus == 20
    assert f.physical_cores == 14
    assert f.smt is True
    assert f.core_types == {"performance": tuple(range(12)), "efficiency": tuple(range(12, 20))}
    assert (0, 1) in f.core_siblings and (12,) in f.core_siblings


def test_arm_big_little_from_cpu_capacity(tmp_path):
    root = (FakeMachine(tmp_path).cpus(8)
            .capacities({0: 446, 1: 446, 2: 446, 3: 446, 4: 871, 5: 871, 6: 871, 7: 1024})
            .build())
    f = machine_facts(root)
    assert f.core_types == {"performance": (7,), "capacity-871": (4, 5, 6), "efficiency": (0, 1, 2, 3)}


def test_equal_capacities_are_not_hybrid(tmp_path):
    root = FakeMachine(tmp_path).cpus(4).capacities({c: 1024 for c in range(4)}).build()
    assert machine_facts(root).core_types == {}


def test_present_used_when_online_is_missing(tmp_path):
    root = FakeMachine(tmp_path).cpus(4).remove("sys/devices/system/cpu/online").build()
    f = machine_facts(root)
    assert f.logical_cpus == 4 and "logical_cpus" not in f.unknown


def test_no_cpu_information_at_all_gives_reasons_not_errors(tmp_path):
    root = FakeMachine(tmp_path).affinity([0, 1]).build()
    f = machine_facts(root)
    assert f.logical_cpus is None and f.physical_cores is None and f.sockets is None
    assert "cannot read /sys/devices/system/cpu/online" in f.unknown["logical_cpus"]
    assert f.unknown["physical_cores"] and f.unknown["sockets"]
    assert f.usable_cpus == 2


@pytest.mark.parametrize("content", ["", "garbage", "3-1", "0-99999999"])
def test_garbage_online_list_is_unknown(tmp_path, content):
    root = (FakeMachine(tmp_path).cpus(4)
            .file("sys/devices/system/cpu/online", content)
            .file("sys/devices/system/cpu/present", content).build())
    f = machine_facts(root)
    assert f.logical_cpus is None
    assert "/sys/devices/system/cpu/online" in f.unknown["logical_cpus"]


def test_sibling_lists_missing_falls_back_to_core_ids(tmp_path):
    fm = FakeMachine(tmp_path).cpus(8, smt=2)
    for cpu in range(8):
        fm.remove(f"sys/devices/system/cpu/cpu{cpu}/topology/core_cpus_list")
        fm.remove(f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    f = machine_facts(fm.build())
    assert f.physical_cores == 4 and f.smt is True
    assert (0, 4) in f.core_siblings


def test_unreadable_topology_file_is_unknown_with_reason(tmp_path):
    fm = FakeMachine(tmp_path).cpus(4)
    for name in ("core_cpus_list", "thread_siblings_list", "core_id"):
        fm.directory(f"sys/devices/system/cpu/cpu2/topology/{name}")
    f = machine_facts(fm.build())
    assert f.physical_cores is None and f.core_siblings == ()
    assert "cpu2/topology" in f.unknown["physical_cores"]
    assert "Is a directory" in f.unknown["physical_cores"]
    assert f.logical_cpus == 4 and f.usable_physical_cores == 4


def test_missing_numa_directory_is_unknown(tmp_path):
    root = FakeMachine(tmp_path).cpus(4).remove("sys/devices/system/node").build()
    f = machine_facts(root)
    assert f.numa_nodes == ()
    assert "/sys/devices/system/node" in f.unknown["numa_nodes"]


def test_memory_only_numa_node_is_left_out(tmp_path):
    root = (FakeMachine(tmp_path).cpus(4)
            .file("sys/devices/system/node/node1/cpulist", "").build())
    assert machine_facts(root).numa_nodes == ((0, 1, 2, 3),)


def test_garbage_affinity_falls_back_to_online_cpus(tmp_path):
    root = FakeMachine(tmp_path).cpus(4).file("proc/self/status", "Name:\tx\nCpus_allowed_list:\tzz\n").build()
    f = machine_facts(root)
    assert f.affinity == (0, 1, 2, 3)
    assert "Cpus_allowed_list" in f.unknown["affinity"]


def test_explicit_pid_reads_its_status(tmp_path):
    root = FakeMachine(tmp_path).cpus(4).affinity([2, 3]).also_pid(777).build()
    assert machine_facts(root, Proc.of(777, root)).affinity == (2, 3)


def test_unknown_pid_is_a_usage_error(tmp_path):
    from parinfo.errors import UsageError

    root = FakeMachine(tmp_path).cpus(4).build()
    with pytest.raises(UsageError, match="no process with pid 999"):
        machine_facts(root, Proc.of(999, root))


def test_real_machine_unknown_pid_is_a_usage_error():
    from parinfo.errors import UsageError

    with pytest.raises(UsageError):
        machine_facts(proc=Proc.of(2**22 + 12345))


def test_topology_is_cached_but_affinity_is_reread(tmp_path):
    fm = FakeMachine(tmp_path).cpus(4).affinity([0])
    root = fm.build()
    assert machine_facts(root).usable_cpus == 1
    (fm.root / "proc/self/status").write_text("Cpus_allowed_list:\t0-3\n")
    (fm.root / "sys/devices/system/cpu/online").write_text("0-1\n")
    f = machine_facts(root)
    assert f.usable_cpus == 4  # affinity re-read
    assert f.logical_cpus == 4  # topology cached
    _sysfs.topology.cache_clear()
    assert machine_facts(root).logical_cpus == 2


def test_to_dict_is_json_ready(tmp_path):
    import json

    root = FakeMachine(tmp_path).cpus(4, smt=2).cgroup_v2("/a", cpu_max={"/a": "150000 100000"}).build()
    d = dump(machine_facts(root))
    assert json.loads(json.dumps(d)) == d
    assert d["usable_rule"] == USABLE_RULE
    assert d["quota"] == 1.5 and d["usable_cpus"] == 1
    travelling = {name for name, f in MachineFacts.__dataclass_fields__.items() if not f.metadata.get("local")}
    assert travelling <= set(d) and not {"pod_request", "pod_request_source"} & set(d)  # those stay in the process


def test_real_machine_facts_are_consistent():
    import os

    f = machine_facts()
    assert f.logical_cpus == os.cpu_count()
    assert f.affinity == tuple(sorted(os.sched_getaffinity(0)))
    assert 1 <= f.usable_cpus <= len(f.affinity)
    assert 1 <= f.usable_physical_cores <= f.usable_cpus
    assert f.physical_cores is None or f.physical_cores <= f.logical_cpus


def test_cpu_list_round_trip():
    from hypothesis import given, strategies as st

    @given(st.sets(st.integers(min_value=0, max_value=2000), min_size=1))
    def check(cpus):
        text = format_cpu_list(sorted(cpus))
        assert parse_cpu_list(text) == sorted(cpus)

    check()


@pytest.mark.parametrize("text", ["", "a", "1-", "-1", "2-1", "1,,2", "0-70000", "1 2"])
def test_cpu_list_garbage_is_rejected(text):
    with pytest.raises(ValueError):
        parse_cpu_list(text)
