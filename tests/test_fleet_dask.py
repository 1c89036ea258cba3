"""Fleet on a real Dask cluster: 2 worker processes x 2 threads on 127.0.0.1, the nanny's own
thread variables emptied, so the workers start oversubscribed as a cluster without that default would."""
from __future__ import annotations

import os
import time

import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("sklearn")

import parinfo  # noqa: E402
from parinfo.errors import ProfileError  # noqa: E402
from parinfo.fleet import dask as fleet_dask  # noqa: E402
from parinfo.process.libraries import library  # noqa: E402
from parinfo.process.outer import PARINFO  # noqa: E402
from parinfo.process.variables import THREAD_VARS  # noqa: E402

pytestmark = [pytest.mark.timeout(300), pytest.mark.once]  # once: .ci/run runs these on its first Python only

OMP_VAR = library("libgomp").profile_var


def _import_libraries() -> list[str]:
    import numpy  # noqa: F401
    import sklearn.linear_model  # noqa: F401  (loads scikit-learn's libgomp)
    from threadpoolctl import threadpool_info

    return sorted({p["user_api"] for p in threadpool_info()})


def _read_in_task(delay: float) -> tuple[int, str, dict[str, int]]:
    """One task: the pools' counts as this executor thread sees them."""
    import threading

    from threadpoolctl import threadpool_info

    time.sleep(delay)
    counts: dict[str, int] = {}
    for p in threadpool_info():
        counts[p["internal_api"]] = max(counts.get(p["internal_api"], 0), p["num_threads"])
    return os.getpid(), threading.current_thread().name, counts


@pytest.fixture(scope="module")
def client():
    import dask
    from distributed import Client, LocalCluster

    saved = dict(os.environ)
    for name in THREAD_VARS:  # workers inherit this process's environment
        os.environ.pop(name, None)
    emptied = {name: None for name in dask.config.get("distributed.nanny.pre-spawn-environ")}
    cluster = cli = None
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": emptied}):
            cluster = LocalCluster(n_workers=2, threads_per_worker=2, processes=True, host="127.0.0.1",
                                   dashboard_address=None, timeout=120)
            cli = Client(cluster, timeout=120)
            cli.run(_import_libraries)
            yield cli
    finally:
        if cli is not None:
            cli.close(timeout=30)
        if cluster is not None:
            cluster.close(timeout=30)
        os.environ.clear()  # in a LocalCluster the nanny is this process: it edits our environment
        os.environ.update(saved)


def _per_thread_counts(client) -> dict[tuple[int, str], dict[str, int]]:
    """Run enough real tasks on each worker that both of its executor threads answer."""
    futures = []
    for address in client.scheduler_info()["workers"]:
        futures += [client.submit(_read_in_task, 0.05, pure=False, workers=[address]) for _ in range(16)]
    return {(pid, name): counts for pid, name, counts in client.gather(futures)}


def test_cluster_listens_on_loopback_only(client):
    import psutil

    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        for conn in proc.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                assert conn.laddr.ip == "127.0.0.1", (proc.pid, conn.laddr)


def test_gather_flags_each_worker_and_the_host(client):
    report = parinfo.fleet.gather(client)
    assert len(report.workers) == 2 and len(report.hosts) == 1
    for worker in report.workers:
        outer = worker.report.outer
        assert outer is not None and outer.framework == "dask" and outer.threads == 2
        assert "outer-times-inner" in {f.id for f in worker.findings}, worker.findings
        assert any(p.user_api == "openmp" for p in worker.report.pools)
    host = report.hosts[0]
    assert host.outer_threads == 4 and host.threads_at_once > host.usable_cpus
    assert [f.id for f in host.findings] == ["host-oversubscribed"]
    assert {f.id for _, f in report.problems()} >= {"outer-times-inner", "host-oversubscribed"}
    data = report.to_dict()
    assert data["schema_version"] == 2 and data["cluster"]["kind"] == "dask"
    assert "outer-times-inner" in report.table() and "host-oversubscribed" in report.table()


