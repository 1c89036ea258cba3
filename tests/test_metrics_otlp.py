"""`parinfo watch --otlp` and `parinfo host --otlp` against a real OTLP/HTTP receiver (tests/otlp_receiver.py:
the collector's protocol, decoded with opentelemetry-proto's classes): names, units, instruments and attribute
keys as parinfo/watching/otel_names.py declares them, values checked against /proc and the cgroup's cpu.stat,
"not reported" never sent as 0, and the edges (bad URL, missing extra, unreachable collector, SIGTERM).
Skipped cleanly where the otel extra is not installed."""
from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from conftest import Targets, clean_env, run_cli, start_target, stop_target
from otlp_receiver import PATH, Received, needs_extra, receiver

from parinfo.watching import otel_names as n

# A process that holds a fixed number of threads: 3 of its own, blocked, and OpenBLAS's pool at 2
# (started at import); prints threadpoolctl's count of that pool (ground truth inside it), then
# waits on stdin.
STEADY = """
import json, sys, threading, threadpoolctl, numpy
stop = threading.Event()
for _ in range(3):
    threading.Thread(target=stop.wait, daemon=True).start()
(pool,) = [p for p in threadpoolctl.threadpool_info() if p["internal_api"] == "openblas"]
print(json.dumps({"openblas": pool["num_threads"]}), flush=True)
sys.stdin.read()
"""

# Busy in a thread (the cgroup's quota throttles it); ends when stdin closes.
BUSY = """
import sys, threading
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
print("up", flush=True)
sys.stdin.readline()
"""


def _env() -> dict[str, str]:
    return clean_env(OPENBLAS_NUM_THREADS="2")


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("Threads:"))


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as fh:
        return fh.read().strip()


def _declared(points: list[Received], mode: str) -> None:
    """Every point is of a metric the mapping declares for ``mode``, with its unit, instrument and attribute keys."""
    by_name = {m.name: m for m in n.METRICS}
    for p in points:
        m = by_name[p.name]
        keys = m.watch if mode == "watch" else m.host
        assert keys is not None, f"{p.name} is not declared for {mode}"
        assert set(p.attributes) == set(keys), p
        assert p.unit == m.unit, p
        assert p.kind == ("gauge" if m.instrument == n.GAUGE else "sum"), p
        if p.kind == "sum":
            assert p.cumulative and p.monotonic == (m.instrument == n.COUNTER), p
            assert 0 < p.start_ns <= p.time_ns, p


def _one(points: list[Received], name: str, **attrs: object) -> Received:
    found = [p for p in points if p.name == name and all(p.attributes.get(k) == v for k, v in attrs.items())]
    assert len(found) == 1, (name, attrs, found)
    return found[0]


def _resource_and_scope(request) -> None:
    (rm,) = request.resource_metrics
    resource = {a.key: a.value.string_value for a in rm.resource.attributes}
    assert resource["service.name"] == "parinfo"
    (sm,) = rm.scope_metrics
    assert sm.scope.name == "parinfo" and sm.schema_url == n.SCHEMA_URL


@pytest.mark.once
def test_watch_otlp_sends_each_sample_under_the_conventions_names():
    needs_extra()
    target, truth = start_target(STEADY, env=_env())
    try:
        before = _threads(target.pid)
        with receiver() as got:
            proc = run_cli("watch", "--pid", str(target.pid), "--samples", "2", "--interval", "0.3",
                           "--otlp", got.url, timeout=60)
        after = _threads(target.pid)
        affinity = len(os.sched_getaffinity(target.pid))
    finally:
        stop_target(target)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert before == after  # the target holds its threads: the count can be compared
    assert len(got.requests) == 2 and set(got.paths) == {PATH}
    for request in got.requests:
        _resource_and_scope(request)
        points = got.points(request)
        _declared(points, "watch")
        assert _one(points, "process.thread.count", **{n.PROCESS_PID: target.pid}).value == after
        util = _one(points, "process.cpu.utilization", **{n.PROCESS_PID: target.pid}).value
        assert 0 <= util <= 1
        assert 1 <= _one(points, "parinfo.cpu.usable").value <= affinity
        pool = _one(points, "parinfo.pool.thread.count", **{n.PROCESS_PID: target.pid, n.POOL_LIBRARY: "openblas"})
        assert pool.attributes[n.COUNT_SOURCE] == "memory" and pool.value == truth["openblas"]
        assert not [p for p in points if p.name.startswith("container.")]  # a process, not the container


