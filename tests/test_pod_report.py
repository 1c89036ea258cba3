"""The pod section in the report (text rows and --json, absent outside a pod), processes grouped by
pod in ``host`` (text and --json), and the cAdvisor-compatible counters read from fake kubelet trees."""
from __future__ import annotations

import json

import pytest
from pod_trees import CID, UID, kube_paths, pod_machine

from parinfo.diagnostics.model import Report
from parinfo.diagnostics.sections import sections
from parinfo.host.model import HostProcess, HostReport, Scope
from parinfo.host.pods import group
from parinfo.machine.pod import pod_facts, pod_identity
from parinfo.machine.topology import machine_facts
from parinfo.watching.cadvisor import pod_series

V1 = dict(version="v1", driver="cgroupfs", qos="Burstable", request=500, pod_request=500, limit=0.5, pod_limit=0.5)


def _report(root: str) -> Report:
    return Report(machine=machine_facts(root), pod=pod_facts(root))


def test_the_pod_section_in_text_and_json(tmp_path):
    report = _report(pod_machine(tmp_path, **V1))
    (section,) = [s for s in sections(report) if s.key == "pod"]
    rows = dict(r.cells for r in section.rows)
    assert rows["QoS class"] == "Burstable (/proc/self/cgroup)"
    assert rows["pod"] == f"name unknown (uid {UID}; cgroupfs driver, cgroup v1)"
    assert rows["container"] == CID and rows["request"].startswith("500m (/sys/fs/cgroup/cpu,cpuacct/kubepods/")
    assert rows["limit"].startswith("0.5 CPUs (") and rows["usable CPUs"].startswith("1 (min(")
    assert rows["by runtime"] == ("go 2, jdk 1, dotnet 1, loky 8, rust 1, nproc 8, node 8, node20 8, python 8, "
                                  "torch 8, onnxruntime 8, duckdb 1")
    assert "unknown (" in rows["name"]  # no container root in the fake tree
    data = report.to_dict()
    assert list(data)[-1] == "pod" and data["pod"]["qos"] == "Burstable" and data["pod"]["limit"] == 0.5
    assert data["pod"]["request_source"]["kind"] == "file"
    back = Report.from_dict(json.loads(json.dumps(data)), strict=True)
    assert back.pod == report.pod


def test_no_pod_no_key(tmp_path):
    from fake_trees import FakeMachine

    report = _report(FakeMachine(tmp_path).cpus(4).cgroup_v2("/system.slice/x.service").build())
    assert report.pod is None and "pod" not in report.to_dict()
    assert "pod" not in [s.key for s in sections(report)]
    assert Report.from_dict(report.to_dict(), strict=True).pod is None


def _host(root: str, pids: list[int]) -> HostReport:
    who = pod_identity(root)
    processes = [HostProcess(pid=pid, ppid=1, name="app", command="app", user="root", cgroup=who.container_cgroup,
                             group=who.container_cgroup, usable_cpus=1, affinity=8, pod=who) for pid in pids]
    processes.append(HostProcess(pid=99, ppid=1, name="sshd", command="sshd", user="root", cgroup="/",
                                 group="/", usable_cpus=8, affinity=8))
    return HostReport(time=0.0, interval=None, scope=Scope(), logical_cpus=8, processes=processes,
                      pods=group((p.pid, p.pod) for p in processes))


def test_host_groups_processes_by_pod_and_container(tmp_path):
    report = _host(pod_machine(tmp_path, **V1), [12, 11])
    (row,) = report.pods
    assert (row.uid, row.qos, row.cgroup) == (UID, "Burstable", kube_paths("cgroupfs", "Burstable")[1])
    assert [(c.id, c.pids) for c in row.containers] == [(CID, [11, 12])]
    data = report.to_dict()
    assert data["pods"][0]["containers"][0]["pids"] == [11, 12]
    by_pid = {p["pid"]: p for p in data["processes"]}
    assert by_pid[12]["pod"] == {"pod_uid": UID, "qos": "Burstable", "container_id": CID, "name": None,
                                 "namespace": None, "pod_cgroup": row.cgroup,
                                 "container_cgroup": kube_paths("cgroupfs", "Burstable")[2]}
    assert "pod" not in by_pid[99]  # a process in no pod is written as before
    text = report.table()
    assert f"pod {UID} (Burstable, uid {UID})" in text and f"container {CID[:12]}: 2 processes (11, 12)" in text


def test_host_without_pods_is_as_before(tmp_path):
    report = HostReport(time=0.0, interval=None, scope=Scope(), logical_cpus=8)
    assert "pods" not in report.to_dict() and "pods (" not in report.table()


def _stat(version: str, periods: int, throttled: int, usec: int) -> str:
    time_key, value = ("throttled_usec", usec) if version == "v2" else ("throttled_time", usec * 1000)
    return f"nr_periods {periods}\nnr_throttled {throttled}\n{time_key} {value}\n"


@pytest.mark.parametrize("version,driver", [("v1", "cgroupfs"), ("v2", "systemd")])
def test_cadvisor_series_for_container_and_pod(tmp_path, version, driver):
    shape = dict(V1, version=version, driver=driver)
    root = pod_machine(tmp_path, **shape, edit={"{cpu}{container}/cpu.stat": _stat(version, 100, 40, 2_500_000),
                                               "{cpu}{pod}/cpu.stat": _stat(version, 100, 41, 2_600_000)})
    _, pod, container = kube_paths(driver, "Burstable")
    series = pod_series(root, [pod_identity(root)])
    assert [(s.id, s.container, s.pod, s.namespace, s.periods, s.throttled, s.throttled_seconds) for s in series] == [
        (container, CID, UID, "", 100, 40, 2.5), (pod, "", UID, "", 100, 41, 2.6)]


def test_cadvisor_series_only_where_a_quota_is_set(tmp_path):
    root = pod_machine(tmp_path, **dict(V1, limit=None), edit={"{cpu}{container}/cpu.stat": _stat("v1", 0, 0, 0),
                                                               "{cpu}{pod}/cpu.stat": "nr_periods x\n"})
    assert pod_series(root, [pod_identity(root)]) == []  # no quota on the container; the pod's stat is garbage
    assert pod_series(root, []) == []


def test_cadvisor_exposition(tmp_path):
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest

    from parinfo.watching.cadvisor import families

    root = pod_machine(tmp_path, **V1, edit={"{cpu}{container}/cpu.stat": _stat("v1", 10, 3, 1_000)})

    class One:
        def collect(self):
            return families(pod_series(root, [pod_identity(root)]))

    registry = CollectorRegistry()
    registry.register(One())
    text = generate_latest(registry).decode()
    labels = f'container="{CID}",id="{kube_paths("cgroupfs", "Burstable")[2]}",namespace="",pod="{UID}"'
    assert f"container_cpu_cfs_periods_total{{{labels}}} 10.0" in text
    assert f"container_cpu_cfs_throttled_periods_total{{{labels}}} 3.0" in text
    assert f"container_cpu_cfs_throttled_seconds_total{{{labels}}} 0.001" in text
    assert "# TYPE container_cpu_cfs_periods_total counter" in text
