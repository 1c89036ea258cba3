"""In-place resize told from two readings of fake kubelet-shaped trees: what changed (request,
container and pod limit, cpuset, a plain cgroup's quota), from what to what; the runtime's
follower recording it with the counts that followed (or none, for a request); host's resize log
counting it; and the ``pool-fixed-after-resize`` rule on hand-made pools."""
from __future__ import annotations

import pytest
from pod_trees import pod_machine

from parinfo.diagnostics.resize_rules import pool_fixed_after_resize
from parinfo.host.resizes import ResizeLog, resize_lines
from parinfo.machine import resize
from parinfo.machine.resize import REQUEST_NO_CAP, CpuBudget, budget_of, resized
from parinfo.machine.topology import machine_facts
from parinfo.records.convert import dump
from parinfo.records.unknown import Unknown

SHAPES = [("v1", "cgroupfs"), ("v1", "systemd"), ("v2", "cgroupfs"), ("v2", "systemd")]


def _budget(root: str) -> CpuBudget:
    facts = machine_facts(root)
    return budget_of(facts.quota, facts.cpuset, facts.cgroup_path, facts.affinity, root)


def _two(tmp_path, before: dict, after: dict, **common) -> tuple[CpuBudget, CpuBudget]:
    return (_budget(pod_machine(tmp_path, **common, **before)),
            _budget(pod_machine(tmp_path, **common, **after)))


@pytest.mark.parametrize("version, driver", SHAPES)
def test_a_container_limit_rewritten(tmp_path, version, driver):
    old, new = _two(tmp_path, {"limit": 2, "pod_limit": 2}, {"limit": 1, "pod_limit": 1},
                    version=version, driver=driver, qos="Guaranteed", request=2000, pod_request=2000)
    assert old.pod and (old.limit, new.limit) == (2.0, 1.0)
    assert resized(old, new) == ["limit 2 CPUs -> 1 CPUs", "pod limit 2 CPUs -> 1 CPUs"]


@pytest.mark.parametrize("version, driver", SHAPES)
def test_a_request_of_a_request_only_pod(tmp_path, version, driver):
    old, new = _two(tmp_path, {"request": 500}, {"request": 1000}, version=version, driver=driver, qos="Burstable")
    assert (old.request, new.request, new.limit) == (500, 1000, None)
    assert resized(old, new) == [f"request 500m -> 1000m ({REQUEST_NO_CAP})"]


@pytest.mark.parametrize("version, driver", SHAPES)
def test_a_pod_level_limit_set(tmp_path, version, driver):
    old, new = _two(tmp_path, {"pod_limit": None}, {"pod_limit": 1.5}, version=version, driver=driver,
                    qos="Burstable", request=500)
    assert resized(old, new) == ["pod limit none -> 1.5 CPUs"]
    assert (old.quota, new.quota) == (None, 1.5)  # the binding quota moved: said once, as the pod's


@pytest.mark.parametrize("version, driver", SHAPES)
def test_a_cpuset_narrowed(tmp_path, version, driver):
    old, new = _two(tmp_path, {"cpuset": "0-3"}, {"cpuset": "2-3"}, version=version, driver=driver,
                    qos="Guaranteed", request=2000, limit=2, pod_limit=2)
    assert resized(old, new) == ["cpuset 0-3 -> 2-3"]


def test_nothing_changed_says_nothing(tmp_path):
    old, new = _two(tmp_path, {}, {}, version="v1", driver="cgroupfs", qos="Burstable", request=250, limit=1.5)
    assert old == new and resized(old, new) == []


def test_outside_a_pod_the_quota_and_the_affinity():
    old = CpuBudget(2.0, (0, 1), (0, 1))
    assert resized(old, CpuBudget(0.5, (0, 1), (1,))) == ["quota 2 CPUs -> 0.5 CPUs", "affinity 0-1 -> 1"]
    assert resized(old, CpuBudget(None, None, (0, 1))) == ["quota 2 CPUs -> none", "cpuset 0-1 -> all"]


def test_an_unreadable_value_is_said_and_the_same_one_is_no_change():
    a = CpuBudget(None, None, pod=True, request=Unknown("permission"), limit=1.0)
    b = CpuBudget(None, None, pod=True, request=Unknown("permission"), limit=1.0)
    assert resized(a, b) == []
    c = CpuBudget(None, None, pod=True, request=500, limit=1.0)
    assert resized(a, c) == [f"request unknown (permission) -> 500m ({REQUEST_NO_CAP})"]


