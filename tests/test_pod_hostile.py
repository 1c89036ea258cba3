"""The pod section from cgroup files that hold garbage, are huge, missing or not files, and names
from a container root made of links, FIFOs and lies: each gives an Unknown (or None) with why, never
an exception."""
from __future__ import annotations

import os

import pytest
from pod_trees import pod_machine

from parinfo.machine.pod import pod_facts, pod_identity
from parinfo.machine.pod_names import names_of
from parinfo.machine.procfs import Proc
from parinfo.records.source import Kind
from parinfo.records.unknown import Unknown

V1 = dict(version="v1", driver="cgroupfs", qos="Burstable", request=500, pod_request=500, limit=1, pod_limit=1)
V2 = dict(version="v2", driver="systemd", qos="Burstable", request=500, pod_request=500, limit=1, pod_limit=1)


@pytest.mark.parametrize("shape,rel,text,field,words", [
    (V1, "{cpu}{container}/cpu.shares", "lots", "request_millicores", "unexpected content"),
    (V1, "{cpu}{container}/cpu.shares", "9" * (3 << 20), "request_millicores", "unexpected content"),
    (V1, "{cpu}{container}/cpu.shares", "0", "request_millicores", "not a value the kubelet writes"),
    (V1, "{cpu}{container}/cpu.shares", "", "request_millicores", "is empty"),
    (V2, "{cpu}{container}/cpu.weight", "10001", "request_millicores", "not a value the kubelet writes"),
    (V2, "{cpu}{container}/cpu.weight", "-3", "request_millicores", "not a value the kubelet writes"),
    (V1, "{cpu}{container}/cpu.cfs_quota_us", "fast", "limit", "unexpected content"),
    (V1, "{cpu}{pod}/cpu.cfs_period_us", "0", "pod_limit", "unexpected content"),
    (V2, "{cpu}{container}/cpu.max", "100000 100000 7", "limit", "unexpected content"),
    (V2, "{cpu}{pod}/cpu.max", "\x00\x01", "pod_limit", "unexpected content"),
    (V1, "{cpuset}{container}/cpuset.cpus", "0-zz", "cpuset", "unexpected content"),
    (V2, "{cpuset}/kubepods.slice/cpuset.cpus.effective", "99999999999-1", "node_cpuset", "unexpected content"),
])
def test_garbage_is_unknown(tmp_path, shape, rel, text, field, words):
    root = pod_machine(tmp_path, cpuset="0-3", edit={rel: text}, **shape)
    p = pod_facts(root)
    value = getattr(p, field)
    assert isinstance(value, Unknown) and words in value.why, value
    source = {"request_millicores": p.request_source, "limit": p.limit_source, "pod_limit": p.pod_limit_source,
              "cpuset": p.cpuset_source, "node_cpuset": None}[field]
    if source is not None:
        assert source.kind is Kind.UNKNOWN
    if field in ("cpuset", "node_cpuset"):
        assert p.exclusive is None  # cannot tell without both


def test_missing_and_directory_files(tmp_path):
    root = pod_machine(tmp_path, **V1)
    cpu = os.path.join(root, "sys/fs/cgroup/cpu,cpuacct")
    container = next(d for d, _, files in os.walk(cpu) if "cpu.shares" in files and d.count("/") > cpu.count("/") + 3)
    os.remove(os.path.join(container, "cpu.shares"))
    os.remove(os.path.join(os.path.dirname(container), "cpu.cfs_quota_us"))
    os.mkdir(os.path.join(os.path.dirname(container), "cpu.cfs_quota_us"))
    p = pod_facts(root)
    assert isinstance(p.request_millicores, Unknown) and "No such file" in p.request_millicores.why
    assert isinstance(p.pod_limit, Unknown) and "directory" in p.pod_limit.why.lower()
    assert p.limit == 1.0 and p.pod_request_millicores == 500  # the rest is still read


def test_cgroup_directory_gone(tmp_path):
    """The process's cgroup names a directory that is not there (another mount namespace's view)."""
    import shutil

    root = pod_machine(tmp_path, **V2)
    shutil.rmtree(os.path.join(root, "sys/fs/cgroup/kubepods.slice"))
    p = pod_facts(root)
    for value in (p.request_millicores, p.pod_request_millicores, p.limit, p.pod_limit, p.cpuset):
        assert isinstance(value, Unknown) and "not under /sys/fs/cgroup" in value.why
    assert p.qos == "Burstable" and p.exclusive is None


