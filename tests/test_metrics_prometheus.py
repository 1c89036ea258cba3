"""`parinfo watch --serve`: scraped by a real Prometheus server (Debian's `prometheus`, started here
on 127.0.0.1 with a temporary configuration and storage), its series checked against the watched
cgroup's own files; and the edges of `watch --serve` and `host --serve` (bad address, port in use,
missing extra, SIGTERM and SIGINT)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error

import pytest
from conftest import clean_env, run_cli
from prometheus_server import (
    assert_counters_grow,
    cpu_stat,
    needs_client,
    needs_server,
    query,
    scrape,
    serve,
    start_prometheus,
    stop,
    stop_all,
    wait_for,
)

pytestmark = pytest.mark.once  # real servers, processes or cgroups: .ci/run runs these on its first Python only

BUSY_BLAS = r"""
import sys, threading, time
sys.stdin.readline()          # wait until the test has placed us in the cgroup
import numpy as np, threadpoolctl
a = np.random.rand(400, 400)
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
(pool,) = [p for p in threadpoolctl.threadpool_info() if p["internal_api"] == "openblas"]
print("busy", pool["num_threads"], flush=True)   # its OpenBLAS count, as threadpoolctl reads it inside
end = time.time() + 120
while time.time() < end:
    a @ a
"""


@needs_client
@needs_server
def test_a_real_prometheus_scrapes_watch_serve_and_its_series_match_the_cgroup(quota_cgroup, tmp_path):
    target = subprocess.Popen([sys.executable, "-c", BUSY_BLAS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=clean_env(OPENBLAS_NUM_THREADS="2"))
    server = prom = None
    try:
        with open(os.path.join(quota_cgroup, "cgroup.procs"), "w") as fh:
            fh.write(str(target.pid))
        target.stdin.write("go\n")
        target.stdin.flush()
        word, truth = target.stdout.readline().split()
        assert word == "busy" and int(truth) == 2
        while cpu_stat(quota_cgroup).get("nr_throttled", 0) < 60:  # enough for the `throttled` finding
            time.sleep(0.5)
        server, port = serve("watch", "--pid", str(target.pid))
        prom, prom_port = start_prometheus(tmp_path, port)

        (usable,) = wait_for(prom_port, "parinfo_usable_cpus")
        assert usable["metric"]["job"] == "parinfo" and float(usable["value"][1]) == 1  # floor(0.5), at least 1
        first = wait_for(prom_port, "parinfo_cpu_throttled_periods_total")
        assert [s["metric"]["cgroup"] for s in first] == [quota_cgroup]
        periods = float(first[0]["value"][1])
        stat = cpu_stat(quota_cgroup)
        assert 60 <= periods <= stat["nr_throttled"]  # the kernel's counter, as scraped a moment ago
        (held,) = query(prom_port, "parinfo_cpu_throttled_seconds_total")
        assert 0 < float(held["value"][1]) <= cpu_stat(quota_cgroup)["throttled_time"] / 1e9
        (runnable,) = wait_for(prom_port, "parinfo_runnable_threads")
        assert float(runnable["value"][1]) > 1  # two busy threads (one BLAS, one spinning) and more
        (pool,) = wait_for(prom_port, 'parinfo_pool_threads{library="openblas"}')
        assert pool["metric"]["pid"] == str(target.pid) and float(pool["value"][1]) == int(truth)
        (finding,) = wait_for(prom_port, 'parinfo_findings{id="throttled"}')
        assert finding["metric"]["severity"] == "warning" and float(finding["value"][1]) == 1
        pressure = wait_for(prom_port, "parinfo_cpu_pressure_some_ratio")
        assert {s["metric"]["scope"] for s in pressure} <= {"machine", "cgroup"}
        assert all(0 <= float(s["value"][1]) <= 1 for s in pressure)

        assert_counters_grow(prom_port, quota_cgroup, periods)
    finally:
        try:
            stop_all(prom, server)
        finally:
            target.kill()
            target.wait(timeout=10)


COMMANDS = pytest.mark.parametrize("command", ["watch", "host"])


@needs_client
@pytest.mark.parametrize("command, sig, shows", [
    ("watch", signal.SIGTERM, "parinfo_usable_cpus "),
    ("host", signal.SIGTERM, 'parinfo_usable_cpus{cgroup="'),
    ("host", signal.SIGINT, "# TYPE parinfo_threads_at_once gauge"),
])
def test_serve_stops_cleanly_on_sigterm_and_sigint(command, sig, shows):
    server, port = serve(command)
    try:
        body = scrape(port)
        assert shows in body and "# TYPE parinfo_cpu_throttled_periods_total counter" in body
    finally:
        code, err = stop(server, sig)
    assert code == 0 and err.strip() == "parinfo: metrics server stopped", err


@needs_client
@COMMANDS
@pytest.mark.parametrize("address, says", [
    ("127.0.0.1:99999", "the port must be a number from 1 to 65535"),
    ("127.0.0.1:", "the port must be a number"),
    ("example.org:9464", "'example.org' is not an IP address"),
])
def test_a_bad_address_is_one_line_and_exit_2(command, address, says):
    proc = run_cli(command, "--serve", address)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert says in proc.stderr and proc.stderr.startswith("parinfo: error: --serve")


@needs_client
@COMMANDS
def test_a_port_in_use_is_one_line_and_exit_2(command):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_cli(command, "--serve", f"127.0.0.1:{port}", timeout=30)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "Address already in use" in proc.stderr


@COMMANDS
def test_without_the_extra_serve_says_how_to_install_it(command, tmp_path):
    blocker = tmp_path / "prometheus_client.py"
    blocker.write_text("raise ImportError('not installed')\n")
    proc = run_cli(command, "--serve", "127.0.0.1:9464", env=clean_env(PYTHONPATH=str(tmp_path)))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "pip install 'parinfo[metrics]'" in proc.stderr


@pytest.mark.parametrize("other", [["--once"], ["--json"], ["--all"], ["--once", "--check"]])
def test_host_serve_refuses_the_options_of_a_printed_report(other):
    proc = run_cli("host", "--serve", "127.0.0.1:9464", *other)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--serve serves metrics until stopped" in proc.stderr


@needs_client
@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
def test_watch_serve_stops_with_one_line_when_the_watched_process_exits(reaped):
    # the target lives until the test closes its stdin; "zombie": the test collects it only at the end
    target = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=clean_env())
    server = None
    try:
        assert target.stdout.readline() == "up\n"
        server, port = serve("watch", "--pid", str(target.pid))
        assert "parinfo_usable_cpus " in scrape(port)
        target.stdin.close()
        if reaped:
            target.wait(timeout=10)
        else:
            while not _is_zombie(target.pid):
                time.sleep(0.05)
        pages = []
        while server.poll() is None and len(pages) < 200:  # scrapes until the server has stopped
            try:
                pages.append(scrape(port))
            except urllib.error.HTTPError as exc:
                pages.append(f"HTTP {exc.code}")
            except OSError:
                break  # refused: it has stopped
            time.sleep(0.02)
        code = server.wait(timeout=15)
        err = server.stderr.read()
    finally:
        if server is not None and server.poll() is None:
            stop(server)
        target.kill()
        target.wait(timeout=10)
    assert code == 0 and err == f"parinfo: pid {target.pid} exited; metrics server stopped\n", err
    assert all(page == "" for page in pages), pages  # found gone: no 500, no series (of it or of a reused pid)


def _is_zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
