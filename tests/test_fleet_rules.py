"""Outer threads and the fleet rules on hand-made rows; the fleet CLI without a cluster; inertness."""
from __future__ import annotations

import json
import re

import pytest
from conftest import clean_env, run_cli, run_json

import parinfo
from parinfo.diagnostics import fleet_rules
from parinfo.diagnostics.fleet_rows import WorkerRow
from parinfo.errors import UsageError
from parinfo.fleet.report import Cluster, FleetReport
from parinfo.process import outer
from parinfo.process.environment import EnvRow
from parinfo.records.convert import load


def _row(framework, threads, pools, usable=4, cpus=None, worker="w", host="h"):
    return {"worker": worker, "host": {"key": host, "hostname": host}, "pid": 1,
            "machine": {"usable_cpus": usable},
            "outer": {"framework": framework, "threads": threads, "cpus": cpus},
            "pools": [{"library": lib, "num_threads": n, "duplicate_of": None} for lib, n in pools],
            "per_thread": None, "variables": [], "findings": []}


def _judge(row):
    """outer-times-inner over a hand-made worker row, read through the rows' parse path."""
    return fleet_rules.worker_findings(load(WorkerRow, row, strict=True))


def test_outer_times_inner_fires_only_when_the_product_exceeds_the_cpus():
    assert [f.id for f in _judge(_row("dask", 2, [("openblas", 4)]))] == ["outer-times-inner"]
    assert _judge(_row("dask", 2, [("openblas", 2)])) == []  # 4 on 4
    assert _judge(_row("dask", 8, [("openblas", 1)])) == []  # pools at 1
    assert _judge(_row(None, None, [("openblas", 8)])) == []  # no outer threads


def test_ray_budget_is_the_tasks_cpus():
    found = _judge(_row("ray", 1, [("libgomp", 2)], cpus=1))
    assert [f.id for f in found] == ["outer-times-inner"]
    assert "1 CPU granted to the task" in found[0].message and "ray_runtime_env" in found[0].fix


def test_per_thread_counts_are_seen():
    row = _row("dask", 2, [("libgomp", 1)])
    row["per_thread"] = [{"thread": "t0", "pools": [{"library": "libgomp", "num_threads": 4}]}]
    worker = load(WorkerRow, row, strict=True)
    assert fleet_rules.widest_pool(worker.report, worker.per_thread or ()) == ("libgomp", 4)
    assert [f.id for f in _judge(row)] == ["outer-times-inner"]


def test_host_oversubscribed_sums_the_workers_of_one_host():
    rows = [_row("dask", 1, [("openblas", 2)], usable=2, worker=w) for w in ("a", "b")]
    report = FleetReport.from_rows(Cluster("dask"), rows, strict=True)
    assert [f.id for f in report.hosts[0].findings] == ["host-oversubscribed"]
    assert report.hosts[0].threads_at_once == 4
    # Task threads alone above the CPUs, pools at 1: the cluster's own choice, not flagged.
    rows = [_row("dask", 2, [("openblas", 1)], usable=2, worker=w) for w in ("a", "b")]
    assert FleetReport.from_rows(Cluster("dask"), rows, strict=True).hosts[0].findings == []
    # Two hosts are judged apart.
    rows = [_row("dask", 1, [("openblas", 2)], usable=2, worker=w, host=w) for w in ("a", "b")]
    report = FleetReport.from_rows(Cluster("dask"), rows, strict=True)
    assert len(report.hosts) == 2 and all(h.findings == [] for h in report.hosts)
    assert json.loads(json.dumps(report.to_dict()))["schema_version"] == 2


def test_inspect_outer_threads():
    report = parinfo.inspect(imports=[], outer_threads=3)
    assert report.outer is not None and report.outer.framework == "user" and report.outer.threads == 3
    assert report.to_dict()["outer"]["threads"] == 3
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(UsageError):
            parinfo.inspect(imports=[], outer_threads=bad)


def test_outer_times_inner_in_a_real_process():
    code = """
import json, threadpoolctl, numpy, parinfo
threadpoolctl.threadpool_limits(4, user_api="blas")
r = parinfo.inspect(imports=[], outer_threads=2)
print(json.dumps([f.id for f in r.findings]))
"""
    assert "outer-times-inner" in run_json(code, prefix=["taskset", "-c", "0-1"])


def test_who_set_a_variable():
    rows = [{"name": "A", "value": "1", "launch_value": "1"}, {"name": "B", "value": "2", "launch_value": None},
            {"name": "C", "value": "3", "launch_value": "3"}, {"name": "D", "value": None, "launch_value": None}]
    got = outer.set_by([load(EnvRow, r, strict=True) for r in rows], None, parinfo_set={"B": "2"},
                       launch_env={outer.PARINFO_SET_VAR: "C"})
    assert got == {"A": "the user (at launch)", "B": outer.PARINFO, "C": outer.PARINFO}