def test_the_host_log_counts_each_resize_and_keeps_the_last():
    log = ResizeLog()
    one, two, half = (CpuBudget(q, None, pod=True, limit=q) for q in (1.0, 2.0, 0.5))
    log.compare("/kubepods/podx/c", two, two, (2, 2))
    log.forget({"/kubepods/podx/c", "/other"})
    assert log.counts() == {"/kubepods/podx/c": 0, "/other": 0}
    log.compare("/kubepods/podx/c", two, one, (2, 1))
    log.compare("/kubepods/podx/c", one, half, (1, 1))
    r = log.by_cgroup["/kubepods/podx/c"]
    assert (r.resizes, r.changes, r.usable_cpus, r.limit) == (2, ["limit 1 CPUs -> 0.5 CPUs"], [1, 1], 0.5)
    assert log.counts()["/kubepods/podx/c"] == 2
    assert "boot_s" not in dump(r) and dump(r)["changes"] == ["limit 1 CPUs -> 0.5 CPUs"]
    assert resize_lines([r])[1].startswith("  /kubepods/podx/c: 2, at ")
    log.forget({"/other"})
    assert log.by_cgroup == {} and log.counts() == {"/other": 0}


@pytest.mark.parametrize("pools, before, after, fires", [
    ([("openblas", 2)], 2, 1, True),      # sized for 2, left 1
    ([("openblas", 1)], 2, 1, False),     # within the new CPUs
    ([("openblas", 8)], 2, 1, False),     # above the old CPUs too: not sized for them (another finding's)
    ([("openblas", 2)], 1, 2, False),     # widened
    ([("libgomp", 4), ("openblas", 1)], 4, 2, True),
])
def test_the_rule_fires_for_a_pool_sized_within_the_old_cpus_only(pools, before, after, fires):
    f = pool_fixed_after_resize("cgroup /k", 7, "python", pools, before, after, "12:00:00", ["limit 4 -> 2"],
                                ["OMP_NUM_THREADS"])
    assert (f is not None) == fires
    if f is not None:
        assert f.id == "pool-fixed-after-resize" and f.severity == "warning"
        assert "pid 7" in f.message and "12:00:00" in f.message and f"OMP_NUM_THREADS={after}" in f.fix


def test_the_follower_records_a_resize_and_what_followed(tmp_path, monkeypatch):
    """The runtime's follower on fake facts: a limit rewritten (the intra-op default follows, said),
    then a request alone (recorded, nothing follows)."""
    import parinfo.runtime.follow as follow
    from parinfo.runtime.native import NativeLimits
    from parinfo.runtime.settings import RuntimeSettings

    roots = {"now": pod_machine(tmp_path, version="v1", driver="cgroupfs", qos="Burstable", request=500,
                                limit=4, cpus=4, node_cpuset="0-3")}
    import parinfo.runtime.settings as runtime_settings

    monkeypatch.setattr(follow, "read_facts", lambda: machine_facts(roots["now"]))
    monkeypatch.setattr(runtime_settings, "read_facts", lambda: machine_facts(roots["now"]))
    monkeypatch.setattr(resize, "budget_of", lambda *a: budget_of(*a, root=roots["now"]))
    settings = RuntimeSettings()
    f = follow.BudgetFollower(settings, NativeLimits(settings), lambda *a: None)
    assert settings.intra()[0] == 4
    f.refresh()
    assert f.changes == []
    roots["now"] = pod_machine(tmp_path, version="v1", driver="cgroupfs", qos="Burstable", request=500,
                               limit=2, cpus=4, node_cpuset="0-3")
    state = f.refresh()
    last = state.changes[-1]
    assert (last.usable_cpus, last.resized, last.counts) == ([4, 2], ["limit 4 CPUs -> 2 CPUs"], ["intra-op 4 -> 2"])
    assert settings.intra()[0] == 2
    roots["now"] = pod_machine(tmp_path, version="v1", driver="cgroupfs", qos="Burstable", request=1000,
                               limit=2, cpus=4, node_cpuset="0-3")
    last = f.refresh().changes[-1]
    assert (last.resized, last.counts) == ([f"request 500m -> 1000m ({REQUEST_NO_CAP})"], [])
    assert settings.intra()[0] == 2 and len(f.changes) == 2
    assert "resized" in dump(last) and "resized" not in dump(type(last)(at="x"))


def test_show_says_what_the_resize_changed_beside_the_usable_cpus():
    from test_diagnostics_rules import base

    from parinfo.diagnostics import sections
    from parinfo.diagnostics.model import Report

    s = base(1)
    s["runtime"]["follow"] = {"enabled": True, "changes": [
        {"at": "12:34:56", "usable_cpus": [2, 1], "counts": ["intra-op 2 -> 1"],
         "resized": ["limit 2 CPUs -> 1 CPUs", "pod limit 2 CPUs -> 1 CPUs"]}]}
    rows = {r.cells[0]: r.cells[1] for r in sections.backend(Report.from_dict(s)).rows if len(r.cells) == 2}
    assert rows["follows quota"] == ("on; usable CPUs 2 -> 1 at 12:34:56 "
                                     "(limit 2 CPUs -> 1 CPUs; pod limit 2 CPUs -> 1 CPUs)")
    del s["runtime"]["follow"]["changes"][0]["resized"]  # a report without a resize reads as before
    rows = {r.cells[0]: r.cells[1] for r in sections.backend(Report.from_dict(s)).rows if len(r.cells) == 2}
    assert rows["follows quota"] == "on; usable CPUs 2 -> 1 at 12:34:56"
