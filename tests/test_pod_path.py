"""The kubelet's cgroup names told from a path (both drivers, every QoS class, each runtime's
scope), and the request read back from the kubelet's shares and weights, checked against the
kubelet's own conversions for every request up to 256 CPUs."""
from __future__ import annotations

import pytest
from pod_trees import CID, UID, kube_paths

from parinfo.machine.pod_path import pod_path
from parinfo.machine.pod_shares import request_of, roundest, shares_of, weight_of
from parinfo.records.unknown import Unknown


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
@pytest.mark.parametrize("qos", ["Guaranteed", "Burstable", "BestEffort"])
def test_every_driver_and_class(driver, qos):
    kube, pod, container = kube_paths(driver, qos)
    found = pod_path(container)
    assert (found.driver, found.qos, found.pod_uid, found.container_id) == (driver, qos, UID, CID)
    assert (found.cgroup(found.kubepods), found.cgroup(found.pod), found.cgroup(found.container)) == (
        kube, pod, container)
    in_pod = pod_path(pod)
    assert in_pod.container is None and in_pod.container_id is None and in_pod.qos == qos


@pytest.mark.parametrize("prefix,runtime", [("cri-containerd", "containerd"), ("crio", "cri-o"), ("docker", "docker")])
def test_runtime_scopes(prefix, runtime):
    found = pod_path(kube_paths("systemd", "Burstable", runtime=prefix)[2])
    assert (found.container_id, found.runtime) == (CID, runtime)
    cgroupfs = pod_path(f"/kubepods/besteffort/pod{UID}/{prefix}-{CID}")
    assert (cgroupfs.container_id, cgroupfs.runtime) == (CID, runtime)


def test_deeper_and_lower_trees():
    found = pod_path(f"/kubepods/pod{UID}/{CID}/init.scope")  # a process in a cgroup below its container's
    assert found.container_id == CID and found.cgroup(len(found.parts) - 1).endswith("/init.scope")
    lower = pod_path(f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
                     f"kubelet-kubepods-burstable-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope")
    assert (lower.qos, lower.pod_uid, lower.kubepods) == ("Burstable", UID, 1)


@pytest.mark.parametrize("path", [None, "", "/", "/system.slice/kubelet.service", "/kubepods", "/kubepods/burstable",
                                  "/kubepods/burstable/xyz/abc", "/kubepods/pod/abc", "/kubepods/pod-x-/abc",
                                  "/kubepods.slice/kubepods-burstable.slice/kubepods-pod12.slice",
                                  "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podzz.slice"])
def test_not_a_pod(path):
    assert pod_path(path) is None


def test_odd_container_names():
    for name in ("crio-conmon-" + CID + ".scope", "x", "0123", "ABCDEF0123456789", "a" * 200):
        found = pod_path(f"/kubepods/pod{UID}/{name}")
        assert isinstance(found.container_id, Unknown) and found.container is not None, name


def test_shares_round_trip_every_request():
    """v1: every request above 2m comes back exactly; 0-2m are the kubelet's minimum (0)."""
    for m in range(0, 256_001):
        got, low, high = request_of(shares_of(m), weight=False)
        assert low <= m <= high and got == (m if m > 2 else 0), m


def test_weight_round_trip_every_request():
    """v2: the weight keeps about 26m (28m at weight 1): the request is in the range, a multiple of 50m
    comes back exact."""
    widest = 0
    for m in range(0, 256_001):
        got, low, high = request_of(weight_of(shares_of(m)), weight=True)
        assert low <= m <= high and low <= got <= high, m
        widest = max(widest, high - low)
        if m % 50 == 0 and m > 0:
            assert got == m, m
    assert widest <= 28  # weight 1: 0m to 28m


def test_known_weights_and_bounds():
    assert weight_of(shares_of(500)) == 20 and request_of(20, weight=True) == (500, 490, 514)
    assert request_of(2, weight=False) == (0, 0, 2) and request_of(1, weight=True)[0] == 0
    assert request_of(1, weight=False) is None and request_of(262145, weight=False) is None
    assert request_of(0, weight=True) is None and request_of(10001, weight=True) is None
    assert roundest(1488, 1512) == 1500 and roundest(233, 258) == 250 and roundest(7, 3) == 7