def test_who_set_dask_nanny():
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    rows = [{"name": "X_NUM", "value": "1", "launch_value": "1"}, {"name": "Y_NUM", "value": "1", "launch_value": None}]
    with dask.config.set({"distributed.nanny.pre-spawn-environ": {"X_NUM": 1},
                          "distributed.nanny.environ": {"Y_NUM": 1}}):
        got = outer.set_by([load(EnvRow, r, strict=True) for r in rows], "dask", parinfo_set={})
    assert got == {"X_NUM": outer.NANNY_PRE_SPAWN, "Y_NUM": outer.NANNY_ENVIRON}


def test_loky_worker_is_detected_and_named():
    pytest.importorskip("joblib")
    code = """
import json
from joblib import Parallel, delayed
def look():
    import parinfo
    r = parinfo.inspect(imports=[])
    return r.to_dict()["outer"]
print(json.dumps(Parallel(n_jobs=2)(delayed(look)() for _ in range(2))[0]))
"""
    got = run_json(code, prefix=["taskset", "-c", "0-1"])
    assert got["framework"] == "loky" and got["cpus"] == 1
    assert any(who == outer.LOKY for who in got["variables_set_by"].values()), got


def test_cli_env_snippets():
    proc = run_cli("fleet", "env", "single-thread", "--format", "ray-runtime-env")
    assert proc.returncode == 0, proc.stderr
    env = json.loads(proc.stdout)
    assert env["worker_process_setup_hook"] == "parinfo.fleet.ray_hook.setup"
    assert env["env_vars"]["PARINFO_PROFILE"] == "single-thread"
    proc = run_cli("fleet", "env", "single-thread", "--format", "dask-config")
    assert proc.returncode == 0 and "pre-spawn-environ:" in proc.stdout


@pytest.mark.parametrize("args", [("fleet", "show"), ("fleet", "show", "--dask", "a", "--ray", "b"),
                                  ("fleet", "env", "no-such-profile", "-f", "dask-config"),
                                  ("fleet", "env", "single-thread", "-f", "yaml")])
def test_cli_mistakes_are_one_line(args):
    proc = run_cli(*args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr


def test_bad_targets_and_profiles():
    from parinfo.errors import ProfileError

    with pytest.raises(UsageError):
        parinfo.fleet.gather(object())
    with pytest.raises(ProfileError):
        parinfo.fleet.ray_runtime_env("no-such-profile")
    with pytest.raises(ProfileError):
        parinfo.fleet.ray_runtime_env(parinfo.resolve_profile("single-thread"))


def test_parinfo_and_show_import_no_cluster_library():
    code = """
import json, sys, parinfo, parinfo.fleet
from parinfo.cli import main
try:
    main(["show", "--import", "none"])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in ("dask", "distributed", "ray") if m in sys.modules)))
"""
    assert run_json(code, env=clean_env()) == []


def test_outer_threads_are_shown_in_the_text_report():
    from parinfo.cli.render_text import render_lines
    from parinfo.diagnostics.report import inspect

    text = "\n".join("".join(s for s, _ in line) for line in render_lines(inspect(outer_threads=3)))
    assert re.search(r"outer threads +3 \(given: outer_threads=3\)", text)
    plain = "\n".join("".join(s for s, _ in line) for line in render_lines(inspect()))
    assert "outer threads" not in plain


def test_worker_snippets_leave_out_a_preload_and_its_variables_and_say_so(tmp_path):
    from parinfo.process import preload as pre

    rec = pre.allocator("jemalloc")
    if pre.locate_allocator(rec).path is None:
        pytest.skip(f"jemalloc is not installed here ({rec.install})")
    prof = tmp_path / "serve.yaml"
    prof.write_text("version: 1\nname: serve\nintra_op: 1\ninter_op: 1\nallocator: jemalloc\n")
    config = parinfo.fleet.dask_config(str(prof))
    assert "MALLOC_CONF" not in config and "LD_PRELOAD" not in config
    assert "# allocator jemalloc is not carried (nor its variables)" in config
    assert 'OMP_NUM_THREADS: "1"' in config
    env = parinfo.fleet.ray_runtime_env(str(prof))["env_vars"]
    assert "MALLOC_CONF" not in env and "LD_PRELOAD" not in env and env["OMP_NUM_THREADS"] == "1"
    plan = parinfo.resolve_profile(str(prof))
    assert "MALLOC_CONF" in plan.env and "MALLOC_CONF" not in plan.env_without_preload