@pytest.mark.once
def test_host_otlp_sends_each_process_and_cgroup():
    needs_extra()
    target, truth = start_target(STEADY, env=_env())
    try:
        before = _threads(target.pid)
        with receiver() as got:
            proc = run_cli("host", "--once", "--interval", "0.3", "--otlp", got.url, timeout=90)
        after = _threads(target.pid)
        comm = _comm(target.pid)
    finally:
        stop_target(target)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert before == after
    (request,) = got.requests
    _resource_and_scope(request)
    points = got.points(request)
    _declared(points, "host")
    mine = {n.PROCESS_PID: target.pid}
    threads = _one(points, "process.thread.count", **mine)
    assert threads.value == after and threads.attributes[n.PROCESS_EXECUTABLE_NAME] == comm
    group = threads.attributes[n.CGROUP]
    pool = _one(points, "parinfo.pool.thread.count", **mine, **{n.POOL_LIBRARY: "openblas"})
    assert pool.value == truth["openblas"] and pool.attributes[n.COUNT_SOURCE] == "memory"
    assert pool.attributes[n.CGROUP] == group
    assert 1 <= _one(points, "parinfo.cpu.usable", **{n.CGROUP: group}).value <= os.cpu_count()
    assert _one(points, "system.cpu.logical.count").value == os.cpu_count()
    # each process scanned once, its threads as /proc says (the others may change: only their presence is checked)
    pids = [p.attributes[n.PROCESS_PID] for p in points if p.name == "process.thread.count"]
    assert len(pids) == len(set(pids)) and os.getpid() in pids


