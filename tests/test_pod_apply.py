"""The container profile in a pod (fake kubelet-shaped trees, v1 and v2, both drivers): pod_cpus is
the limit (the container's, or the pod's when tighter), else the request rounded as the quota
rounding says, else the node; the plan and the pod section say which, and that a request is no limit."""
from __future__ import annotations

import json

import pytest
from pod_trees import pod_machine

from parinfo.machine.pod import pod_facts
from parinfo.machine.pod_cpus import NOT_A_LIMIT, of_facts
from parinfo.machine.topology import machine_facts
from parinfo.profiles.loading import resolve_profile, validate_profile
from parinfo.records.source import Kind

KINDS = [("v1", "cgroupfs"), ("v2", "systemd")]

# (case, the pod's shape, pod_cpus on an 8-CPU node, words the reason holds)
SHAPES = [
    ("guaranteed-whole", dict(qos="Guaranteed", request=2000, pod_request=2000, limit=2, pod_limit=2), 2,
     "from the CPU limit 2 CPUs"),
    ("guaranteed-fraction", dict(qos="Guaranteed", request=1500, pod_request=1500, limit=1.5, pod_limit=1.5), 1,
     "from the CPU limit 1.5 CPUs"),
    ("guaranteed-half", dict(qos="Guaranteed", request=500, pod_request=500, limit=0.5, pod_limit=0.5), 1,
     "from the CPU limit 0.5 CPUs"),
    ("burstable-limit", dict(qos="Burstable", request=500, pod_request=500, limit=3), 3, "from the CPU limit 3 CPUs"),
    ("burstable-request-only", dict(qos="Burstable", request=1500, pod_request=1500), 1,
     "from the pod's CPU request 1500m (no limit): its share of the node by weight, floor(1.5) = 1"),
    ("burstable-request-2500m", dict(qos="Burstable", request=2500, pod_request=2500), 2, "floor(2.5) = 2"),
    ("burstable-request-above-node", dict(qos="Burstable", request=12000, pod_request=12000), 8,
     "floor(12) = 12, at most usable_cpus 8"),
    ("besteffort", dict(qos="BestEffort"), 8, "no CPU request and no limit (as in a BestEffort pod): the node's "
                                              "usable CPUs 8"),
    ("pod-limit-tighter", dict(qos="Burstable", request=1000, pod_request=1000, limit=4, pod_limit=2), 2,
     "from the CPU limit 2 CPUs"),
]


@pytest.mark.parametrize("version,driver", KINDS)
@pytest.mark.parametrize("case,shape,want,words", SHAPES, ids=[s[0] for s in SHAPES])
def test_the_container_profile_counts_what_the_pod_pays_for(tmp_path, version, driver, case, shape, want, words):
    root = pod_machine(tmp_path, version=version, driver=driver, **shape)
    facts = machine_facts(root)
    plan = resolve_profile("container", facts)
    assert plan.intra_op.value == want
    assert plan.intra_op.why.startswith(f"pod_cpus = {want} (") and words in plan.intra_op.why
    assert plan.env["OMP_NUM_THREADS"] == plan.env["OPENBLAS_NUM_THREADS"] == str(want)
    assert (NOT_A_LIMIT in plan.intra_op.why) == ("request" in case)
    pod = pod_facts(root, machine=facts)
    assert pod is not None and pod.pod_cpus == want and words in pod.pod_cpus_source.text
    if "request" in case:  # usable_cpus, what the kernel enforces, is the node's: the request caps nothing
        assert facts.usable_cpus == 8 and pod.usable_cpus == 8
        assert pod.pod_cpus_source.kind is Kind.FILE and pod.pod_cpus_source.detail.endswith(
            "cpu.weight" if version == "v2" else "cpu.shares")


def test_the_request_is_rounded_as_the_quota_rounding_says(tmp_path):
    root = pod_machine(tmp_path, version="v1", driver="cgroupfs", qos="Burstable", request=1500, pod_request=1500)
    facts = machine_facts(root)
    ceil = validate_profile({"version": 1, "name": "c", "extends": "container", "quota_rounding": "ceil"})
    plan = resolve_profile(ceil, facts)
    assert plan.intra_op.value == 2 and "ceil(1.5) = 2" in plan.intra_op.why
    assert machine_facts(root, environ={"PARINFO_QUOTA_ROUNDING": "nearest"}).pod_request == 1500
    assert of_facts(machine_facts(root, environ={"PARINFO_QUOTA_ROUNDING": "nearest"}))[0] == 2


def test_a_request_that_cannot_be_read_leaves_the_node(tmp_path):
    root = pod_machine(tmp_path, version="v1", driver="cgroupfs", qos="Burstable", request=1500,
                       edit={"{cpu}{container}/cpu.shares": "banana"})
    facts = machine_facts(root)
    plan = resolve_profile("container", facts)
    assert plan.intra_op.value == 8 and "the pod's CPU request is unknown (" in plan.intra_op.why


def test_outside_a_pod_pod_cpus_is_usable_cpus_and_the_json_is_unchanged(tmp_path):
    from fake_trees import FakeMachine

    from parinfo.records.convert import dump

    m = FakeMachine(tmp_path).cpus(8)
    m.cgroup_v2("/system.slice/app.service", cpu_max={"/system.slice/app.service": "250000 100000"})
    facts = machine_facts(m.build())
    assert (facts.pod_request, of_facts(facts)[0], facts.usable_cpus) == (None, 2, 2)
    assert resolve_profile("container", facts).intra_op.value == 2
    assert "pod_request" not in json.dumps(dump(facts))


def test_the_pod_section_says_a_request_is_not_a_limit(tmp_path):
    from parinfo.diagnostics.pod_section import pod_rows
    from parinfo.records.convert import dump

    root = pod_machine(tmp_path, version="v2", driver="cgroupfs", qos="Burstable", request=1500, pod_request=1500)
    pod = pod_facts(root)
    assert pod is not None
    rows = dict(pod_rows(pod))
    assert rows["pod CPUs"].startswith("1 (from the pod's CPU request 1500m (no limit)")
    assert rows["pod CPUs"].endswith(f"; {NOT_A_LIMIT})") and rows["usable CPUs"].startswith("8 (")
    data = dump(pod)
    assert data["pod_cpus"] == 1 and NOT_A_LIMIT in data["pod_cpus_source"]["text"]


def test_instances_see_the_pods_bound_within_their_cpus(tmp_path):
    root = pod_machine(tmp_path, version="v1", driver="cgroupfs", qos="Burstable", request=3000, pod_request=3000)
    prof = validate_profile({"version": 1, "name": "i", "instances": 2, "intra_op": "pod_cpus"})
    plan = resolve_profile(prof, machine_facts(root))
    assert [i.intra_op for i in plan.instances] == [3, 3]
    prof = validate_profile({"version": 1, "name": "i", "instances": 4, "intra_op": "pod_cpus"})
    assert [i.intra_op for i in resolve_profile(prof, machine_facts(root)).instances] == [2, 2, 2, 2]