def test_cli_show_fails_check_and_prints_json(client):
    from conftest import clean_env, run_cli

    address = client.scheduler.address
    proc = run_cli("fleet", "show", "--dask", address, "--check", env=clean_env(), timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "outer-times-inner" in proc.stdout and "host-oversubscribed" in proc.stdout
    proc = run_cli("fleet", "show", "--dask", address, "--json", env=clean_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    import json

    data = json.loads(proc.stdout)
    assert data["schema_version"] == 2 and len(data["workers"]) == 2


def test_a_bad_profile_raises_here_and_leaves_no_plugin(client):
    with pytest.raises(ProfileError):
        parinfo.fleet.apply(client, "no-such-profile")
    # Valid anywhere, but a zero divisor on the workers' machine: the error comes from the workers.
    usable = parinfo.machine_facts().usable_cpus
    bad = {"version": 1, "name": "bad", "intra_op": f"4 // (usable_cpus - {usable})"}
    with pytest.raises(ProfileError, match="division by zero"):
        parinfo.fleet.apply(client, bad)
    assert fleet_dask.PLUGIN_NAME not in fleet_dask.registered(client)["worker"]
    assert not any(client.run(lambda dask_worker: fleet_dask.PLUGIN_NAME in dask_worker.plugins).values())


def test_apply_reaches_every_executor_thread(client):
    done = parinfo.fleet.apply(client, "single-thread")
    assert len(done) == 2 and all(len(d["threads_reached"]) == 2 for d in done.values())
    # What stays out of reach is said: threads a worker starts later (secede) begin at the count the
    # runtime read at load. The executor threads are not among the threads said to keep another count.
    for d in done.values():
        for line in d["not_in_force"]:
            assert "threads started from now on" in line, line
            assert "Dask-Default-Threads" not in line.split("keep theirs")[0].split("from now on")[1], line
    seen = _per_thread_counts(client)
    assert len(seen) == 4, seen  # 2 workers x 2 executor threads
    for counts in seen.values():
        assert counts.get("openblas") == 1 and counts.get("openmp") == 1, seen
    report = parinfo.fleet.gather(client, per_thread=True)
    assert not report.problems() or {f.id for _, f in report.problems()}.isdisjoint(
        {"outer-times-inner", "host-oversubscribed"})
    assert all(w.per_thread is not None and len(w.per_thread) == 2 for w in report.workers)
    for worker in report.workers:
        omp, set_by = next((v, who) for v, who in worker.variables() if v.name == OMP_VAR)
        assert omp.value == "1" and set_by == PARINFO
    # Registering again replaces the plugin: one copy, under one name.
    parinfo.fleet.apply(client, "single-thread")
    assert fleet_dask.registered(client)["worker"].count(fleet_dask.PLUGIN_NAME) == 1


def test_cli_apply_then_show_passes_check(client):
    from conftest import clean_env, run_cli

    address = client.scheduler.address
    proc = run_cli("fleet", "apply", "single-thread", "--dask", address, env=clean_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("2 of 2 executor threads reached") == 2, proc.stdout
    proc = run_cli("fleet", "show", "--dask", address, "--per-thread", "--check", env=clean_env(), timeout=120)
    assert "outer-times-inner" not in proc.stdout and "host-oversubscribed" not in proc.stdout, proc.stdout


def test_apply_survives_restart(client):
    client.restart()
    client.run(_import_libraries)  # libgomp loads after the plugin ran: the variable decides
    seen = _per_thread_counts(client)
    assert len(seen) == 4, seen
    for counts in seen.values():
        assert counts.get("openblas") == 1 and counts.get("openmp") == 1, seen


def test_apply_restart_puts_variables_in_the_start_up_environment(client):
    try:
        parinfo.fleet.apply(client, "single-thread", restart=True)
        client.wait_for_workers(2, timeout=120)
        report = parinfo.fleet.gather(client)
        for worker in report.workers:
            omp, set_by = next((v, who) for v, who in worker.variables() if v.name == OMP_VAR)
            assert omp.launch_value == "1" and set_by == PARINFO, (omp, set_by)
    finally:
        fleet_dask._unregister(client, nanny=True)
