"""Throttling, pressure and memory-limit counters on fake cgroup trees (v1, v2, missing, unreadable),
and the live rules and the watch verdict on hand-made facts."""
from __future__ import annotations

import pytest
from fake_trees import FakeMachine

from parinfo.diagnostics import live_rules, process_rules
from parinfo.diagnostics.model import Report
from parinfo.machine.memlimit import memory_facts
from parinfo.machine.pressure import cpu_counters, cpu_pressure, read_pressure
from parinfo.outside.remote import parse_limits
from parinfo.process.tasks import parse_stat
from parinfo.records.convert import dump
from parinfo.records.unknown import Unknown
from parinfo.watching.model import GroupUse, Sample, ThrottleUse
from parinfo.watching.verdict import verdict

V2_STAT = "usage_usec 9000000\nuser_usec 8000000\nsystem_usec 1000000\nnr_periods 4567\nnr_throttled 3115\n" \
          "throttled_usec 12300000\nnr_bursts 0\nburst_usec 0\n"
V1_STAT = "nr_periods 200\nnr_throttled 50\nthrottled_time 2500000000\nnr_bursts 0\nburst_time 0\n"
PSI = "some avg10=12.50 avg60=3.00 avg300=1.00 total=4000000\nfull avg10=2.00 avg60=0.50 avg300=0.10 total=900000\n"


def test_v2_counters_come_from_the_level_with_the_quota(tmp_path):
    root = (FakeMachine(tmp_path).cpus(8)
            .cgroup_v2("/slice/job", cpu_max={"/slice": "150000 100000", "/slice/job": "max 100000"})
            .file("sys/fs/cgroup/slice/cpu.stat", V2_STAT)
            .file("sys/fs/cgroup/slice/job/cpu.stat", "usage_usec 5\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0")
            .build())
    c = cpu_counters(root)
    assert c.version == "v2" and c.unknown is None
    assert [t.cgroup for t in c.levels] == ["/sys/fs/cgroup/slice"]
    w = c.worst
    assert (w.quota, w.periods, w.throttled, w.throttled_usec) == (1.5, 4567, 3115, 12300000)
    assert round(w.ratio, 3) == 0.682


def test_v1_counters_read_throttled_time_in_nanoseconds(tmp_path):
    root = (FakeMachine(tmp_path).cpus(4).cgroup_v1("/docker/abc", quota={"/docker/abc": (50000, 100000)})
            .file("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.stat", V1_STAT).build())
    c = cpu_counters(root)
    assert c.version == "v1"
    assert (c.worst.quota, c.worst.throttled, c.worst.throttled_usec) == (0.5, 50, 2500000)


def test_no_quota_means_no_levels_and_nothing_unknown(tmp_path):
    root = FakeMachine(tmp_path).cpus(4).cgroup_v2("/job", cpu_max={"/job": "max 100000"}).build()
    c = cpu_counters(root)
    assert c.levels == () and c.worst is None and c.unknown is None


def test_missing_cpu_stat_is_unknown_with_the_reason(tmp_path):
    root = FakeMachine(tmp_path).cpus(4).cgroup_v2("/job", cpu_max={"/job": "50000 100000"}).build()
    c = cpu_counters(root)
    assert c.levels == ()
    assert "cannot read /sys/fs/cgroup/job/cpu.stat" in c.unknown and "No such file" in c.unknown
    assert dump(cpu_counters(root))["unknown"] == c.unknown


def test_unreadable_and_garbage_cpu_stat_are_unknown(tmp_path):
    unreadable = (FakeMachine(tmp_path).cpus(4).cgroup_v2("/job", cpu_max={"/job": "50000 100000"})
                  .directory("sys/fs/cgroup/job/cpu.stat").build())
    assert "cannot read /sys/fs/cgroup/job/cpu.stat" in cpu_counters(unreadable).unknown
    garbage = (FakeMachine(tmp_path).cpus(4).cgroup_v2("/job", cpu_max={"/job": "50000 100000"})
               .file("sys/fs/cgroup/job/cpu.stat", "nr_periods lots\n").build())
    assert "unexpected content" in cpu_counters(garbage).unknown
    no_keys = (FakeMachine(tmp_path).cpus(4).cgroup_v2("/job", cpu_max={"/job": "50000 100000"})
               .file("sys/fs/cgroup/job/cpu.stat", "usage_usec 5\n").build())
    assert "no nr_periods, nr_throttled, throttled_usec in" in cpu_counters(no_keys).unknown