@pytest.mark.once
def test_watch_otlp_throttling_counters_follow_the_cgroups_cpu_stat(quota_cgroup):
    needs_extra()
    from prometheus_server import cpu_stat

    targets = Targets(quota_cgroup)
    try:
        target, _ = targets.start(BUSY)
        time.sleep(0.5)
        first = cpu_stat(quota_cgroup)
        with receiver() as got:
            proc = run_cli("watch", "--pid", str(target.pid), "--samples", "3", "--interval", "0.4",
                           "--otlp", got.url, timeout=60)
        last = cpu_stat(quota_cgroup)
    finally:
        targets.stop()
    assert proc.returncode == 0, proc.stderr
    leaf = os.path.basename(quota_cgroup)
    seen = []
    for request in got.requests:
        points = got.points(request)
        _declared(points, "watch")
        mine = [p for p in points if p.attributes.get(n.CGROUP, "").endswith(leaf)]
        by_name = {p.name: p.value for p in mine}
        assert first["nr_throttled"] <= by_name["parinfo.cpu.throttled.periods"] <= last["nr_throttled"]
        assert first["nr_periods"] <= by_name["parinfo.cpu.periods"] <= last["nr_periods"]
        usec = last.get("throttled_usec", last.get("throttled_time", 0) // 1000)
        assert by_name["parinfo.cpu.throttled.time"] <= usec / 1e6 + 1e-6
        seen.append(by_name["parinfo.cpu.throttled.periods"])
    assert len(seen) == 3 and seen == sorted(seen) and seen[-1] > 0  # the kernel's counts: they only grow


@pytest.mark.once
def test_a_collector_gone_during_a_run_is_one_warning_and_the_watch_goes_on():
    needs_extra()
    target, _ = start_target(STEADY, env=_env())
    try:
        with receiver(accept=1) as got:
            proc = run_cli("watch", "--pid", str(target.pid), "--samples", "3", "--interval", "0.3",
                           "--otlp", got.url, timeout=90)
    finally:
        stop_target(target)
    assert proc.returncode == 0, proc.stderr
    assert len(got.requests) == 1
    assert "Traceback" not in proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "failed" in warnings[0], proc.stderr  # once, not once per sample


@pytest.mark.once
def test_sigterm_stops_the_export_with_exit_0():
    needs_extra()
    target, _ = start_target(STEADY, env=_env())
    try:
        with receiver() as got:
            cmd = [sys.executable, "-m", "parinfo", "watch", "--pid", str(target.pid), "--interval", "0.2",
                   "--otlp", got.url]
            watcher = subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                end = time.monotonic() + 30
                while not got.requests and time.monotonic() < end:
                    time.sleep(0.1)
                watcher.send_signal(signal.SIGTERM)
                _, err = watcher.communicate(timeout=30)
            finally:
                if watcher.poll() is None:
                    watcher.kill()
                    watcher.wait()
    finally:
        stop_target(target)
    assert got.requests, err
    assert watcher.returncode == 0 and "Traceback" not in err, err


def test_a_failed_request_is_said_once_and_its_recovery_once():
    needs_extra()
    from parinfo.watching.otlp import OtlpExport, point

    with receiver(refuse=2) as got:
        export = OtlpExport(got.url + PATH, timeout=2)
        try:
            lines = [export.send([point(n.USABLE, "watch", k, {})]) for k in range(4)]
        finally:
            export.close()
    assert lines[0] is not None and "warning" in lines[0] and "failed" in lines[0], lines
    assert lines[1] is None  # still failing: said once
    assert lines[2] is not None and "works again" in lines[2]
    assert lines[3] is None
    assert [got.points(r)[0].value for r in got.requests] == [2, 3]


COMMANDS = pytest.mark.parametrize("command", [["watch"], ["host"]], ids=["watch", "host"])


@COMMANDS
@pytest.mark.parametrize("url", ["127.0.0.1:4318", "ftp://127.0.0.1:4318", "http://127.0.0.1", "http://[::1:4318"])
def test_a_bad_url_is_one_line_and_exit_2(command, url):
    proc = run_cli(*command, "--otlp", url, timeout=30)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--otlp" in proc.stderr and "OTLP/HTTP URL" in proc.stderr


@COMMANDS
def test_without_the_extra_otlp_says_how_to_install_it(command, tmp_path):
    blocker = tmp_path / "opentelemetry"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('not installed')\n")
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    proc = run_cli(*command, "--otlp", "http://127.0.0.1:4318", env=clean_env(PYTHONPATH=path), timeout=30)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "pip install 'parinfo[otel]'" in proc.stderr


@COMMANDS
def test_an_unreachable_collector_is_one_line_and_exit_2(command):
    needs_extra()
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = run_cli(*command, "--otlp", f"http://127.0.0.1:{port}", timeout=30)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"cannot reach the collector at 127.0.0.1:{port}" in proc.stderr


@pytest.mark.parametrize("args", [["watch", "--json"], ["watch", "--serve", "9464"], ["host", "--json"],
                                  ["host", "--serve", "9464"], ["host", "--all"], ["watch", "--pid", "1", "--attach"]])
def test_otlp_refuses_another_output(args):
    proc = run_cli(*args, "--otlp", "http://127.0.0.1:4318", timeout=30)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--otlp" in proc.stderr or "--serve" in proc.stderr


# -- "not reported" is no point, never a 0 ------------------------------------------------------------------


def test_watch_sends_no_point_for_what_it_could_not_read():
    from parinfo.machine.pressure import CpuCounters
    from parinfo.records.unknown import Unknown
    from parinfo.watching.model import Sample
    from parinfo.watching.otel_watch import watch_points

    sample = Sample(time=0.0, interval=1.0, pid=None, processes=1, threads=2, usable_cpus=2, quota=None,
                    cpu_percent=50.0, runnable=1.0, running_now=1, involuntary=0, groups=(), throttling=None,
                    throttling_unknown="unknown (no cpu.stat)", pressure_some="unknown (no /proc/pressure)",
                    pressure_cgroup_some=str(Unknown("no cgroup v2 hierarchy")))
    reading = SimpleNamespace(threads={(7, 7): None, (7, 8): None}, usage_ns=Unknown("no cpu.stat"),
                              counters=CpuCounters(version=None, unknown="no cpu.stat"))
    points = watch_points(sample, reading, None, children=False)
    names = {p.metric.name for p in points}
    assert "parinfo.cpu.pressure.some" not in names  # the kernel gave no figures
    assert "container.cpu.time" not in names  # the cgroup's CPU time could not be read
    assert not names & {"parinfo.cpu.throttled.time", "parinfo.cpu.throttled.periods", "parinfo.cpu.periods"}
    assert [p.value for p in points if p.metric.name == "container.cpu.usage"] == [0.5]
    assert [(dict(p.attributes), p.value) for p in points if p.metric.name == "process.thread.count"] == [
        ({n.PROCESS_PID: 7}, 2)]

    report = SimpleNamespace(findings=[], pools=[
        SimpleNamespace(library="openblas", num_threads=None, launch_count=None),  # unknown: no point
        SimpleNamespace(library="libgomp", num_threads=None, launch_count=3),
        SimpleNamespace(library="mkl", num_threads=4, launch_count=None)])
    points = watch_points(dataclasses.replace(sample, pid=7), reading, report, children=False)
    pools = {(p.attributes[n.POOL_LIBRARY], p.attributes[n.COUNT_SOURCE]): p.value for p in points
             if p.metric.name == "parinfo.pool.thread.count"}
    assert pools == {("libgomp", "launch-env"): 3, ("mkl", "memory"): 4}


def test_host_sends_no_point_for_what_it_could_not_read():
    from parinfo.host.model import CgroupRow, HostProcess, HostReport, Scope
    from parinfo.host.otel import host_points

    unread = HostProcess(pid=41, ppid=1, name="x", command="x", user="u", cgroup="/", group="/", usable_cpus=2,
                         affinity=2, pools_unknown="unknown (permission: maps)", threads=5, cpu_percent=None)
    report = HostReport(time=0.0, interval=None, scope=Scope(), logical_cpus=None, processes=[unread],
                        cgroups=[CgroupRow(path="/", quota=None, cpuset=None, usable_cpus=2, pids=[41])])
    points = host_points(report, {})
    names = [p.metric.name for p in points]
    assert "parinfo.pool.thread.count" not in names  # its pools are unknown
    assert "process.cpu.utilization" not in names  # one reading: no interval
    assert "system.cpu.logical.count" not in names and "parinfo.cpu.pressure.some" not in names
    assert [p.value for p in points if p.metric.name == "process.thread.count"] == [5]
