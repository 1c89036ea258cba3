"""The latency tune's 2-D search over inter-op x intra-op pairs: on fake measurements whose best pair
is known (no processes, no timing), which tunes use it, and end to end (a fake curve keyed by the
counts the worker put in force, and the real ensemble workload)."""
from __future__ import annotations

import json
import textwrap

import pytest
import yaml
from conftest import HAVE_TORCH, clean_env, run_cli

from parinfo.errors import UsageError
from parinfo.tuning.options import TuneOptions, resolve
from parinfo.tuning.search import Point, Stats, grid_bound, search_grid


def fake(curve, spread=0.0):
    """measure() for ``curve(point) -> seconds``; records the calls it got."""
    calls = []

    def measure(p: Point) -> Stats:
        calls.append(p)
        t = curve(p)
        return Stats((t * (1 - spread), t, t * (1 + spread)))

    measure.calls = calls
    return measure


def bowl(best, lo=0.010):
    """Slower by 15 % per intra-op step and 20 % per inter-op step from ``best`` (intra, inter)."""
    return lambda p: lo * (1 + 0.15 * abs(p.intra - best[0]) + 0.2 * abs(p.inter - best[1]))


def ridge(best, lo=0.010):
    """A diagonal valley: what counts is the thread count inter x intra, then a little the inter-op
    count; a search along one axis at a time leaves it for a worse pair."""
    return lambda p: lo * (1 + 0.3 * abs(p.intra * p.inter - best[0] * best[1]) + 0.05 * abs(p.inter - best[1]))


