"""Spin evidence (parinfo.process.spin): in a real libgomp process under a real 0.5-CPU quota, the pool's
worker spins between short regions with OMP_WAIT_POLICY=active (found, and the quota throttles it in
the same window) and sleeps with OMP_WAIT_POLICY=passive (nothing found, no throttling); on crafted
readings, a pool that works (its calling thread runnable throughout) is no spin."""
from __future__ import annotations

import os
import sys
import time

import pytest
from real_cgroup import quota_cgroup
from spin_workload import child_argv, libgomp, started

from parinfo.machine.pressure import cpu_counters
from parinfo.machine.procfs import Proc
from parinfo.process import libraries as reg
from parinfo.process.spin import idle_spin
from parinfo.process.tasks import ThreadStat, thread_stats
from parinfo.watching.sample import throttle_use

WINDOW_S = 2.0


def _window(policy: str) -> tuple[object, int, int]:
    """Run the workload with ``policy`` in a fresh 0.5-CPU cgroup: (spin evidence, throttled periods,
    periods) over one window."""
    gomp = libgomp()
    if gomp is None:
        pytest.skip("no libgomp (scikit-learn's wheel or the system's)")
    with quota_cgroup(0.5) as made:
        if isinstance(made, str):
            pytest.skip(made)
        cg, _ = made
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        env["OMP_WAIT_POLICY"] = policy
        with started(child_argv(sys.executable, gomp, 2, WINDOW_S + 3, 0.005), env, cg) as (pid, _):
            time.sleep(0.5)
            proc = Proc.of(pid)
            t0, s0, c0 = time.monotonic(), thread_stats(proc), cpu_counters("/", proc)
            time.sleep(WINDOW_S)
            t1, s1, c1 = time.monotonic(), thread_stats(proc), cpu_counters("/", proc)
    throttle, why = throttle_use(c0, c1, t1 - t0)
    assert throttle is not None, why
    return idle_spin(s0, s1, pid, t1 - t0), throttle.throttled, throttle.periods


def test_active_wait_policy_spins_and_is_throttled_under_a_quota():
    found, throttled, periods = _window("active")
    assert found is not None
    assert len(found.threads) == 1  # two OpenMP threads: the calling one and one worker
    worker = found.threads[0]
    assert worker.runnable_percent >= 90 and worker.cpu_percent >= 1.5 * found.caller_cpu_percent
    assert worker.cpu_percent <= 60  # capped by the 0.5-CPU quota: "near 100% CPU" would miss it
    assert found.idle_cpu_percent > 10
    assert throttled >= periods // 2 > 0


def test_passive_wait_policy_sleeps_and_is_not_throttled():
    found, throttled, periods = _window("passive")
    assert found is None
    assert periods > 0 and throttled <= periods // 10


def _stat(tid: int, cpu_ms: float, wait_ms: float | None) -> ThreadStat:
    return ThreadStat(tid, "python", "R", int(cpu_ms * 1e6), None if wait_ms is None else int(wait_ms * 1e6), 0, 0)


def test_a_pool_at_work_shares_cpu_with_its_caller_and_is_no_spin():
    before = [_stat(10, 0, 0), _stat(11, 0, 0)]
    after = [_stat(10, 250, 750), _stat(11, 300, 700)]  # both runnable the whole second, CPU alike
    assert idle_spin(before, after, 10, 1.0) is None
    spun = [_stat(10, 100, 900), _stat(11, 300, 700)]  # the caller runnable throughout, the worker ran 3x
    found = idle_spin(before, spun, 10, 1.0)
    assert found is not None and found.idle_cpu_percent == 20.0


def test_crafted_spin_counts_cpu_beyond_the_caller_and_skips_new_and_unkept_threads():
    before = [_stat(10, 0, 0), _stat(11, 0, 0), _stat(13, 0, None), _stat(14, 900, 0)]
    after = [_stat(10, 100, 300), _stat(11, 400, 600), _stat(12, 500, 500), _stat(13, 500, None),
             _stat(14, 100, 0)]  # 12 is new, 13 keeps no schedstat, 14's tid went to a new thread
    found = idle_spin(before, after, 10, 1.0)
    assert found is not None
    assert [t.tid for t in found.threads] == [11]
    assert (found.caller_cpu_percent, found.caller_runnable_percent, found.idle_cpu_percent) == (10.0, 40.0, 30.0)
    assert idle_spin(before, after, 10, 0.0) is None
    assert idle_spin(before, after, 99, 1.0) is None


def test_each_runtime_whose_idle_threads_spin_names_the_setting_a_profile_sets():
    fixes = {r.name: r.idle_wait.fix for r in reg.records() if r.idle_wait is not None}
    assert fixes == {"libgomp": "OMP_WAIT_POLICY=passive (or GOMP_SPINCOUNT=0)",
                     "libiomp": "OMP_WAIT_POLICY=passive (or KMP_BLOCKTIME=0)",
                     "libomp": "OMP_WAIT_POLICY=passive (or KMP_BLOCKTIME=0)",
                     "openblas": "OPENBLAS_THREAD_TIMEOUT=4"}
    assert reg.wait_settings("passive") == {"OMP_WAIT_POLICY": "passive", "OPENBLAS_THREAD_TIMEOUT": "4"}
    assert reg.wait_settings("active") == {"OMP_WAIT_POLICY": "active"}
    assert reg.wait_settings("default") == {}
