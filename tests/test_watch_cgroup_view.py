"""The sampler on real processes in real cgroups (root only): `parinfo watch` without `--pid` reads
the cgroup's own CPU time, processes and runnable threads, never the machine's; a first interval
that has no throttling figures of its own is judged from the counters since the cgroup began."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import clean_env, run_cli

pytestmark = pytest.mark.once  # real servers, processes or cgroups: .ci/run runs these on its first Python only

SPIN = r"""
import sys, threading
def spin():
    while True:
        pass
for i in range(int(sys.argv[1])):
    threading.Thread(target=spin, name="spin-%d" % i, daemon=True).start()
print("busy", flush=True)
sys.stdin.read()
"""


def _in(cgroup: str | None) -> list[str]:
    """A command prefix that puts the command in ``cgroup`` (None: where the test runs)."""
    if cgroup is None:
        return []
    return ["sh", "-c", f'echo $$ > {os.path.join(cgroup, "cgroup.procs")} && exec "$@"', "sh"]


def _spinner(threads: int, cgroup: str | None = None) -> subprocess.Popen:
    proc = subprocess.Popen([*_in(cgroup), sys.executable, "-c", SPIN, str(threads)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=clean_env())
    assert proc.stdout is not None and proc.stdout.readline().strip() == "busy"
    return proc


def _stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


def test_the_cgroup_view_reads_the_cgroups_cpu_threads_and_runnable_not_the_machines(quota_cgroup):
    """Four spinning threads in a 0.5-CPU cgroup, two more spinning outside it: the view of the
    cgroup counts its one process (parinfo's own left out), its five threads, about half a CPU, and
    the runnable threads of that process only."""
    inside, outside = _spinner(4, quota_cgroup), _spinner(2)
    try:
        proc = run_cli("watch", "--once", "--json", "--interval", "1", prefix=_in(quota_cgroup), timeout=30)
        text = run_cli("watch", "--once", "--interval", "0.5", prefix=_in(quota_cgroup), timeout=30)
    finally:
        _stop(inside, outside)
    assert proc.returncode == 0, proc.stderr
    sample = json.loads(proc.stdout)
    assert sample["pid"] is None and sample["quota"] == 0.5
    assert (sample["processes"], sample["threads"]) == (1, 5), sample
    assert 25 <= sample["cpu_percent"] <= 75, sample  # the cgroup's own time under its quota, not the machine's
    assert 1 <= sample["running_now"] <= 4 and sample["runnable"] <= 5, sample
    assert sum(g["threads"] for g in sample["groups"]) == 5, sample["groups"]
    assert sample["throttling"]["cgroup"] == quota_cgroup and sample["verdict"].startswith("throttled in")
    assert text.returncode == 0 and "1 process, 5 threads" in text.stdout, text.stdout


def test_the_first_interval_without_figures_of_its_own_is_not_ok(quota_cgroup):
    """A process moved into a 0.5-CPU cgroup after the first reading: the interval has no throttling
    figures of its own (no level was read at its start), so the cumulative counters judge it."""
    from parinfo.watching.sample import Sampler

    proc = _spinner(2)
    try:
        sampler = Sampler(proc.pid)
        assert sampler.sample() is None
        with open(os.path.join(quota_cgroup, "cgroup.procs"), "w") as fh:
            fh.write(str(proc.pid))
        time.sleep(1.0)
        sample = sampler.sample()
    finally:
        _stop(proc)
    assert sample is not None and sample.throttling is None
    since = sample.throttling_since_start
    assert since is not None and since.cgroup == quota_cgroup, sample
    if since.throttled and since.ratio >= 0.05:
        assert sample.verdict.startswith("throttled in") and "since the cgroup began" in sample.verdict
    else:  # a machine so busy that the process did not use its half CPU: still no bare "ok"
        assert "no period of this interval read yet" in sample.verdict, sample.verdict


@pytest.mark.parametrize("interval", ["1"])
def test_a_watch_of_a_process_without_quota_has_no_counters_since_start(interval):
    """Where nothing was missing, the sample says nothing more: no since-start field in its JSON."""
    proc = _spinner(1)
    try:
        out = run_cli("watch", "--pid", str(proc.pid), "--once", "--json", "--interval", interval, timeout=30)
    finally:
        _stop(proc)
    assert out.returncode == 0, out.stderr
    sample = json.loads(out.stdout)
    assert "throttling_since_start" not in sample and sample["threads"] == 2


# -- throttled told apart from contended -------------------------------------------------------------

def test_throttled_and_contended_are_two_numbers_in_watch(quota_cgroup):
    """One spinning thread under a 0.5-CPU quota waits about as long as the quota holds it back
    (throttled); one of three spinning processes on one CPU without a quota waits about two thirds
    of the time with nothing throttled (contended). Both numbers are in the sample and on its
    "waiting" line."""
    throttled = _spinner(1, quota_cgroup)
    try:
        a = run_cli("watch", "--pid", str(throttled.pid), "--once", "--json", "--interval", "1", timeout=30)
    finally:
        _stop(throttled)
    contended = [subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", SPIN, "1"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=clean_env()) for _ in range(3)]
    try:
        assert all(p.stdout is not None and p.stdout.readline().strip() == "busy" for p in contended)
        pid = str(contended[0].pid)
        b = run_cli("watch", "--pid", pid, "--once", "--json", "--interval", "1", timeout=30)
        text = run_cli("watch", "--pid", pid, "--once", "--interval", "0.5", timeout=30)
    finally:
        _stop(*contended)
    held, queued = json.loads(a.stdout), json.loads(b.stdout)
    assert held["throttling"]["percent_time"] >= 20, held
    assert held["run_queue_wait_percent"] >= 0.5 * held["throttling"]["percent_time"], held
    assert queued["throttling"] is None and queued["run_queue_wait_percent"] >= 40, queued
    line = next(x for x in text.stdout.splitlines() if x.startswith("  waiting"))
    assert "throttled 0%" in line and "contended" in line, line


def test_host_rows_give_held_back_and_run_queue_wait(quota_cgroup):
    proc = _spinner(1, quota_cgroup)
    try:
        out = run_cli("host", "--cgroup", quota_cgroup, "--once", "--json", "--interval", "1", timeout=60)
        text = run_cli("host", "--cgroup", quota_cgroup, "--once", "--interval", "0.5", timeout=60)
    finally:
        _stop(proc)
    assert out.returncode == 0, out.stderr
    (row,) = [c for c in json.loads(out.stdout)["cgroups"] if c["path"] == quota_cgroup]
    assert row["throttling"]["percent_time"] >= 20, row
    assert row["run_queue_wait_percent"] >= 0.5 * row["throttling"]["percent_time"], row
    assert "held queued" in text.stdout and "queued beyond held is contention" in text.stdout, text.stdout
