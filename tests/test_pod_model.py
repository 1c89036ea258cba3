"""The pod section read from fake cgroup trees shaped as the kubelet makes them: v1 and v2, the
cgroupfs and systemd drivers, each QoS class, a pod-level limit and the CPU manager's cpuset; every
field, its source, and the usable CPUs parinfo and each runtime count."""
from __future__ import annotations

import pytest
from pod_trees import CID, UID, kube_paths, pod_machine

from parinfo.machine.pod import pod_facts
from parinfo.records.convert import dump, load
from parinfo.records.source import Kind
from parinfo.records.unknown import Unknown

KINDS = [("v1", "cgroupfs"), ("v1", "systemd"), ("v2", "cgroupfs"), ("v2", "systemd")]


def _common(p, version: str, driver: str, qos: str) -> None:
    _, pod, container = kube_paths(driver, qos)
    assert (p.qos, p.pod_uid, p.container_id) == (qos, UID, CID)
    assert (p.driver, p.cgroup_version) == (driver, version)
    assert (p.cgroup, p.pod_cgroup, p.container_cgroup) == (container, pod, container)
    assert p.qos_source.kind is Kind.FILE and p.qos_source.detail == "/proc/self/cgroup"
    assert p.runtime == (None if driver == "cgroupfs" else "containerd")
    assert load(type(p), dump(p), strict=True) == p  # the section reads back as it was written


@pytest.mark.parametrize("version,driver", KINDS)
def test_guaranteed_whole_cpus_with_exclusive_cpuset(tmp_path, version, driver):
    root = pod_machine(tmp_path, version=version, driver=driver, qos="Guaranteed", request=2000, pod_request=2000,
                       limit=2, pod_limit=2, cpuset="2-3", node_cpuset="0-7")
    p = pod_facts(root)
    _common(p, version, driver, "Guaranteed")
    assert (p.request_millicores, p.pod_request_millicores) == (2000, 2000)
    assert (p.limit, p.pod_limit) == (2.0, 2.0)
    quota_file = "cpu.max" if version == "v2" else "cpu.cfs_quota_us"
    assert p.limit_source.kind is Kind.FILE and p.limit_source.detail.endswith(f"{p.container_cgroup}/{quota_file}")
    assert p.pod_limit_source.detail.endswith(f"{p.pod_cgroup}/{quota_file}")
    assert (p.cpuset, p.node_cpuset, p.exclusive) == ((2, 3), tuple(range(8)), True)
    assert "exclusive" in p.cpuset_source.text
    # every runtime counts the two CPUs but ONNX Runtime, which takes the machine's physical cores
    assert p.usable_cpus == 2 and p.usable_by_rule.pop("onnxruntime") == 8 and set(p.usable_by_rule.values()) == {2}
    assert p.notes == ()


@pytest.mark.parametrize("version,driver", KINDS)
def test_guaranteed_fractional_limit(tmp_path, version, driver):
    root = pod_machine(tmp_path, version=version, driver=driver, qos="Guaranteed", request=1500, pod_request=1500,
                       limit=1.5, pod_limit=1.5)
    p = pod_facts(root)
    _common(p, version, driver, "Guaranteed")
    assert (p.request_millicores, p.limit, p.pod_limit) == (1500, 1.5, 1.5)
    assert p.exclusive is False and p.cpuset == tuple(range(8))  # a fraction never gets CPUs alone
    assert p.usable_cpus == 1  # parinfo floors the quota
    # loky reads /sys/fs/cgroup/cpu.max (or cpu/cpu.cfs_quota_us) only: seen from the host, the root's
    # libuv 1.51+ floors the outermost v2 quota (none under v1); DuckDB ceils its own cgroup's
    assert p.usable_by_rule == {"go": 2, "jdk": 2, "dotnet": 2, "loky": 8, "rust": 1,
                                "nproc": 2 if version == "v2" else 8, "node": 1 if version == "v2" else 8,
                                "node20": 8, "python": 8, "torch": 8, "onnxruntime": 8, "duckdb": 2}
    if version == "v2":  # the weight keeps ~26m: the source gives the range
        assert "1488m to 1512m" in p.request_source.text
    else:
        assert p.request_source.text.endswith("cpu.shares 1536")


@pytest.mark.parametrize("version,driver", KINDS)
def test_burstable_request_only(tmp_path, version, driver):
    root = pod_machine(tmp_path, version=version, driver=driver, qos="Burstable", request=500, pod_request=500)
    p = pod_facts(root)
    _common(p, version, driver, "Burstable")
    assert (p.request_millicores, p.pod_request_millicores) == (500, 500)
    assert (p.limit, p.pod_limit) == (None, None)
    assert p.limit_source.kind is Kind.NONE and p.pod_limit_source.kind is Kind.NONE
    assert p.usable_cpus == 8 and set(p.usable_by_rule.values()) == {8}
    assert any("(500m) with no limit" in n for n in p.notes)


