"""parinfo.apply() in a running process (each case in a fresh subprocess): runtime counts, variables
for libraries not loaded yet, limits on loaded pools, torch, affinity, the user's variables, and
refusals that change nothing."""
from __future__ import annotations

import os
import textwrap

import pytest
from conftest import HAVE_NUMPY, clean_env, run_json

needs_numpy = pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")

POOLS = """
def pools():
    from threadpoolctl import threadpool_info
    return sorted({(p["internal_api"], p["num_threads"]) for p in threadpool_info()})
"""


def _run(body: str, **env: str) -> dict:
    code = "import json, os, sys\n" + POOLS + textwrap.dedent(body)
    return run_json(code, env=clean_env(**env), timeout=120)


@needs_numpy
def test_loaded_native_pools_are_limited_and_stay_limited():
    out = _run("""
        import numpy, parinfo
        before = pools()
        r = parinfo.apply("single-thread").lines()
        numpy.ones((300, 300)) @ numpy.ones((300, 300))
        print(json.dumps({"before": before, "after": pools(), "r": r}))
    """)
    assert all(n == 1 for _, n in out["after"]) and out["after"]
    assert out["r"]["not_in_force"] == []
    assert any("pool" in a and "limited to 1" in a for a in out["r"]["applied"])


@needs_numpy
def test_variables_are_set_for_libraries_loaded_later():
    out = _run("""
        import parinfo
        r = parinfo.apply("single-thread")
        assert "numpy" not in sys.modules
        import numpy
        print(json.dumps({"pools": pools(), "env": {k: os.environ[k] for k in r.plan.env}}))
    """)
    assert out["pools"] and all(n == 1 for _, n in out["pools"])
    assert out["env"]["OPENBLAS_NUM_THREADS"] == "1" and out["env"]["OMP_NUM_THREADS"] == "1"


def test_runtime_counts_follow_the_profile():
    out = _run("""
        import parinfo
        done = parinfo.apply({"version": 1, "name": "t", "intra_op": 3, "inter_op": 2})
        r = {**done.lines(), "plan": {"name": done.plan.name}}
        from parinfo import runtime
        i = runtime.info()
        print(json.dumps({"intra": parinfo.get_num_threads(), "inter": parinfo.get_num_interop_threads(),
                          "src": i["intra_op"]["source"], "r": r,
                          "heavy": [m for m in ("torch", "numpy") if m in sys.modules]}))
    """)
    assert (out["intra"], out["inter"]) == (3, 2)
    assert out["heavy"] == [], "apply() imports neither torch nor numpy"
    assert out["src"] == {"kind": "profile", "detail": "t", "text": "profile t"}
    assert "runtime intra-op count 3" in out["r"]["applied"]
    assert out["r"]["plan"]["name"] == "t"


