"""In-place resize in real cgroups shaped as the kubelet makes them (cgroup v1, under a
--cgroup-root of the test's own): the container's and the pod's quota and the container's cpuset
are rewritten under running processes, as the kubelet does for a resize.

- parinfo's runtime in a process with default counts follows within the follower's period (read
  inside the process: parinfo's counts and threadpoolctl's), and says what changed; a count a
  process set by a call does not move;
- ``host --serve``, scraped by plain HTTP GETs, shows the resize in the next scrape after its
  period (``parinfo_cgroup_resizes_total``, the values after it) and raises
  ``pool-fixed-after-resize`` for a numpy process whose OpenBLAS pool was sized at start (its
  count read inside the process by threadpoolctl).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from conftest import clean_env
from kubelet_cgroup import PERIOD_US, kubelet_cgroup, unavailable

from parinfo.runtime.follow import INTERVAL_S

pytestmark = [pytest.mark.once,  # real processes and cgroups: .ci/run runs these on its first Python only
              pytest.mark.skipif(unavailable() is not None, reason=f"kubelet-shaped cgroups: {unavailable()}"),
              pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")]

#: The follower re-reads once a period; the child reports every 0.1 s; the rest is a loaded machine's slack.
WITHIN_S = INTERVAL_S + 2.0
#: host --serve re-reads a cgroup's binding once it is this old: a scrape after it shows a resize.
SCRAPE_PERIOD_S = 1.2


def _limit(pod, cpus: float | None) -> None:
    """Rewrite the container's and the pod's quota as the kubelet does on a resize (v1 refuses a
    child quota above its parent's: lowering writes the container first, raising the pod first)."""
    value = str(-1 if cpus is None else int(cpus * PERIOD_US))
    now = int((pod.dir(pod.cpu, pod.path) / "cpu.cfs_quota_us").read_text())
    order = (pod.path, pod.pod) if cpus is not None and (now < 0 or cpus * PERIOD_US < now) else (pod.pod, pod.path)
    for cgroup in order:
        pod.write(cgroup, "cpu.cfs_quota_us", value)


def _child(pod, explicit: int = 0):
    from test_runtime_follow import Child

    child = Child(pod.dir(pod.cpu, pod.path), explicit=explicit)
    pod.enter(child.proc.pid)  # and its cpuset
    return child


def test_the_runtime_follows_a_resized_limit_and_cpuset():
    with kubelet_cgroup("Guaranteed", shares=2048, limit=2, pod_limit=2, cpuset="0-1") as pod:
        default = chosen = None
        try:
            default, chosen = _child(pod), _child(pod, explicit=2)
            first = default.sample()
            assert (first["intra"], first["blas"]) == (2, [2]), first
            assert chosen.sample()["intra"] == 2

            _limit(pod, 1)
            began = time.monotonic()
            down = default.until(lambda s: s["intra"] == 1 and s["blas"] == [1], WITHIN_S)
            assert time.monotonic() - began <= WITHIN_S
            last = down["follow"]["changes"][-1]
            assert last["usable_cpus"] == [2, 1]
            assert last["resized"] == ["limit 2 CPUs -> 1 CPUs", "pod limit 2 CPUs -> 1 CPUs"], last
            assert "intra-op 2 -> 1" in last["counts"]
            seen = chosen.until(lambda s: s["follow"]["usable_cpus"] == 1, WITHIN_S)
            assert (seen["intra"], seen["blas"], seen["source"]["text"]) == (2, [2], "explicit call")

            _limit(pod, 2)
            default.until(lambda s: s["intra"] == 2 and s["blas"] == [2], WITHIN_S)
            pod.write(pod.path, "cpuset.cpus", "1", pod.cpuset)
            began = time.monotonic()
            narrow = default.until(lambda s: s["intra"] == 1 and s["blas"] == [1], WITHIN_S)
            assert time.monotonic() - began <= WITHIN_S
            last = narrow["follow"]["changes"][-1]
            assert "cpuset 0-1 -> 1" in last["resized"] and last["usable_cpus"][-1] == 1, last
            report = default.report()
            assert report["runtime"]["follow"]["changes"][-1]["resized"] == last["resized"]
            later = chosen.until(lambda s: s["follow"]["usable_cpus"] == 1 and s["follow"]["rereads"] > 2, WITHIN_S)
            assert (later["intra"], later["blas"]) == (2, [2])
        finally:
            for child in (default, chosen):
                if child is not None:
                    child.stop()


NUMPY = r"""
import sys, numpy, threadpoolctl
numpy.ones((64, 64)) @ numpy.ones((64, 64))  # OpenBLAS sized its pool at load
print("ready", flush=True)
for line in sys.stdin:
    print(*[p["num_threads"] for p in threadpoolctl.threadpool_info() if p["internal_api"] == "openblas"], flush=True)
"""


def _sample(page: str, name: str, **labels: str) -> float | None:
    """The value of series ``name`` whose labels include ``labels``, or None when it is absent."""
    for line in page.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def _blas(child: subprocess.Popen) -> int:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("?\n")
    child.stdin.flush()
    return int(child.stdout.readline())


def test_host_serve_shows_the_resize_and_the_pool_that_cannot_follow():
    from prometheus_server import needs_client, scrape, serve, stop

    if needs_client.args[0]:
        pytest.skip(needs_client.kwargs["reason"])
    with kubelet_cgroup("Guaranteed", shares=2048, limit=2, pod_limit=2, cpuset="0-1") as pod:
        child = subprocess.Popen([sys.executable, "-c", NUMPY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=clean_env())
        server = None
        try:
            pod.enter(child.pid)
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            assert _blas(child) == 2
            server, port = serve("host", "--cgroup", pod.top)
            page = scrape(port)
            assert _sample(page, "parinfo_cgroup_resizes_total", cgroup=pod.path) == 0
            assert _sample(page, "parinfo_findings", id="pool-fixed-after-resize") is None

            _limit(pod, 1)
            time.sleep(SCRAPE_PERIOD_S)
            page = scrape(port)
            assert _sample(page, "parinfo_cgroup_resizes_total", cgroup=pod.path) == 1
            assert _sample(page, "parinfo_cgroup_resized_cpus", cgroup=pod.path, value="limit") == 1
            assert _sample(page, "parinfo_cgroup_resized_cpus", cgroup=pod.path, value="usable") == 1
            truth = _blas(child)  # inside the process: the pool kept the count it was sized with
            assert truth == 2
            assert _sample(page, "parinfo_pool_threads", library="openblas", pid=str(child.pid),
                           source="memory") == truth
            fired = [line for line in page.splitlines()
                     if line.startswith("parinfo_findings{") and 'id="pool-fixed-after-resize"' in line]
            assert len(fired) == 1 and 'severity="warning"' in fired[0], fired

            pod.write(pod.path, "cpuset.cpus", "1", pod.cpuset)
            time.sleep(SCRAPE_PERIOD_S)
            page = scrape(port)
            assert _sample(page, "parinfo_cgroup_resizes_total", cgroup=pod.path) == 2
            assert _sample(page, "parinfo_cgroup_resized_cpus", cgroup=pod.path, value="cpuset") == 1
        finally:
            if server is not None:
                code, err = stop(server)
                assert code == 0 and "Traceback" not in err, err
            if child.stdin is not None:
                child.stdin.close()
            child.wait(timeout=10)


def test_host_json_says_what_changed():
    """``host --json`` after a resize seen by one long-running scanner: the resizes list and the
    finding, in the words the text gives too."""
    from parinfo.host.scanner import Scanner

    with kubelet_cgroup("Burstable", shares=512, limit=2) as pod:
        child = subprocess.Popen([sys.executable, "-c", NUMPY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=clean_env())
        try:
            pod.enter(child.pid)
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            scanner = Scanner(cgroup=pod.top)
            assert scanner.scan().to_dict().get("resizes") is None  # absent where nothing was resized
            pod.write(pod.path, "cpu.shares", "1024")
            _limit(pod, 1)
            time.sleep(SCRAPE_PERIOD_S)
            report = scanner.scan()
            (entry,) = report.to_dict()["resizes"]
            assert entry["cgroup"] == pod.path and entry["resizes"] == 1 and entry["usable_cpus"] == [2, 1]
            assert entry["changes"] == ["request 500m -> 1000m (a share under contention, not a cap: no count "
                                        "follows it)", "limit 2 CPUs -> 1 CPUs", "pod limit none -> 1 CPUs"]
            assert entry["request_millicores"] == 1000 and entry["limit"] == 1.0
            found = [f for _, f in report.findings() if f.id == "pool-fixed-after-resize"]
            assert len(found) == 1 and f"pid {child.pid}" in found[0].message and "openblas 2" in found[0].message
            assert "OPENBLAS_NUM_THREADS=1" in found[0].fix
            text = report.table()
            assert re.search(rf"{re.escape(pod.path)}: 1, at \d\d:\d\d:\d\d: request 500m -> 1000m", text), text
        finally:
            if child.stdin is not None:
                child.stdin.close()
            child.wait(timeout=10)