@pytest.mark.parametrize("version,driver", KINDS)
def test_best_effort(tmp_path, version, driver):
    root = pod_machine(tmp_path, version=version, driver=driver, qos="BestEffort")
    p = pod_facts(root)
    _common(p, version, driver, "BestEffort")
    assert (p.request_millicores, p.pod_request_millicores, p.limit, p.pod_limit) == (0, 0, None, None)
    assert p.exclusive is False and p.usable_cpus == 8
    assert not any("with no limit" in n for n in p.notes)  # no request: nothing to say of it


@pytest.mark.parametrize("version,driver", KINDS)
def test_pod_level_limit_escapes_go(tmp_path, version, driver):
    """Pod-level resources: the quota is on the pod's cgroup only; Go reads its own cgroup's."""
    root = pod_machine(tmp_path, version=version, driver=driver, qos="Burstable", request=1000, pod_request=1000,
                       pod_limit=2)
    p = pod_facts(root)
    _common(p, version, driver, "Burstable")
    assert (p.limit, p.pod_limit) == (None, 2.0)
    assert p.usable_cpus == 2
    assert p.usable_by_rule["go"] == 8 and p.usable_by_rule["jdk"] == 2 and p.usable_by_rule["rust"] == 2
    assert any(n.startswith("Go reads its own cgroup's quota only: the 2-CPU limit") and n.endswith("GOMAXPROCS 8")
               for n in p.notes)


@pytest.mark.parametrize("version,driver", KINDS)
def test_shared_pool_is_not_exclusive(tmp_path, version, driver):
    """A Burstable container's cpuset shrinks when other pods hold CPUs alone: the shared pool."""
    root = pod_machine(tmp_path, version=version, driver=driver, qos="Burstable", request=250, cpuset="0-5")
    p = pod_facts(root)
    assert p.request_millicores == 250 and p.cpuset == tuple(range(6)) and p.exclusive is False
    assert "shared pool" in p.cpuset_source.text
    assert p.usable_cpus == 6


def test_guaranteed_exclusive_needs_width_of_limit(tmp_path):
    root = pod_machine(tmp_path, version="v2", driver="systemd", qos="Guaranteed", request=2000, pod_request=2000,
                       limit=2, pod_limit=2, cpuset="0-5")
    assert pod_facts(root).exclusive is False


@pytest.mark.parametrize("version,driver", KINDS)
def test_process_in_the_pods_own_cgroup(tmp_path, version, driver):
    root = pod_machine(tmp_path, version=version, driver=driver, qos="Burstable", pod_request=300, pod_limit=1,
                       in_pod_cgroup=True)
    p = pod_facts(root)
    assert p.container_id is None and p.container_cgroup is None and p.cgroup == p.pod_cgroup
    assert (p.request_millicores, p.pod_request_millicores, p.limit, p.pod_limit) == (300, 300, None, 1.0)


def test_not_in_a_pod(tmp_path):
    from fake_trees import FakeMachine

    for path in ("/", "/system.slice/app.service", "/kubepods/burstable/notapod/x", "/user.slice/kubepods"):
        root = FakeMachine(tmp_path).cpus(4).cgroup_v1(path).build()
        assert pod_facts(root) is None, path


def test_a_cgroup_root_above_kubepods(tmp_path):
    """A kubelet run with --cgroup-root puts its tree lower: the tree is found where it is."""
    from fake_trees import FakeMachine

    path = f"/kubelet/kubepods/besteffort/pod{UID}/{CID}"
    root = (FakeMachine(tmp_path).cpus(4).cgroup_v1(path)
            .file(f"sys/fs/cgroup/cpu,cpuacct{path}/cpu.shares", "2").build())
    p = pod_facts(root)
    assert (p.qos, p.container_id, p.request_millicores, p.pod_cgroup) == (
        "BestEffort", CID, 0, f"/kubelet/kubepods/besteffort/pod{UID}")
    assert isinstance(p.pod_request_millicores, Unknown)  # the pod's cpu.shares was not written


def test_exclusive_against_the_machine_when_kubepods_has_no_cpuset(tmp_path):
    """cgroup v2 with the cpuset controller enabled below kubepods only: the machine's CPUs stand for it."""
    root = pod_machine(tmp_path, version="v2", driver="cgroupfs", qos="Guaranteed", request=1000, pod_request=1000,
                       limit=1, pod_limit=1, cpuset="3",
                       edit={"sys/fs/cgroup/kubepods/cpuset.cpus.effective": ""})
    import os

    os.remove(os.path.join(root, "sys/fs/cgroup/kubepods/cpuset.cpus.effective"))
    p = pod_facts(root)
    assert (p.cpuset, p.node_cpuset, p.exclusive, p.usable_cpus) == ((3,), None, True, 1)


def test_a_deep_cgroup_root_reads_back(tmp_path):
    from fake_trees import FakeMachine

    deep = "/" + "/".join(f"level{i:03d}" for i in range(60))
    path = f"{deep}/kubepods/pod{UID}/{CID}"
    root = FakeMachine(tmp_path).cpus(2).cgroup_v1(path).build()
    p = pod_facts(root)
    assert p.cgroup == path and load(type(p), dump(p), strict=True) == p
