"""Fleet on a real local Ray: 2 CPUs, every socket on 127.0.0.1 (checked first; nothing else runs
if one is not), shut down at the end."""
from __future__ import annotations

import ipaddress
import os
import sys

import pytest

from parinfo.process.libraries import library
from parinfo.process.outer import PARINFO, RAY
from parinfo.process.variables import THREAD_VARS

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

OMP_VAR = library("libgomp").profile_var
LOOPBACK = {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}


def _is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr) in LOOPBACK


def _listening_elsewhere() -> list[str]:
    import psutil

    me = psutil.Process()
    bad = []
    for proc in [me, *me.children(recursive=True)]:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.Error:
            continue
        bad += [f"{proc.pid} {proc.name()} {c.laddr.ip}:{c.laddr.port}" for c in conns
                if c.status == psutil.CONN_LISTEN and not _is_loopback(c.laddr.ip)]
    return bad


@pytest.fixture(scope="module")
def ray_session():
    saved = dict(os.environ)
    # Read when ray is imported: without it Ray binds the machine's own address and every interface.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        ray = pytest.importorskip("ray")
    except BaseException:
        os.environ.clear()
        os.environ.update(saved)
        raise
    for name in THREAD_VARS:
        os.environ.pop(name, None)
    try:
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
                 object_store_memory=80 * 1024 * 1024, configure_logging=False, log_to_driver=False)
        bad = _listening_elsewhere()
        if bad:
            ray.shutdown()
        yield ray, bad
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def ray(ray_session):
    ray, bad = ray_session
    if bad:
        pytest.skip("Ray listened beyond 127.0.0.1: shut down, nothing else runs")
    return ray


def test_ray_listens_on_loopback_only(ray_session):
    _, bad = ray_session
    assert bad == [], f"Ray sockets not on 127.0.0.1: {bad}"


def _look(imports: list[str]) -> dict:
    import parinfo

    report = parinfo.inspect(imports=imports)
    # Problems: warnings and errors (an info, such as who set KMP_DUPLICATE_LIB_OK, asks nothing).
    return {"pid": os.getpid(), "outer": report.to_dict()["outer"], "findings": [f.id for f in report.problems()],
            "omp": os.environ.get(OMP_VAR)}


def test_ray_sets_omp_to_the_tasks_cpus_and_is_named(ray):
    got = ray.get(ray.remote(num_cpus=2)(_look).remote([]))
    assert got["outer"]["framework"] == "ray" and got["outer"]["cpus"] == 2
    assert got["omp"] == "2" and got["outer"]["variables_set_by"][OMP_VAR] == RAY


def test_reused_worker_is_flagged(ray):
    import parinfo

    first = ray.get(ray.remote(num_cpus=2)(_look).remote(["numpy", "sklearn.linear_model"]))
    later = ray.get([ray.remote(num_cpus=1)(_look).remote(["numpy", "sklearn.linear_model"]) for _ in range(2)])
    reused = [r for r in later if r["pid"] == first["pid"]]
    assert reused, "Ray did not reuse the worker of the 2-CPU task"
    assert "outer-times-inner" in reused[0]["findings"], reused[0]
    report = parinfo.fleet.gather(ray)
    flagged = [w for w in report.workers if w.pid == first["pid"]]
    assert flagged and "outer-times-inner" in {f.id for f in flagged[0].findings}
    assert "host-oversubscribed" in {f.id for h in report.hosts for f in h.findings}


def test_runtime_env_gives_no_findings_in_tasks(ray):
    import parinfo

    env = parinfo.fleet.ray_runtime_env("single-thread")
    assert env["worker_process_setup_hook"] == "parinfo.fleet.ray_hook.setup"
    got = ray.get(ray.remote(num_cpus=1)(_look).options(runtime_env=env).remote(["numpy", "sklearn.linear_model"]))
    # numpy and scipy each ship their own OpenBLAS: an info about the wheels, not about the counts.
    assert [f for f in got["findings"] if f != "duplicate-runtime-copies"] == [], got
    assert got["outer"]["variables_set_by"][OMP_VAR] == PARINFO and got["omp"] == "1"


def test_the_address_check_lets_a_real_gcs_through(ray):
    from parinfo.fleet.connect import check_ray

    address = ray.get_runtime_context().gcs_address
    check_ray(address, timeout=10)  # raises ConnectError for a port that does not answer gRPC
