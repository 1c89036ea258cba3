"""`parinfo host --serve` scraped by a real Prometheus server (Debian's `prometheus` on 127.0.0.1,
temporary configuration and storage, the alert rules of docs/metrics.md evaluated every second):
busy numpy processes in a real cgroup with a 0.5-CPU quota, their series checked against
threadpoolctl inside each target and the cgroup's own cpu.stat."""
from __future__ import annotations

import os
import time

import pytest
from conftest import Targets, clean_env
from prometheus_server import (
    assert_counters_grow,
    cpu_stat,
    documented_rules,
    needs_client,
    needs_server,
    query,
    serve,
    start_prometheus,
    stop_all,
    wait_for,
)

pytestmark = pytest.mark.once  # real servers, processes or cgroups: .ci/run runs these on its first Python only

# Prints threadpoolctl's OpenBLAS count (ground truth inside the process), multiplies matrices in
# a thread (its BLAS pool busy: the cgroup is throttled), and ends when stdin closes.
BUSY = """
import sys, threading, threadpoolctl, numpy
limit = {limit!r}
if limit:
    threadpoolctl.threadpool_limits(limit)
(pool,) = [p for p in threadpoolctl.threadpool_info() if p["internal_api"] == "openblas"]
a = numpy.random.rand(300, 300)
def work():
    while True:
        a @ a
threading.Thread(target=work, daemon=True).start()
print(pool["num_threads"], flush=True)
sys.stdin.readline()
"""


def _value(series: dict) -> float:
    return float(series["value"][1])


@needs_client
@needs_server
def test_a_real_prometheus_scrapes_host_serve_and_its_series_match_the_targets(quota_cgroup, tmp_path):
    targets = Targets(quota_cgroup)
    server = prom = None
    try:
        two, truth_two = targets.start(BUSY.format(limit=None), env=clean_env(OPENBLAS_NUM_THREADS="2"))
        one, truth_one = targets.start(BUSY.format(limit=1), env=clean_env(OPENBLAS_NUM_THREADS="2"))
        assert (truth_two, truth_one) == ("2", "1")  # one limited after import: its environment says 2
        while cpu_stat(quota_cgroup).get("nr_throttled", 0) < 5:
            time.sleep(0.2)
        before = cpu_stat(quota_cgroup)
        server, port = serve("host", "--cgroup", quota_cgroup)
        prom, prom_port = start_prometheus(tmp_path, port, rules=documented_rules())
        cg = f'cgroup="{quota_cgroup}"'

        (usable,) = wait_for(prom_port, f"parinfo_usable_cpus{{{cg}}}")
        assert _value(usable) == 1  # floor(0.5), at least 1
        pools = wait_for(prom_port, 'parinfo_pool_threads{library="openblas"}')
        got = {s["metric"]["pid"]: s for s in pools}
        assert set(got) == {str(two.pid), str(one.pid)}  # --cgroup: the targets only
        for proc, truth in ((two, truth_two), (one, truth_one)):
            s = got[str(proc.pid)]
            assert _value(s) == int(truth), s  # in force, read from memory: threadpoolctl's count inside
            assert s["metric"]["source"] == "memory" and s["metric"]["cgroup"] == quota_cgroup
            with open(f"/proc/{proc.pid}/comm") as fh:
                assert s["metric"]["name"] == fh.read().strip()
        (at_once,) = wait_for(prom_port, f"parinfo_threads_at_once{{{cg}}}")
        assert _value(at_once) == 3
        (finding,) = wait_for(prom_port, f'parinfo_findings{{id="host-oversubscribed",{cg}}}')
        assert finding["metric"]["severity"] == "warning" and _value(finding) == 1
        wait_for(prom_port, f"parinfo_runnable_threads{{{cg}}}")
        time.sleep(2)
        (runnable,) = query(prom_port, f"max_over_time(parinfo_runnable_threads{{{cg}}}[1m])")
        threads = sum(len(os.listdir(f"/proc/{p.pid}/task")) for p in (two, one))
        assert 1 <= _value(runnable) <= threads  # busy pools: some thread runnable; no more than they have

        pressure = wait_for(prom_port, "parinfo_cpu_pressure_some_ratio")
        scopes = {(s["metric"]["scope"], s["metric"].get("cgroup")) for s in pressure}
        own = os.path.exists(f"{quota_cgroup}/cpu.pressure")  # a v2 cgroup's own; a v1 cgroup has none
        assert (("cgroup", quota_cgroup) in scopes) == own and scopes <= {("machine", None), ("cgroup", quota_cgroup)}
        assert all(0 <= _value(s) <= 1 for s in pressure)

        first = wait_for(prom_port, f"parinfo_cpu_throttled_periods_total{{{cg}}}")
        assert [s["metric"]["cgroup"] for s in first] == [quota_cgroup]  # one series, the quota's level
        periods = _value(first[0])
        assert before["nr_throttled"] <= periods <= cpu_stat(quota_cgroup)["nr_throttled"]
        (held,) = query(prom_port, f"parinfo_cpu_throttled_seconds_total{{{cg}}}")
        assert before["throttled_time"] / 1e9 <= _value(held) <= cpu_stat(quota_cgroup)["throttled_time"] / 1e9

        # the third documented rule, on the real series: pools wider than the CPU, busy threads
        (alert,) = wait_for(prom_port, f'ALERTS{{alertname="HostOversubscribed",{cg}}}', timeout=30)
        assert alert["metric"]["alertstate"] == "pending"  # its `for: 10m` has not run out

        assert_counters_grow(prom_port, quota_cgroup, periods)
    finally:
        try:
            stop_all(prom, server)
        finally:
            targets.stop()
