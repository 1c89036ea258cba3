"""machine_facts on fake cgroup trees: v1 and v2 quotas, ancestors, cpusets, mount roots, bad files."""
from __future__ import annotations

from pathlib import Path

import pytest
from fake_trees import FakeMachine

from parinfo.machine.topology import machine_facts, usable_from


def _v2(tmp_path, cpu_max, path="/job", **kw):
    return machine_facts(FakeMachine(tmp_path).cpus(32).cgroup_v2(path, cpu_max=cpu_max, **kw).build())


@pytest.mark.parametrize(("cpu_max", "quota", "usable"), [
    ("max 100000", None, 32),
    ("50000 100000", 0.5, 1),
    ("150000 100000", 1.5, 1),
    ("1600000 100000", 16.0, 16),
    ("250000 50000", 5.0, 5),
])
def test_v2_cpu_max(tmp_path, cpu_max, quota, usable):
    f = _v2(tmp_path, {"/job": cpu_max})
    assert f.quota == quota
    assert f.usable_cpus == usable
    assert f.quota_source.text == ("none" if quota is None else "/sys/fs/cgroup/job/cpu.max")
    assert f.cgroup_version == "v2" and f.cgroup_path == "/job"
    assert "quota" not in f.unknown


@pytest.mark.parametrize(("quota_us", "period_us", "quota", "usable"), [
    (-1, 100000, None, 32),
    (50000, 100000, 0.5, 1),
    (150000, 100000, 1.5, 1),
    (1600000, 100000, 16.0, 16),
])
def test_v1_cfs_quota(tmp_path, quota_us, period_us, quota, usable):
    root = FakeMachine(tmp_path).cpus(32).cgroup_v1("/job", quota={"/job": (quota_us, period_us)}).build()
    f = machine_facts(root)
    assert f.quota == quota
    assert f.usable_cpus == usable
    if quota is not None:
        assert f.quota_source.text == "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us"
    assert f.cgroup_version == "v1"


def test_ancestor_tighter_than_leaf_wins_v2(tmp_path):
    f = _v2(tmp_path, {"/a": "200000 100000", "/a/b": "max 100000", "/a/b/c": "800000 100000"},
            path="/a/b/c")
    assert f.quota == 2.0
    assert f.quota_source.text == "/sys/fs/cgroup/a/cpu.max"
    assert f.usable_cpus == 2


def test_ancestor_tighter_than_leaf_wins_v1(tmp_path):
    root = (FakeMachine(tmp_path).cpus(8)
            .cgroup_v1("/slurm/job1/step0", quota={"/slurm": (-1, 100000), "/slurm/job1": (300000, 100000),
                                                   "/slurm/job1/step0": (-1, 100000)})
            .build())
    f = machine_facts(root)
    assert f.quota == 3.0 and f.usable_cpus == 3
    assert f.quota_source.text.endswith("/slurm/job1/cpu.cfs_quota_us")


def test_leaf_tighter_than_ancestor(tmp_path):
    f = _v2(tmp_path, {"/a": "400000 100000", "/a/b": "100000 100000"}, path="/a/b")
    assert f.quota == 1.0 and f.quota_source.text == "/sys/fs/cgroup/a/b/cpu.max"


def test_no_cgroup_at_all(tmp_path):
    f = machine_facts(FakeMachine(tmp_path).cpus(4).build())
    assert f.quota is None and f.quota_source.text == "none"
    assert f.cpuset is None and f.cgroup_version is None
    assert f.usable_cpus == 4
    assert "quota" not in f.unknown and "cpuset" not in f.unknown


def test_cgroup_mounted_but_process_file_missing_is_unknown(tmp_path):
    root = FakeMachine(tmp_path).cpus(4).cgroup_v2("/x").remove("proc/self/cgroup").build()
    f = machine_facts(root)
    assert f.quota is None
    assert "cannot read /proc/self/cgroup" in f.unknown["quota"]


@pytest.mark.parametrize("content", ["", "lots", "max lots", "-5 100000", "50000 0", "1 2 3"])
def test_garbage_cpu_max_is_unknown_with_reason(tmp_path, content):
    root = FakeMachine(tmp_path).cpus(4).cgroup_v2("/job").file("sys/fs/cgroup/job/cpu.max", content).build()
    f = machine_facts(root)
    assert f.quota is None
    assert "/sys/fs/cgroup/job/cpu.max" in f.unknown["quota"]
    assert f.usable_cpus == 4


def test_directory_where_quota_file_should_be(tmp_path):
    root = (FakeMachine(tmp_path).cpus(4).cgroup_v1("/job")
            .directory("sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us").build())
    f = machine_facts(root)
    assert f.quota is None
    assert f.unknown["quota"] == ("cannot read /sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us: "
                                  "Is a directory")


def test_garbage_period_v1(tmp_path):
    root = (FakeMachine(tmp_path).cpus(4).cgroup_v1("/job", quota={"/job": (50000, 100000)})
            .file("sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us", "soon").build())
    f = machine_facts(root)
    assert f.quota is None and "cpu.cfs_period_us" in f.unknown["quota"]


def test_bad_leaf_with_good_ancestor_keeps_the_limit_and_notes_it(tmp_path):
    root = (FakeMachine(tmp_path).cpus(8).cgroup_v2("/a/b", cpu_max={"/a": "300000 100000"})
            .file("sys/fs/cgroup/a/b/cpu.max", "???").build())
    f = machine_facts(root)
    assert f.quota == 3.0 and "quota" not in f.unknown
    assert any("quota may be tighter" in n and "/sys/fs/cgroup/a/b/cpu.max" in n for n in f.notes)