def test_hostile_path_parts(tmp_path):
    from fake_trees import FakeMachine

    bad_id = "/kubepods/burstable/pod1234/not\x1b[31mid"
    root = FakeMachine(tmp_path).cpus(2).cgroup_v1(bad_id).build()
    p = pod_facts(root)
    assert p.container_id is None and p.container_cgroup is not None
    assert p.container_source.kind is Kind.UNKNOWN and "\x1b" not in p.container_source.text
    for path in ("/kubepods/podZZZ/x", "/kubepods/pod" + "a" * 65 + "/x", "/kubepods.slice/kubepods-pod.slice"):
        assert pod_facts(FakeMachine(tmp_path).cpus(2).cgroup_v1(path).build()) is None, path


def _container_root(root: str) -> str:
    base = os.path.join(root, "proc/self/root")
    os.makedirs(base, exist_ok=True)
    return base


def test_names_through_the_containers_links(tmp_path):
    """/var/run -> /run (absolute, in the container) and namespace -> ..data/namespace, as Kubernetes
    mounts a service account: followed inside the container's root, never into parinfo's."""
    root = pod_machine(tmp_path, **V1)
    base = _container_root(root)
    os.makedirs(f"{base}/etc")
    with open(f"{base}/etc/hostname", "w") as f:
        f.write("web-7d4b9c-x2x5q\n")
    volume = f"{base}/run/secrets/kubernetes.io/serviceaccount"
    os.makedirs(f"{volume}/..2026_11_28", exist_ok=True)
    with open(f"{volume}/..2026_11_28/namespace", "w") as f:
        f.write("shop")
    os.symlink("..2026_11_28", f"{volume}/..data")
    os.symlink("..data/namespace", f"{volume}/namespace")
    os.makedirs(f"{base}/var")
    os.symlink("/run", f"{base}/var/run")
    p = pod_facts(root)
    assert (p.name, p.namespace) == ("web-7d4b9c-x2x5q", "shop")
    assert p.name_source.detail == "/proc/self/root/etc/hostname"
    assert p.namespace_source.detail.endswith("var/run/secrets/kubernetes.io/serviceaccount/namespace")
    assert pod_identity(root).name == "web-7d4b9c-x2x5q"


def test_names_that_lie_or_block(tmp_path):
    root = pod_machine(tmp_path, **V1)
    base = _container_root(root)
    os.makedirs(f"{base}/etc")
    os.mkfifo(f"{base}/etc/hostname")  # a read would wait forever: refused
    volume = f"{base}/run/secrets/kubernetes.io/serviceaccount"
    os.makedirs(volume)
    with open(f"{volume}/namespace", "w") as f:
        f.write("Not A Namespace\x1b")
    os.makedirs(f"{base}/var")
    os.symlink("../../../../../../../etc", f"{base}/var/run")  # climbs no higher than the container's root
    with open(os.path.join(root, "proc/self/environ"), "wb") as f:
        f.write(b"HOSTNAME=" + b"x" * 300 + b"\0")
    name, name_source, namespace, namespace_source = names_of(Proc.of(None, root), root)
    assert name is None and "FIFO" in name_source.text and "HOSTNAME" in name_source.text
    assert namespace is None and "not a name Kubernetes gives" in namespace_source.text
    assert "\x1b" not in namespace_source.text.replace("\\x1b", "")  # shown escaped by repr


def test_hostname_variable_when_no_file(tmp_path):
    root = pod_machine(tmp_path, **V2)
    _container_root(root)
    with open(os.path.join(root, "proc/self/environ"), "wb") as f:
        f.write(b"PATH=/bin\0HOSTNAME=api-0\0")
    p = pod_facts(root)
    assert p.name == "api-0" and p.name_source.kind is Kind.VARIABLE
    assert p.namespace is None and p.namespace_source.kind is Kind.UNKNOWN


def test_link_loop_in_the_container(tmp_path):
    root = pod_machine(tmp_path, **V1)
    base = _container_root(root)
    os.makedirs(f"{base}/etc")
    os.symlink("/etc/hostname", f"{base}/etc/hostname")  # points at itself
    name, source, _, _ = names_of(Proc.of(None, root), root)
    assert name is None and "links" in source.text


def test_an_absolute_link_stays_in_the_containers_root(tmp_path):
    """A link to an absolute path is the container's path: a file of that name on this machine is never read."""
    import parinfo.safe_file as safe_file

    outside = tmp_path / "node-secret"
    outside.write_text("node-secret-name")
    root = pod_machine(tmp_path, **V1)
    base = _container_root(root)
    os.makedirs(f"{base}/etc")
    os.symlink(str(outside), f"{base}/etc/hostname")
    with pytest.raises(FileNotFoundError):
        safe_file.open_in_root(base, "etc/hostname")
    mirror = f"{base}{outside}"  # the same path inside the container's root: that one is read
    os.makedirs(os.path.dirname(mirror), exist_ok=True)
    with open(mirror, "w") as f:
        f.write("pod-name-0")
    name, source, _, _ = names_of(Proc.of(None, root), root)
    assert name == "pod-name-0" and source.detail == "/proc/self/root/etc/hostname"
