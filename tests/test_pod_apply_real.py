"""`parinfo apply container -- PROGRAM` in real cgroups shaped as the kubelet makes them (cgroup v1,
cgroupfs driver, under a --cgroup-root of the test's own): a request-only pod (cpu.shares for 1500m,
no quota) and limited ones (quota 0.5 and 1.5 CPUs). The launched program reads its counts in force
through threadpoolctl; a program started with the env block of `parinfo k8s snippet` for the same
pod shape, in the same cgroup, reads the same counts."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from conftest import REPO, clean_env
from kubelet_cgroup import kubelet_cgroup, unavailable

from parinfo.machine.pod_shares import shares_of
from parinfo.machine.topology import machine_facts

pytestmark = [pytest.mark.once,  # real processes and cgroups: .ci/run runs these on its first Python only
              pytest.mark.skipif(unavailable() is not None, reason=f"kubelet-shaped cgroups: {unavailable()}")]

#: What the program reports: its OMP_NUM_THREADS, and the count each pool threadpoolctl finds runs with.
COUNTS = ("import json, os\nimport numpy\nfrom threadpoolctl import threadpool_info\n"
          "print(json.dumps({'omp': os.environ.get('OMP_NUM_THREADS'),"
          " 'pools': sorted((p['internal_api'], p['num_threads']) for p in threadpool_info())}))\n")
#: Waits for a line on stdin (the test moves it into the pod's cgroup meanwhile), then becomes ARGV.
GATE = "import os, sys\nsys.stdin.readline()\nos.execvpe(sys.argv[1], sys.argv[1:], os.environ)\n"


def _run_in(pod, argv: list[str], env: dict[str, str]) -> dict:
    """``argv`` run inside the pod's container cgroup from its first instruction; its JSON line."""
    child = subprocess.Popen([sys.executable, "-c", GATE, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        pod.enter(child.pid)
        out, err = child.communicate("go\n", timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    assert child.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def _snippet_env(*args: str) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "parinfo", "k8s", "snippet", *args], cwd=REPO, env=clean_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {e["name"]: e["value"] for e in yaml.safe_load(out.stdout)["env"]}


def _node_cpus() -> int:
    return len(machine_facts().affinity)


@pytest.mark.parametrize("request_m,limit,snippet_args,want", [
    (1500, None, ["--cpu-request", "1500m"], lambda n: min(n, 1)),
    (500, 0.5, ["--cpu-request", "500m", "--cpu-limit", "500m"], lambda n: 1),
    (1500, 1.5, ["--cpu-request", "1500m", "--cpu-limit", "1.5"], lambda n: 1),
    (2500, None, ["--cpu-request", "2500m"], lambda n: min(n, 2)),
    (0, None, [], lambda n: n),
], ids=["request-1500m", "limit-0.5", "limit-1.5", "request-2500m", "besteffort"])
def test_apply_container_and_the_snippet_give_the_pods_counts(request_m, limit, snippet_args, want):
    qos = "BestEffort" if request_m == 0 else "Guaranteed" if limit is not None else "Burstable"
    n = want(_node_cpus())
    with kubelet_cgroup(qos, shares=shares_of(request_m), limit=limit, pod_limit=limit) as pod:
        launched = _run_in(pod, [sys.executable, "-m", "parinfo", "apply", "container", "--", sys.executable, "-c",
                                 COUNTS], clean_env())
        env = _snippet_env(*snippet_args)
        from_snippet = _run_in(pod, [sys.executable, "-c", COUNTS], clean_env(**env))
    assert launched["omp"] == env["OMP_NUM_THREADS"] == str(n)
    assert launched["pools"] and all(count == n for _, count in launched["pools"]), launched
    assert from_snippet == launched


def test_show_says_the_request_bounds_pod_cpus_not_usable_cpus():
    quiet = "import sys; print('ready', flush=True); sys.stdin.read()"
    with kubelet_cgroup("Burstable", shares=shares_of(1500)) as pod:
        child = subprocess.Popen([sys.executable, "-c", quiet], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=clean_env())
        try:
            pod.enter(child.pid)
            assert child.stdout.readline().strip() == "ready"
            out = subprocess.run([sys.executable, "-m", "parinfo", "show", "--pid", str(child.pid), "--json"],
                                 cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120)
        finally:
            child.stdin.close()
            child.wait(timeout=10)
    assert out.returncode == 0, out.stderr
    p = json.loads(out.stdout)["pod"]
    assert (p["request_millicores"], p["limit"], p["pod_cpus"], p["usable_cpus"]) == (1500, None, 1, _node_cpus())
    assert "a request is not a limit: the kernel does not throttle at it" in p["pod_cpus_source"]["text"]
    assert p["pod_cpus_source"]["detail"] == f"/sys/fs/cgroup/cpu{pod.path}/cpu.shares"