def test_container_mount_root_is_the_process_cgroup(tmp_path):
    # Docker without a cgroup namespace: the process sees its host path, the mount's root is that path.
    root = (FakeMachine(tmp_path).cpus(8)
            .cgroup_v1("/docker/abc", mount_root="/docker/abc", quota={"/docker/abc": (200000, 100000)})
            .build())
    f = machine_facts(root)
    assert f.quota == 2.0
    assert f.quota_source.text == "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"
    assert f.notes == ()


def test_container_with_nested_path_below_mount_root(tmp_path):
    root = (FakeMachine(tmp_path).cpus(8)
            .cgroup_v2("/kubepods/pod1/ctr", mount_root="/kubepods/pod1",
                       cpu_max={"/kubepods/pod1": "100000 100000", "/kubepods/pod1/ctr": "max 100000"})
            .build())
    f = machine_facts(root)
    assert f.quota == 1.0 and f.quota_source.text == "/sys/fs/cgroup/cpu.max"


def test_cgroup_path_missing_under_mount_falls_back_to_mount_point(tmp_path):
    root = (FakeMachine(tmp_path).cpus(8)
            .cgroup_v2("/gone/away", cpu_max={"/": "400000 100000"})
            .remove("sys/fs/cgroup/gone").build())
    f = machine_facts(root)
    assert f.quota == 4.0 and f.quota_source.text == "/sys/fs/cgroup/cpu.max"
    assert any("/gone/away does not exist" in n for n in f.notes)


def test_cgroup_path_outside_mount_root_falls_back_to_mount_point(tmp_path):
    root = (FakeMachine(tmp_path).cpus(8)
            .cgroup_v2("/other/place", mount_root="/mine", cpu_max={"/mine": "300000 100000"})
            .build())
    f = machine_facts(root)
    assert f.quota == 3.0
    assert any("outside the mount's root" in n for n in f.notes)


def test_hybrid_v1_cpu_and_v2_without_controllers(tmp_path):
    root = (FakeMachine(tmp_path).cpus(4)
            .cgroup_v1("/", quota={"/": (-1, 100000), "/lim": (50000, 100000)})
            .cgroup_v2("/")
            .build())
    assert machine_facts(root).quota is None
    root = (FakeMachine(tmp_path).cpus(4)
            .cgroup_v1("/lim", quota={"/": (-1, 100000), "/lim": (50000, 100000)})
            .cgroup_v2("/")
            .build())
    f = machine_facts(root)
    assert f.cgroup_version == "hybrid"
    assert f.quota == 0.5 and f.usable_cpus == 1


def test_cpuset_smaller_than_affinity_v2(tmp_path):
    root = (FakeMachine(tmp_path).cpus(16).cgroup_v2("/job", cpuset={"/job": "4-7"}).build())
    f = machine_facts(root)
    assert f.cpuset == (4, 5, 6, 7)
    assert f.cpuset_source.text == "/sys/fs/cgroup/job/cpuset.cpus.effective"
    assert f.usable_cpus == 4 and f.usable_cpu_list == (4, 5, 6, 7)


def test_cpuset_v1_and_quota_together_take_the_minimum(tmp_path):
    root = (FakeMachine(tmp_path).cpus(16, smt=2)
            .cgroup_v1("/job", cpuset={"/job": "0-5"}, quota={"/job": (250000, 100000)}).build())
    f = machine_facts(root)
    assert f.cpuset == tuple(range(6))
    assert f.quota == 2.5
    assert f.usable_cpus == 2
    assert f.usable_physical_cores == 2


def test_cpuset_read_from_nearest_ancestor_with_the_file(tmp_path):
    root = (FakeMachine(tmp_path).cpus(8).cgroup_v2("/a/b", cpuset={"/a": "0-2"}).build())
    assert machine_facts(root).cpuset == (0, 1, 2)


def test_garbage_cpuset_is_unknown(tmp_path):
    root = (FakeMachine(tmp_path).cpus(8).cgroup_v2("/a", cpuset={"/a": "zero to three"}).build())
    f = machine_facts(root)
    assert f.cpuset is None and "cpuset.cpus.effective" in f.unknown["cpuset"]
    assert f.usable_cpus == 8


def test_quota_is_reread_every_call(tmp_path):
    fm = FakeMachine(tmp_path).cpus(8).cgroup_v2("/j", cpu_max={"/j": "max 100000"})
    root = fm.build()
    assert machine_facts(root).quota is None
    (fm.root / "sys/fs/cgroup/j/cpu.max").write_text("200000 100000\n")
    assert machine_facts(root).usable_cpus == 2


def test_escaped_mount_point(tmp_path):
    root = (FakeMachine(tmp_path).cpus(8)
            .cgroup_v2("/j", mount_point="/cg roup", cpu_max={"/j": "300000 100000"}).build())
    mi = Path(f"{root}/proc/self/mountinfo")
    mi.write_text(mi.read_text().replace("/cg roup", "/cg\\040roup"))
    assert machine_facts(root).quota == 3.0


@pytest.mark.parametrize(("aff", "cpuset", "quota", "expected"), [
    (8, None, None, 8), (8, 4, None, 4), (8, None, 0.5, 1), (8, None, 1.5, 1), (8, None, 2.99, 2),
    (8, 16, 16.0, 8), (2, 8, 3.0, 2), (0, None, None, 1),
])
def test_usable_rule(aff, cpuset, quota, expected):
    assert usable_from(aff, cpuset, quota) == expected