@pytest.mark.parametrize("size", [2, 4, 8, 16])
@pytest.mark.parametrize("where", ["low", "high", "middle", "corner"])
def test_the_bowls_bottom_is_found_within_the_bound(size, where):
    best = {"low": (1, 1), "high": (size, size), "middle": (max(1, size // 2), 2 if size > 1 else 1),
            "corner": (size, 1)}[where]
    m = fake(bowl(best))
    r = search_grid((1, size), (1, size), m)
    assert r.best == Point(*best)
    assert len(m.calls) == len(set(m.calls)) <= grid_bound(size, size)
    assert set(r.stats) | set(r.skipped) == set(r.candidates) and not set(r.stats) & set(r.skipped)
    if size >= 8:
        assert len(r.stats) < size * size // 2  # adaptive: far from the full grid


@pytest.mark.parametrize(("size", "best"), [(8, (2, 4)), (16, (4, 4)), (16, (2, 8)), (32, (2, 16)), (64, (4, 16))])
def test_a_diagonal_valley_is_followed_by_the_trades_that_keep_the_thread_count(size, best):
    m = fake(ridge(best))
    r = search_grid((1, size), (1, size), m)
    assert r.best == Point(*best)
    assert len(r.stats) <= grid_bound(size, size) and len(r.stats) < size * size // 2


def test_two_cpus_try_torchs_own_two_by_two_and_throughputs_two_by_one():
    # the pairs a latency tune never tried when inter-op was fixed at 1
    times = {(1, 1): 0.030, (2, 1): 0.020, (1, 2): 0.025, (2, 2): 0.012}
    r = search_grid((1, 2), (1, 2), fake(lambda p: times[(p.intra, p.inter)]))
    assert set(r.stats) == {Point(1, 1), Point(2, 1), Point(1, 2), Point(2, 2)}
    assert r.best == Point(2, 2) and r.skipped == {}


def test_a_flat_surface_stops_after_one_round_and_keeps_the_fewest_threads():
    m = fake(lambda p: 0.010 * (1 + 0.004 * ((p.intra * 7 + p.inter * 3) % 5)), spread=0.02)  # within the noise
    r = search_grid((1, 16), (1, 16), m)
    assert r.best == Point(1, 1)
    assert len(r.stats) <= 16 + 16 + 10  # one round: two axis searches and one look around
    reasons = set(r.skipped.values())
    assert any("2-D search settled on 1x1" in why for why in reasons)


def test_exhaustive_measures_the_whole_grid():
    m = fake(bowl((2, 3)))
    r = search_grid((1, 3), (1, 4), m, exhaustive=True)
    assert len(r.stats) == 12 and r.best == Point(2, 3) and r.skipped == {}


class _Facts:
    usable_cpus = 4
    logical_cpus = 4


@pytest.mark.parametrize(("kw", "pairs", "inter"), [
    ({}, False, (1, 1)),                                                    # numpy matmul never forks
    pytest.param({"framework": "torch"}, False, (1, 1),                     # nor does torch.mm
                 marks=[pytest.mark.torch, pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")]),
    ({"workload": "ensemble"}, True, (1, 4)),                               # forks: inter-op x intra-op
    ({"stmt": "x = 1", "framework": "torch"}, True, (1, 4)),                # user code with torch may fork
    ({"stmt": "x = 1"}, False, (1, 1)),                                     # numpy user code: asked only
    ({"stmt": "x = 1", "max_inter": 2}, True, (1, 2)),                      # ... like this
    ({"stmt": "x = 1", "framework": "torch", "in_process": True}, False, (1, 1)),  # set once per process
    ({"objective": "throughput"}, True, (1, 4)),                            # unchanged: requests x intra
])
def test_which_latency_tunes_search_inter_op_too(kw, pairs, inter):
    plan = resolve(TuneOptions(**kw), _Facts())
    assert (plan.pairs, plan.inter) == (pairs, inter)
    if pairs and not plan.concurrent:
        assert plan.candidate_count() == 4 * (inter[1] - inter[0] + 1)


def test_in_process_refuses_an_inter_op_range_in_one_line():
    with pytest.raises(UsageError, match="--in-process cannot vary the inter-op count"):
        resolve(TuneOptions(stmt="x = 1", in_process=True, max_inter=2), _Facts())


FAKE = textwrap.dedent('''
    import os
    import time

    def work():
        # 5 ms at torch's own 2 x 2, slower by half of that per step on either axis
        intra = int(os.environ["PARINFO_NUM_THREADS"])
        inter = int(os.environ["PARINFO_NUM_INTEROP_THREADS"])
        time.sleep(0.005 * (1 + 0.5 * abs(intra - 2) + 0.5 * abs(inter - 2)))
''')
FAST = ("--repeats", "3", "--min-time", "0", "--warmup", "0", "--no-noise-check")


@pytest.mark.timeout(180)
def test_latency_tune_finds_the_known_pair_and_writes_both_counts(tmp_path):
    (tmp_path / "fakegrid.py").write_text(FAKE)
    prof = tmp_path / "tuned.yaml"
    proc = run_cli("tune", "--module", "fakegrid:work", "--max", "4", "--max-inter", "4", *FAST, "--no-confirm",
                   "--json", "--write", str(prof), env=clean_env(PYTHONPATH=str(tmp_path)), timeout=170)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["axis"] == "inter-op x intra-op threads" and out["objective"] == "latency"
    assert (out["best"]["inter_op"], out["best"]["intra_op"]) == (2, 2)
    assert out["counts"] == {"intra_op": 2, "inter_op": 2}
    assert out["candidates"] == 16 and len(out["points"]) + len(out["skipped"]) == 16
    body = yaml.safe_load(prof.read_text())
    assert (body["intra_op"], body["inter_op"]) == (2, 2)
    assert "2 inter-op x 2 intra-op" in body["description"]


@pytest.mark.timeout(180)
def test_real_ensemble_tune_end_to_end_writes_the_winning_pair(tmp_path):
    prof = tmp_path / "tuned.yaml"
    proc = run_cli("tune", "ensemble", "--max", "2", *FAST, "--json", "--write", str(prof),
                   env=clean_env(), timeout=170)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    measured = {(p["inter_op"], p["intra_op"]) for p in out["points"]}
    assert measured == {(1, 1), (1, 2), (2, 1), (2, 2)}  # torch's own 2x2 and 2x1 included
    for p in out["points"]:
        assert p["in_force"]["parinfo"] == {"intra_op": p["intra_op"], "inter_op": p["inter_op"]}
    best = (out["best"]["inter_op"], out["best"]["intra_op"])
    assert best in measured
    body = yaml.safe_load(prof.read_text())
    assert (body["inter_op"], body["intra_op"]) == best
