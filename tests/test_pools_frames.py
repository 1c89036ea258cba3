"""Arrow, Polars and DuckDB in real processes with the real wheels: every count parinfo reports
equals the library's own getter (with and without their variables, on one CPU of affinity, under a
0.5-CPU quota), read without starting a pool or creating a connection."""
from __future__ import annotations

import os

import pytest
from conftest import clean_env, run_json

from parinfo.process import libraries as reg

pytestmark = pytest.mark.pools("pyarrow", "polars", "duckdb")

# One process: parinfo's rows before Polars' pool starts (and the threads around that read), then
# the libraries' own getters, then the rows again once the pool runs and Arrow's IO pool was resized.
PROBE = """
import json, os
import pyarrow, polars, duckdb
from parinfo.diagnostics.report import inspect

def tasks():
    return len(os.listdir("/proc/self/task"))

def rows():
    settings = inspect().to_dict()["settings"]
    return {s["library"]: s for s in settings if s.get("owner") in ("pyarrow", "polars", "duckdb")}

before = tasks()
first = rows()
out = {"threads": [before, tasks()], "first": first}
out["polars"] = polars.thread_pool_size()
out["duckdb"] = duckdb.connect().execute("select current_setting('threads')").fetchone()[0]
out["arrow"] = [pyarrow.cpu_count(), pyarrow.io_thread_count()]
pyarrow.set_io_thread_count(out["arrow"][1] + 1)
out["second"] = rows()
out["affinity"], out["online"] = len(os.sched_getaffinity(0)), os.cpu_count()
polars.DataFrame({"a": list(range(1000))}).lazy().select(polars.col("a").sum()).collect()
from parinfo.process.threads import live_threads, thread_group
out["groups"] = sorted({thread_group(t.name) for t in live_threads().threads})
out["main"] = open("/proc/self/comm").read().strip()  # the name unnamed threads (Arrow's, DuckDB's) carry
print(json.dumps(out))
"""

ALL_SET = {"OMP_NUM_THREADS": "3", "OMP_THREAD_LIMIT": "2", "ARROW_IO_THREADS": "5", "POLARS_MAX_THREADS": "1"}


def probe(env: dict[str, str] | None = None, prefix: list[str] | None = None) -> dict:
    out = run_json(PROBE, env=clean_env(**(env or {})), prefix=prefix, timeout=120)
    first, second = out["first"], out["second"]
    assert out["threads"][0] == out["threads"][1], "reading started threads (a pool or a connection)"
    # counts in force: the getters' own answers
    assert first["pyarrow"]["count"] == second["pyarrow"]["count"] == out["arrow"][0]
    assert first["pyarrow io"]["count"] == out["arrow"][1]
    assert second["pyarrow io"]["count"] == out["arrow"][1] + 1
    assert second["pyarrow io"]["source"]["kind"] == "run-time call"
    assert "pyarrow.set_io_thread_count" in second["pyarrow io"]["source"]["text"]
    # Polars: unread until its pool runs (reading would start it), predicted right; then read
    assert first["polars"]["count"] is None and "has not started" in first["polars"]["source"]["text"]
    assert first["polars"]["expected_from_env"] == second["polars"]["count"] == out["polars"]
    # DuckDB: never read (no connection made); what a new connection gets
    assert first["duckdb"]["count"] is None and first["duckdb"]["expected_from_env"] == out["duckdb"]
    return out


def test_defaults_and_a_count_set_at_run_time():
    out = probe()
    named = {group for group, _ in reg.family(reg.Polars).thread_names}
    assert set(out["groups"]) - {out["main"]} <= named, "a Polars thread the registry does not name"
    assert {"polars-*", "tokio-rt-worker"} <= set(out["groups"])
    assert out["arrow"] == [out["affinity"], 8] and out["polars"] == out["affinity"]
    for name in ("pyarrow", "pyarrow io"):
        assert out["first"][name]["source"]["kind"] == "library default"
    assert out["second"]["polars"]["source"]["kind"] == "library default"


def test_their_variables_in_precedence():
    out = probe(ALL_SET)
    assert out["arrow"] == [2, 5] and out["polars"] == 1  # OMP_THREAD_LIMIT caps OMP_NUM_THREADS=3
    assert out["duckdb"] == out["online"] or out["duckdb"] < out["online"]  # reads none of them
    rows = out["second"]
    assert [rows[n]["variable"] for n in ("pyarrow", "polars")] == ["OMP_NUM_THREADS", "POLARS_MAX_THREADS"]
    assert out["first"]["pyarrow io"]["variable"] == "ARROW_IO_THREADS"
    assert "capped at OMP_THREAD_LIMIT=2" in rows["pyarrow"]["source"]["text"]


def test_values_each_parses_its_own_way():
    out = probe({"OMP_NUM_THREADS": "1x", "ARROW_IO_THREADS": "+3", "POLARS_MAX_THREADS": " +1 "})
    assert out["arrow"] == [1, 8] and out["polars"] == 1  # Arrow: a leading number; strict digits for IO
    rows = out["second"]
    assert [rows[n]["source"]["kind"] for n in ("pyarrow", "polars")] == ["variable", "variable"]
    assert out["first"]["pyarrow io"]["source"]["kind"] == "library default"


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs to narrow the affinity")
def test_one_cpu_of_affinity():
    cpu = min(os.sched_getaffinity(0))
    out = probe(prefix=["taskset", "-c", str(cpu)])
    assert out["arrow"] == [1, 8] and out["polars"] == 1
    assert out["duckdb"] == out["online"]  # DuckDB ignores affinity


def test_half_a_cpu_of_quota(quota_cgroup):
    prefix = ["sh", "-c", f'echo $$ > {quota_cgroup}/cgroup.procs && exec "$@"', "sh"]
    out = probe(prefix=prefix)
    assert out["arrow"] == [out["affinity"], 8]  # Arrow ignores the quota
    assert out["polars"] == 1 and out["duckdb"] == 1  # both follow it
