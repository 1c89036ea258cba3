"""Test helpers for `--serve`: start parinfo's metrics server and Debian's real `prometheus` on
127.0.0.1 (each stopped by the caller in a finally), query the server's HTTP API, read a cgroup's
cpu.stat."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, clean_env

needs_client = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import prometheus_client"], capture_output=True).returncode != 0,
    reason="prometheus_client is not installed (pip install 'parinfo[metrics]')")
needs_server = pytest.mark.skipif(shutil.which("prometheus") is None,
                                  reason="the prometheus server is not installed (apt-get install prometheus)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(*args: str) -> tuple[subprocess.Popen, int]:
    """Start ``parinfo ARGS --serve 127.0.0.1:PORT`` on a free port; return it once it listens."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "parinfo", *args, "--serve", f"127.0.0.1:{port}"],
                            cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    if f"on http://127.0.0.1:{port}/metrics" not in line:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(line + err)
    return proc, port


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> tuple[int, str]:
    """Stop a server started by :func:`serve` with ``sig``; (its exit code, its stderr)."""
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return resp.read().decode()


def documented_rules() -> str:
    """The alert rules block of docs/metrics.md, as written there."""
    doc = (REPO / "docs" / "metrics.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", doc, flags=re.S) if b.startswith("groups:")]
    return block


def start_prometheus(tmp: Path, target_port: int, *, rules: str | None = None) -> tuple[subprocess.Popen, int]:
    """Prometheus on 127.0.0.1 (a free port) with its configuration and storage under ``tmp``,
    scraping ``target_port`` every second (and evaluating ``rules`` every second when given)."""
    port = free_port()
    config = ("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
              "scrape_configs:\n  - job_name: parinfo\n    static_configs:\n"
              f"      - targets: ['127.0.0.1:{target_port}']\n")
    if rules is not None:
        (tmp / "rules.yml").write_text(rules)
        config += f"rule_files: ['{tmp / 'rules.yml'}']\n"
    (tmp / "prometheus.yml").write_text(config)
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port


def stop_prometheus(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def stop_all(prom: subprocess.Popen | None, server: subprocess.Popen | None) -> None:
    """Stop Prometheus, then parinfo's server (which must exit 0, without a traceback); either may be None."""
    if prom is not None:
        stop_prometheus(prom)
    if server is not None:
        code, err = stop(server)
        assert code == 0 and "Traceback" not in err, err


def assert_counters_grow(port: int, cgroup: str, periods: float) -> None:
    """After a few more scrapes, ``cgroup``'s throttling counters have not gone back: periods at
    least ``periods`` (an earlier value), and no reset of either counter in Prometheus's eyes."""
    time.sleep(3)
    (later,) = query(port, f'parinfo_cpu_throttled_periods_total{{cgroup="{cgroup}"}}')
    assert float(later["value"][1]) >= periods
    for counter in ("periods", "seconds"):
        (resets,) = query(port, f'resets(parinfo_cpu_throttled_{counter}_total{{cgroup="{cgroup}"}}[1m])')
        assert float(resets["value"][1]) == 0


def cpu_stat(cgroup: str) -> dict[str, int]:
    with open(os.path.join(cgroup, "cpu.stat")) as fh:
        return {k: int(v) for k, v in (line.split() for line in fh if line.strip())}


def query(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for(port: int, expr: str, timeout: float = 45) -> list[dict]:
    """The series of ``expr`` once Prometheus has any (AssertionError after ``timeout`` s)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            result = query(port, expr)
            if result:
                return result
        except OSError:
            pass  # the server is still starting
        time.sleep(0.5)
    raise AssertionError(f"Prometheus has no series for {expr} after {timeout} s")