def test_unreadable_process_cgroup_is_unknown(tmp_path):
    root = (FakeMachine(tmp_path).cpus(4).cgroup_v2("/job", cpu_max={"/job": "50000 100000"})
            .remove("proc/self/cgroup").build())
    assert "cannot read /proc/self/cgroup" in cpu_counters(root).unknown
    assert "cannot read /proc/self/cgroup" in memory_facts(root).unknown["limit"]


def test_pressure_v2_system_and_cgroup(tmp_path):
    root = (FakeMachine(tmp_path).cpus(4).cgroup_v2("/job")
            .file("proc/pressure/cpu", PSI).file("sys/fs/cgroup/job/cpu.pressure", PSI).build())
    p = cpu_pressure(root)
    assert p.system.some_avg10 == 12.5 and p.system.some_total_usec == 4000000
    assert p.cgroup.full_total_usec == 900000 and p.cgroup.source.text == "/sys/fs/cgroup/job/cpu.pressure"


def test_pressure_missing_garbage_and_v1_only(tmp_path):
    missing = FakeMachine(tmp_path).cpus(4).cgroup_v2("/job").build()
    p = cpu_pressure(missing)
    assert p.system == Unknown("cannot read /proc/pressure/cpu: No such file or directory; the kernel has no PSI")
    assert p.cgroup == Unknown("cannot read /sys/fs/cgroup/job/cpu.pressure: No such file or directory")
    bad = FakeMachine(tmp_path).cpus(4).cgroup_v2("/job").file("proc/pressure/cpu", "some avg10=x").build()
    assert cpu_pressure(bad).system == Unknown("unexpected content in /proc/pressure/cpu: 'some avg10=x'")
    v1 = FakeMachine(tmp_path).cpus(4).cgroup_v1("/job").file("proc/pressure/cpu", PSI).build()
    assert cpu_pressure(v1).cgroup == Unknown("no cgroup v2 hierarchy")
    some_only = FakeMachine(tmp_path).cpus(4).file("proc/pressure/cpu", PSI.splitlines()[0]).build()
    assert read_pressure(some_only, "proc/pressure/cpu").full_avg10 is None


def test_memory_limit_v2_tightest_ancestor_and_tasks(tmp_path):
    root = (FakeMachine(tmp_path).cpus(4).cgroup_v2("/a/b")
            .file("sys/fs/cgroup/a/memory.max", str(512 << 20)).file("sys/fs/cgroup/a/b/memory.max", "max")
            .file("sys/fs/cgroup/a/b/pids.current", "40").build())
    m = memory_facts(root)
    assert (m.limit, m.limit_source.detail) == (512 << 20, "/sys/fs/cgroup/a/memory.max")
    assert (m.tasks, m.tasks_source.detail) == (40, "/sys/fs/cgroup/a/b/pids.current")