@needs_numpy
def test_users_variables_are_kept_unless_forced():
    body = """
        import numpy, parinfo
        r = parinfo.apply("single-thread", force={force}).lines()
        print(json.dumps({{"omp": os.environ["OMP_NUM_THREADS"], "blas": os.environ["OPENBLAS_NUM_THREADS"],
                          "pools": dict(pools()), "r": r}}))
    """
    kept = _run(body.format(force=False), OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2")
    assert kept["omp"] == "2" and kept["blas"] == "2"
    assert any(s.startswith("OPENBLAS_NUM_THREADS: kept '2' set by the user") for s in kept["r"]["skipped"])
    assert kept["pools"]["openblas"] == 2, "the user's count stays in force on the loaded pool"
    assert kept["r"]["not_in_force"] == []
    forced = _run(body.format(force=True), OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2")
    assert forced["omp"] == "1" and forced["blas"] == "1" and forced["pools"]["openblas"] == 1
    assert "OPENBLAS_NUM_THREADS=1 (overrode the user's '2', force=True)" in forced["r"]["applied"]


def test_a_second_apply_is_not_confused_by_the_first():
    out = _run("""
        import parinfo
        parinfo.apply({"version": 1, "intra_op": 2, "inter_op": 1})
        r = parinfo.apply({"version": 1, "intra_op": 1, "inter_op": 1}).lines()
        print(json.dumps({"omp": os.environ["OMP_NUM_THREADS"], "r": r, "intra": parinfo.get_num_threads()}))
    """)
    assert out["omp"] == "1" and out["intra"] == 1
    assert not out["r"]["skipped"] or all("kept" not in s for s in out["r"]["skipped"])


@pytest.mark.timeout(120)
def test_too_late_for_the_inter_op_count_changes_nothing():
    out = _run("""
        import parinfo
        parinfo.wait(parinfo.fork(lambda: 1))  # the inter-op pool is running now
        try:
            parinfo.apply({"version": 1, "intra_op": 1, "inter_op": 7})
        except parinfo.ApplyError as exc:
            print(json.dumps({"error": str(exc), "omp": os.environ.get("OMP_NUM_THREADS"),
                              "intra": parinfo.get_num_threads()}))
    """)
    assert "cannot set number of interop threads after parallel work has started" in out["error"]
    assert out["omp"] is None
    assert out["intra"] != 1 or os.cpu_count() == 1


def test_bad_profiles_and_multi_instance_plans_change_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nintra_op: 0\n")
    out = _run(f"""
        import parinfo
        errors = []
        for p in ({str(bad)!r}, {{"version": 1, "instances": {{"count": 2}}}}):
            try:
                parinfo.apply(p)
            except parinfo.ParinfoError as exc:
                errors.append([type(exc).__name__, str(exc)])
        print(json.dumps({{"errors": errors, "omp": os.environ.get("OMP_NUM_THREADS")}}))
    """)
    (_k1, m1), = [e for e in out["errors"] if e[0] == "ProfileError"]
    assert m1 == (f"{bad}:2:11: 'intra_op' is 0; a count must be at least 1 "
                  "(use 1 or more, or an expression such as usable_cpus // 2)")
    if os.cpu_count() and len(os.sched_getaffinity(0)) >= 2:
        (_k2, m2), = [e for e in out["errors"] if e[0] == "ApplyError"]
        assert "runs 2 pinned instances" in m2 and "parinfo apply" in m2
    assert out["omp"] is None


def test_affinity_is_applied_to_every_thread():
    cpu = min(os.sched_getaffinity(0))
    out = _run(f"""
        import threading, parinfo
        ev = threading.Event()
        t = threading.Thread(target=ev.wait); t.start()
        r = parinfo.apply({{"version": 1, "intra_op": 1, "inter_op": 1, "affinity": [{cpu}]}}).lines()
        tids = os.listdir("/proc/self/task")
        masks = sorted({{tuple(sorted(os.sched_getaffinity(int(t)))) for t in tids}})
        ev.set(); t.join()
        print(json.dumps({{"masks": masks, "r": r}}))
    """)
    assert out["masks"] == [[cpu]]
    assert out["r"]["not_in_force"] == []


@pytest.mark.torch
def test_torch_counts_are_set_when_torch_is_imported():
    out = _run("""
        import torch, parinfo
        r = parinfo.apply({"version": 1, "intra_op": 1, "inter_op": 1}).lines()
        print(json.dumps({"intra": torch.get_num_threads(), "inter": torch.get_num_interop_threads(), "r": r}))
    """)
    assert (out["intra"], out["inter"]) == (1, 1)
    assert "torch.set_num_threads(1)" in out["r"]["applied"]
    assert out["r"]["not_in_force"] == []


@pytest.mark.torch
def test_torch_inter_op_too_late_is_reported_not_raised():
    out = _run("""
        import torch, parinfo
        torch.set_num_interop_threads(2)
        r = parinfo.apply({"version": 1, "intra_op": 1, "inter_op": 1}).lines()
        print(json.dumps({"inter": torch.get_num_interop_threads(), "r": r}))
    """)
    assert out["inter"] == 2
    assert any(s.startswith("torch inter-op stays 2: Error: cannot set number of interop threads")
               for s in out["r"]["skipped"])
    assert any("torch inter-op count is 2, not 1" in s for s in out["r"]["not_in_force"])
