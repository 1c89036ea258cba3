"""`parinfo watch --serve`: scraped by a real Prometheus server (Debian's `prometheus`, started here
on 127.0.0.1 with a temporary configuration and storage), its series checked against the watched
cgroup's own files; and the server's edges (bad address, port in use, SIGTERM)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from conftest import REPO, clean_env, run_cli

needs_client = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import prometheus_client"], capture_output=True).returncode != 0,
    reason="prometheus_client is not installed (pip install 'parinfo[metrics]')")
needs_server = pytest.mark.skipif(shutil.which("prometheus") is None,
                                  reason="the prometheus server is not installed (apt-get install prometheus)")

BUSY_BLAS = r"""
import sys, threading, time
sys.stdin.readline()          # wait until the test has placed us in the cgroup
import numpy as np
a = np.random.rand(400, 400)
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
print("busy", flush=True)
end = time.time() + 120
while time.time() < end:
    a @ a
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(*args: str) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "parinfo", "watch", "--serve", f"127.0.0.1:{port}", *args],
                            cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    assert f"on http://127.0.0.1:{port}/metrics" in line, line + proc.stderr.read()
    return proc, port


def _stop(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err


def _cpu_stat(cgroup: str) -> dict[str, int]:
    with open(os.path.join(cgroup, "cpu.stat")) as fh:
        return {k: int(v) for k, v in (line.split() for line in fh if line.strip())}


def _query(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]["result"]


def _wait_for(port: int, expr: str, timeout: float = 45) -> list[dict]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            result = _query(port, expr)
            if result:
                return result
        except OSError:
            pass  # the server is still starting
        time.sleep(0.5)
    raise AssertionError(f"Prometheus has no series for {expr} after {timeout} s")


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
        assert target.stdout.readline().strip() == "busy"
        while _cpu_stat(quota_cgroup).get("nr_throttled", 0) < 60:  # enough for the `throttled` finding
            time.sleep(0.5)
        server, port = _serve("--pid", str(target.pid))
        prom_port = _free_port()
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n  - job_name: parinfo\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n")
        prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        (usable,) = _wait_for(prom_port, "parinfo_usable_cpus")
        assert usable["metric"]["job"] == "parinfo" and float(usable["value"][1]) == 1  # floor(0.5), at least 1
        first = _wait_for(prom_port, "parinfo_cpu_throttled_periods_total")
        assert [s["metric"]["cgroup"] for s in first] == [quota_cgroup]
        periods = float(first[0]["value"][1])
        stat = _cpu_stat(quota_cgroup)
        assert 60 <= periods <= stat["nr_throttled"]  # the kernel's counter, as scraped a moment ago
        (held,) = _query(prom_port, "parinfo_cpu_throttled_seconds_total")
        assert 0 < float(held["value"][1]) <= _cpu_stat(quota_cgroup)["throttled_time"] / 1e9
        (runnable,) = _wait_for(prom_port, "parinfo_runnable_threads")
        assert float(runnable["value"][1]) > 1  # two busy threads (one BLAS, one spinning) and more
        (finding,) = _wait_for(prom_port, 'parinfo_findings{id="throttled"}')
        assert finding["metric"]["severity"] == "warning" and float(finding["value"][1]) == 1
        pressure = _wait_for(prom_port, "parinfo_cpu_pressure_some_ratio")
        assert {s["metric"]["scope"] for s in pressure} <= {"machine", "cgroup"}
        assert all(0 <= float(s["value"][1]) <= 1 for s in pressure)

        time.sleep(2.5)  # a few more scrapes: counters never go back
        later = _query(prom_port, f'parinfo_cpu_throttled_periods_total{{cgroup="{quota_cgroup}"}}')
        assert float(later[0]["value"][1]) >= periods
        (resets,) = _query(prom_port, "resets(parinfo_cpu_throttled_periods_total[1m])")
        assert float(resets["value"][1]) == 0
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(timeout=20)
        if server is not None:
            code, err = _stop(server)
            assert code == 0 and "Traceback" not in err, err
        target.kill()
        target.wait(timeout=10)


@needs_client
def test_serve_stops_cleanly_on_sigterm_and_serves_this_container():
    server, port = _serve()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            body = resp.read().decode()
        assert "parinfo_usable_cpus " in body and "# TYPE parinfo_cpu_throttled_periods_total counter" in body
    finally:
        code, err = _stop(server)
    assert code == 0 and err.strip() == "parinfo: metrics server stopped", err


@needs_client
@pytest.mark.parametrize("address, says", [
    ("127.0.0.1:99999", "the port must be a number from 1 to 65535"),
    ("127.0.0.1:", "the port must be a number"),
    ("example.org:9464", "'example.org' is not an IP address"),
])
def test_a_bad_address_is_one_line_and_exit_2(address, says):
    proc = run_cli("watch", "--serve", address)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert says in proc.stderr and proc.stderr.startswith("parinfo: error: --serve")


@needs_client
def test_a_port_in_use_is_one_line_and_exit_2():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_cli("watch", "--serve", f"127.0.0.1:{port}", timeout=30)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "Address already in use" in proc.stderr


def test_without_the_extra_serve_says_how_to_install_it(tmp_path):
    blocker = tmp_path / "prometheus_client.py"
    blocker.write_text("raise ImportError('not installed')\n")
    proc = run_cli("watch", "--serve", "127.0.0.1:9464", env=clean_env(PYTHONPATH=str(tmp_path)))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "pip install 'parinfo[metrics]'" in proc.stderr