def test_memory_limit_v1_unlimited_value_is_none(tmp_path):
    root = (FakeMachine(tmp_path).cpus(4).cgroup_v1("/job")
            .file("proc/self/mountinfo", "22 1 0:21 / / rw - ext4 /dev/vda1 rw\n"
                  "40 22 0:40 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
            .file("sys/fs/cgroup/memory/job/memory.limit_in_bytes", "9223372036854771712").build())
    m = memory_facts(root)
    assert m.limit is None and m.limit_source.text == "none" and "limit" not in m.unknown


def test_parse_stat_names_with_spaces_and_parentheses():
    line = "1234 (my (odd) name) R 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 " + " ".join(["0"] * 23) + " 3 0"
    name, state, ticks, cpu = parse_stat(line)
    assert (name, state, ticks, cpu) == ("my (odd) name", "R", 300, 3)




def test_parse_limits():
    text = ("Limit                     Soft Limit           Hard Limit           Units\n"
            "Max data size             unlimited            unlimited            bytes\n"
            "Max stack size            8388608              unlimited            bytes\n"
            "Max address space         1073741824           unlimited            bytes\n")
    lim = parse_limits(text)
    assert (lim.stack, lim.data, lim.address_space, lim.thread_stack) == (8388608, None, 1 << 30, 8388608)
    assert parse_limits(text.replace("8388608   ", "unlimited ")).thread_stack == 2 << 20


# -- rules over hand-made live sections ------------------------------------------------------------
# The rules read typed reports: the hand-made sections go through the report's one parse path.

def throttled(s):
    return live_rules.throttled(Report.from_dict(s))


def thread_stack_budget(s):
    return live_rules.thread_stack_budget(Report.from_dict(s))


def runnable_above_usable(s):
    return live_rules.runnable_above_usable(Report.from_dict(s))


def diagnose(s):
    return process_rules.diagnose(Report.from_dict(s))


def _worst(throttled_n, periods, quota=1.5):
    return {"live": {"throttling": {"worst": {"cgroup": "/sys/fs/cgroup/job", "quota": quota,
                                              "periods": periods, "throttled": throttled_n,
                                              "throttled_usec": 12_300_000,
                                              "ratio": throttled_n / periods}}}}


def test_throttled_fires_on_a_high_cumulative_ratio_and_names_the_quota():
    (f,) = throttled(_worst(3115, 4567))
    assert f.id == "throttled" and f.severity == "warning"
    assert "68% of its CPU periods" in f.message and "1.5-CPU quota" in f.message
    assert "keep the busy threads of this cgroup to 1" in f.fix


@pytest.mark.parametrize("section", [_worst(10, 20), _worst(60, 1000), {"live": {"throttling": {"worst": None}}},
                                     {}])
def test_throttled_needs_evidence(section):
    assert throttled(section) == []


def test_thread_stack_budget_against_the_cgroup_limit():
    s = {"live": {"stack_budget": {"thread_stack": 8 << 20, "limits": [
        {"name": "the cgroup memory limit", "bytes": 256 << 20, "threads": 64, "source": "memory.max"}]}}}
    (f,) = thread_stack_budget(s)
    assert f.severity == "warning" and "64 threads x 8 MiB stacks = 512 MiB, 200%" in f.message
    assert "at most 32 threads fit" in f.fix
    s["live"]["stack_budget"]["limits"][0]["threads"] = 20
    assert thread_stack_budget(s)[0].severity == "info"
    s["live"]["stack_budget"]["limits"][0]["threads"] = 4
    assert thread_stack_budget(s) == []


def test_runnable_above_usable_and_diagnose_runs_it_once():
    s = {"machine": {"usable_cpus": 2}, "live": {"tree": {"runnable": 6.0, "processes": 3, "seconds": 0.3}}}
    (f,) = runnable_above_usable(s)
    assert "6.0 threads wanted a CPU" in f.message and "3 processes" in f.message
    assert runnable_above_usable({"machine": {"usable_cpus": 2}, "live": {"tree": {"runnable": 2.2}}}) == []
    assert [x.id for x in diagnose(s)] == ["runnable-above-usable"]


def _sample(**kw):
    base = dict(time=0.0, interval=1.0, pid=42, processes=1, threads=9, usable_cpus=1, quota=0.5,
                cpu_percent=50.0, runnable=3.8, running_now=4, involuntary=300,
                groups=(GroupUse("openblas", 4, 40.0, 3.5, 250), GroupUse("main thread", 1, 10.0, 0.3, 5)),
                throttling=ThrottleUse("/sys/fs/cgroup/job", 0.5, 10, 9, 450000, 90.0, 45.0),
                throttling_unknown=None, pressure_some=30.0, pressure_cgroup_some=30.0)
    base.update(kw)
    return Sample(**base)


def test_verdict_names_quota_and_largest_pool():
    v = verdict(_sample())
    assert v.startswith("throttled in 90% of periods (9 of 10): 3.8 runnable threads against a 0.5-CPU quota")
    assert "the largest pool is openblas (4 threads" in v and "parinfo apply container" in v


def test_verdict_queueing_pressure_and_ok():
    queued = verdict(_sample(throttling=None, quota=None, usable_cpus=2, runnable=5.0))
    assert queued.startswith("5.0 runnable threads against 2 usable CPUs: threads queue")
    pressed = verdict(_sample(throttling=None, quota=None, usable_cpus=4, runnable=1.0, pressure_some=45.0))
    assert pressed.startswith("CPU pressure on the machine: some task waited for a CPU 45%")
    calm = verdict(_sample(throttling=None, quota=None, usable_cpus=4, runnable=1.0, pressure_some=1.0,
                           pressure_cgroup_some="unknown (no cgroup v2 hierarchy)"))
    assert calm.startswith("ok: 0.5 CPUs busy, 1.0 runnable thread on 4 usable CPUs")


def test_a_first_sample_with_missing_figures_is_not_ok():
    """The field case: a 0.5-CPU quota, 1.2 runnable threads, 100% CPU pressure, and no throttling
    figures of the interval's own: judged from the counters since the cgroup began, or, without
    throttling there, as threads queueing under pressure; never "ok"."""
    from parinfo.machine.pressure import Throttling

    since = Throttling("/sys/fs/cgroup/job", 0.5, 40, 38, 1_900_000)
    first = verdict(_sample(throttling=None, runnable=1.2, pressure_some=100.0, throttling_since_start=since))
    assert first.startswith("throttled in 95% of periods (38 of 40 since the cgroup began; none of this interval")
    calm = Throttling("/sys/fs/cgroup/job", 0.5, 40, 0, 0)
    queued = verdict(_sample(throttling=None, runnable=1.2, pressure_some=100.0, throttling_since_start=calm))
    assert queued.startswith("1.2 runnable threads against 1 usable CPU: threads queue"), queued
    idle = verdict(_sample(throttling=None, runnable=0.3, pressure_some=1.0, pressure_cgroup_some=1.0,
                           throttling_since_start=calm))
    assert idle.startswith("ok: ") and "no period of this interval read yet: 0 of 40 periods" in idle, idle


# -- a cgroup's own CPU time and processes (watch without --pid) ----------------------------------------

def test_cgroup_use_v2_reads_usage_usec_and_the_processes_below(tmp_path):
    from parinfo.machine.cgroup_use import cgroup_use

    root = (FakeMachine(tmp_path).cpus(4).cgroup_v2("/job", cpu_max={"/job": "50000 100000"})
            .file("sys/fs/cgroup/job/cpu.stat", V2_STAT).file("sys/fs/cgroup/job/cgroup.procs", "12\n7\n")
            .file("sys/fs/cgroup/job/inner/cgroup.procs", "30\n").file("sys/fs/cgroup/cgroup.procs", "1\n")
            .build())
    use = cgroup_use(root)
    assert use.cgroup == "/sys/fs/cgroup/job" and use.usage_ns == 9_000_000 * 1000
    assert use.pids == (7, 12, 30)  # its own and its child cgroup's, never its parent's


def test_cgroup_use_v1_reads_cpuacct_usage_and_says_why_not(tmp_path):
    from parinfo.machine.cgroup_use import cgroup_use

    base = "sys/fs/cgroup/cpu,cpuacct/docker/abc"
    root = (FakeMachine(tmp_path).cpus(4).cgroup_v1("/docker/abc", quota={"/docker/abc": (50000, 100000)})
            .file(f"{base}/cpuacct.usage", "123456789").file(f"{base}/cgroup.procs", "5").build())
    use = cgroup_use(root)
    assert (use.usage_ns, use.pids) == (123456789, (5,))
    (tmp_path / "b").mkdir()
    broken = (FakeMachine(tmp_path / "b").cpus(4).cgroup_v1("/docker/abc").file(f"{base}/cpuacct.usage", "x")
              .build())
    use = cgroup_use(broken)
    assert isinstance(use.usage_ns, Unknown) and "unexpected content" in str(use.usage_ns)
    assert use.pids == ()  # no process placed in it: an empty list, not unknown
