"""The cost of one scrape of `parinfo watch --serve --pid PID` and of `parinfo host --serve` (one
warm scan of every process of the machine), against a bare prometheus_client endpoint serving one
gauge, measured in one run.

A numpy process with a few threads is the watched target. The three servers run in this process on
127.0.0.1; scrapes alternate between them (HTTP GET over loopback, so the figure includes the round
trip). Prints the median and the 95th percentile of each and their ratios to the bare endpoint;
goal: a `watch --serve` scrape <= 20 ms (host mode has no goal of its own: its scan is
bench/host.py's).

    python bench/metrics.py [--scrapes 200]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import urllib.request

from _machine import report_machine  # bench/ is on sys.path when run as a script

GOAL_MS = 20.0
TARGET = ("import numpy, threading, time\n"
          "for _ in range(4): threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
          "print('ready', flush=True); time.sleep(600)\n")


def scrape(url: str) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as resp:
        resp.read()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapes", type=int, default=200)
    args = ap.parse_args()
    report_machine()
    import prometheus_client

    from parinfo.host.metrics import HostCollector
    from parinfo.host.scanner import Scanner
    from parinfo.watching.metrics import WatchCollector, serve
    from parinfo.watching.sample import Sampler

    target = subprocess.Popen([sys.executable, "-c", TARGET], stdout=subprocess.PIPE, text=True)
    servers = []
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        server, url = serve(WatchCollector(Sampler(target.pid)), "127.0.0.1:19464")
        servers.append(server)
        host_server, host_url = serve(HostCollector(Scanner()), "127.0.0.1:19466")
        servers.append(host_server)
        registry = prometheus_client.CollectorRegistry()
        prometheus_client.Gauge("bare_gauge", "one gauge", registry=registry).set(1)
        bare, _ = prometheus_client.start_http_server(19465, addr="127.0.0.1", registry=registry)
        servers.append(bare)
        bare_url = "http://127.0.0.1:19465/metrics"
        for _ in range(5):  # warm: the first parinfo scrape reads the target's report
            scrape(url)
            scrape(host_url)
            scrape(bare_url)
        ours, host, anchor = [], [], []
        for _ in range(args.scrapes):
            ours.append(scrape(url))
            host.append(scrape(host_url))
            anchor.append(scrape(bare_url))
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()
        target.kill()
        target.wait()

    def figures(ts: list[float]) -> tuple[float, float]:
        ts = sorted(ts)
        return statistics.median(ts) * 1000, ts[int(0.95 * (len(ts) - 1))] * 1000

    (m_ours, p_ours), (m_host, p_host), (m_bare, p_bare) = figures(ours), figures(host), figures(anchor)
    print(f"one scrape over loopback, {args.scrapes} alternating scrapes each:")
    print(f"  parinfo watch --serve --pid   median {m_ours:6.2f} ms   p95 {p_ours:6.2f} ms")
    print(f"  parinfo host --serve          median {m_host:6.2f} ms   p95 {p_host:6.2f} ms   (every process)")
    print(f"  bare prometheus_client gauge  median {m_bare:6.2f} ms   p95 {p_bare:6.2f} ms")
    print(f"RATIO parinfo watch / bare = {m_ours / m_bare:.2f}")
    print(f"RATIO parinfo host / bare = {m_host / m_bare:.2f}")
    verdict = "PASS" if m_ours <= GOAL_MS else "FAIL"
    print(f"GOAL parinfo watch scrape median {m_ours:.2f} ms (goal <= {GOAL_MS:.0f} ms) {verdict}")


if __name__ == "__main__":
    main()
