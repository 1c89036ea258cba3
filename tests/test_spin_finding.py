"""Idle spin as a finding, in real processes: a spinning thread is placed by its C library thread
block (libgomp's worker, a Python thread in a loop); `watch --pid` and `show --pid` on a libgomp
process whose worker spins between short regions under a real 0.5-CPU quota say so with the
throttling it caused and the setting that stops it; with that setting (what a profile's
``wait_policy: passive`` sets), the finding is gone and the throttled periods fall."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from real_cgroup import quota_cgroup
from spin_workload import child_argv, libgomp, started

from parinfo.diagnostics.outside_report import inspect_pid
from parinfo.machine.procfs import Proc
from parinfo.process.spin import idle_spin, with_owners
from parinfo.process.tasks import thread_stats
from parinfo.process.thread_blocks import owners_of_running
from parinfo.process.thread_owners import attribute
from parinfo.process.threads import live_threads
from parinfo.profiles.loading import resolve_profile
from parinfo.watching.sample import Sampler

pytestmark = pytest.mark.once

SPINNING_PYTHON = ("import threading, time\n"
                   "def loop():\n    while True: pass\n"
                   "threading.Thread(target=loop, daemon=True).start()\n"
                   "print('ready', flush=True)\ntime.sleep(60)\n")


def _gomp() -> str:
    gomp = libgomp()
    if gomp is None:
        pytest.skip("no libgomp (scikit-learn's wheel or the system's)")
    return gomp


@contextlib.contextmanager
def _workload(env_extra: dict[str, str], quota: float | None, seconds: float = 30) -> Iterator[int]:
    """The libgomp workload (2 threads, 5 ms between regions) running, in a fresh cgroup with ``quota``."""
    gomp = _gomp()
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(env_extra)
    with quota_cgroup(quota) as made:
        if isinstance(made, str):
            pytest.skip(made)
        cg, _ = made
        with started(child_argv(sys.executable, gomp, 2, seconds, 0.005), env, cg) as (pid, _):
            time.sleep(0.3)
            yield pid


def test_a_running_libgomp_worker_and_a_python_thread_are_placed_by_their_thread_blocks():
    with _workload({"OMP_WAIT_POLICY": "active"}, None) as pid:
        proc = Proc.of(pid)
        tids = [t.tid for t in thread_stats(proc)]
        workers = [t for t in tids if t != pid]
        assert (proc.thread_file(workers[0], "syscall", 512) or b"").startswith(b"running")
        owners = owners_of_running(proc, workers, tids)
        assert [str(o).split(" (")[0] for o in owners.values()] == ["libgomp"], owners
        listing = attribute(live_threads(proc), proc, {})  # the report's thread owners place it too
        assert {t.owner.split(" (")[0] for t in listing.threads if t.tid != pid} == {"libgomp"}
    child = subprocess.Popen([sys.executable, "-c", SPINNING_PYTHON], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().startswith("ready")
        proc = Proc.of(child.pid)
        time.sleep(0.2)
        s0 = thread_stats(proc)
        time.sleep(0.5)
        s1 = thread_stats(proc)
        found = idle_spin(s0, s1, child.pid, 0.5)
        assert found is not None  # from its times alone a Python loop looks like spin...
        tids = [t.tid for t in s1]
        assert set(owners_of_running(proc, [t.tid for t in found.threads], tids).values()) == {"python"}
        assert with_owners(found, proc, tids) is None  # ...its owner says it is work
    finally:
        child.kill()
        child.wait()


def _watch(env_extra: dict[str, str], samples: int) -> tuple[list, int, int]:
    """``samples`` one-second samples of ``watch --pid`` on the workload under a 0.5-CPU quota: the
    samples, and the throttled periods and periods summed over them."""
    with _workload(env_extra, 0.5) as pid:
        sampler = Sampler(pid)
        sampler.sample()
        got = []
        for _ in range(samples):
            time.sleep(1.0)
            s = sampler.sample()
            assert s is not None
            got.append(s)
    throttled = sum(s.throttling.throttled for s in got if s.throttling is not None)
    periods = sum(s.throttling.periods for s in got if s.throttling is not None)
    return got, throttled, periods


def test_watch_finds_idle_spin_with_its_throttling_and_the_fix_clears_both():
    # within the 10 s the finding must come in (on a machine busy with other work the spinning thread
    # may get less CPU than the quota in some samples, and then nothing is throttled in those)
    spun, throttled, periods = _watch({"OMP_WAIT_POLICY": "active"}, 8)
    found = [s for s in spun if s.spin is not None and s.spin.throttled]
    assert found, [s.verdict for s in spun]
    spin = found[0].spin
    assert spin.runtimes == ("libgomp",) and spin.fixes == ("OMP_WAIT_POLICY=passive (or GOMP_SPINCOUNT=0)",)
    assert spin.threads[0].owner.startswith("libgomp") and spin.throttled and spin.periods
    assert found[0].verdict.startswith("idle spin: 1 libgomp thread stayed runnable"), found[0].verdict
    assert "OMP_WAIT_POLICY=passive" in found[0].verdict and "periods" in found[0].verdict
    assert throttled >= periods // 4 > 0
    fixed = {k: v for k, v in resolve_profile("container").env.items() if k in ("OMP_WAIT_POLICY",)}
    assert fixed == {"OMP_WAIT_POLICY": "passive"}
    quiet, throttled_after, periods_after = _watch(fixed, 8)
    assert all(s.spin is None for s in quiet), [s.verdict for s in quiet]
    assert periods_after > 0 and throttled_after < throttled / 4, (throttled, periods, throttled_after, periods_after)


def test_show_pid_reports_idle_spin_throttled_and_stays_quiet_with_the_fix():
    with _workload({"OMP_WAIT_POLICY": "active"}, 0.5) as pid:
        for _ in range(4):  # a machine busy with other work may leave the quota unspent in one window
            report = inspect_pid(Proc.of(pid), sample_seconds=1.0)
            rows = [f for f in report.findings if f.id == "idle-spin-throttled"]
            if rows and rows[0].severity.name == "WARNING":
                break
    assert len(rows) == 1 and rows[0].severity.name == "WARNING", [f.id for f in report.findings]
    assert "libgomp thread" in rows[0].message and "throttled" in rows[0].message
    assert "OMP_WAIT_POLICY=passive" in rows[0].fix
    assert report.live is not None and report.live.tree is not None and report.live.tree.spin is not None
    with _workload({"OMP_WAIT_POLICY": "passive"}, 0.5) as pid:
        for _ in range(2):
            report = inspect_pid(Proc.of(pid), sample_seconds=1.0)
            assert not [f for f in report.findings if f.id == "idle-spin-throttled"]
