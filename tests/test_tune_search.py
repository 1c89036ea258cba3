"""The tuner's adaptive search, driven by fake curves (no processes, no timing)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from parinfo.tuning.search import (
    Point,
    Stats,
    clearly_worse,
    coarse_values,
    pair_candidates,
    pick_best,
    search_counts,
    search_pairs,
)


def fake(curve, spread=0.0):
    """measure() for a curve {count: seconds}; records the calls it got."""
    calls = []

    def measure(p: Point) -> Stats:
        calls.append(p)
        t = curve(p) if callable(curve) else curve[p.intra]
        return Stats((t * (1 - spread), t * (1 - spread / 2), t, t * (1 + spread / 2), t * (1 + spread)))

    measure.calls = calls
    return measure


def v_curve(best, lo=0.010, slope=0.5):
    return lambda p: lo * (1 + slope * abs(p.intra - best))


def test_two_cpus_measures_both_and_skips_nothing():
    m = fake({1: 0.022, 2: 0.011})
    r = search_counts([1, 2], m)
    assert r.best == Point(2)
    assert r.skipped == {}
    assert sorted(r.stats) == [Point(1), Point(2)]


def test_two_cpus_oversubscribed_to_four_finds_two():
    # the reference's torch.mm sweep: 1: 21.9 ms, 2: 11.0, 3: 10.9 (within the tie), 4: 14.7
    m = fake({1: 0.0219, 2: 0.0110, 3: 0.0109, 4: 0.0147})
    r = search_counts(range(1, 5), m)
    assert r.best == Point(2)  # 3 is within 1% of 2: fewer threads win the tie
    assert set(r.stats) == {Point(1), Point(2), Point(3), Point(4)}


def test_coarse_values_are_ends_and_powers_of_two():
    assert coarse_values(list(range(1, 17))) == [1, 2, 4, 8, 16]
    assert coarse_values(list(range(3, 13))) == [3, 4, 8, 12]
    assert coarse_values([5]) == [5]


def test_sixteen_cores_valley_at_four_skips_far_points_with_reasons():
    m = fake(v_curve(4))
    r = search_counts(range(1, 17), m)
    assert r.best == Point(4)
    measured = {p.intra for p in r.stats}
    assert measured == {1, 2, 3, 4, 5, 6, 8, 16}
    assert {p.intra for p in r.skipped} == {7, 9, 10, 11, 12, 13, 14, 15}
    assert "between 6" in r.skipped[Point(7)] and "and 8" in r.skipped[Point(7)]
    assert "between 8" in r.skipped[Point(12)] and "and 16" in r.skipped[Point(12)]
    # every candidate is either measured or skipped, never both
    assert set(r.stats) | set(r.skipped) == set(r.candidates)
    assert not set(r.stats) & set(r.skipped)
    # measured once each, in the recorded order
    assert m.calls == r.order and len(set(m.calls)) == len(m.calls)


def test_direction_stops_once_clearly_worse_and_rising():
    m = fake(v_curve(3))
    r = search_counts(range(1, 65), m)
    assert r.best == Point(3)
    assert Point(64) not in r.stats and Point(32) not in r.stats
    assert "direction was stopped" in r.skipped[Point(64)]
    assert len(r.stats) <= 8


def test_monotone_curve_on_many_cores_measures_the_top_end():
    m = fake(lambda p: 1.0 / p.intra)
    r = search_counts(range(1, 65), m)
    assert r.best == Point(64)
    assert len(r.stats) < 15


def test_noise_keeps_a_direction_open():
    # 8 and 16 are slower, but within their own wide spread: not "clearly" slower, so no stop.
    curve = {1: 0.040, 2: 0.020, 4: 0.010, 8: 0.0105, 16: 0.0110, 32: 0.0112, 64: 0.0113}
    m = fake(lambda p: curve.get(p.intra, 0.0107), spread=0.2)
    r = search_counts(range(1, 65), m)
    assert Point(64) in r.stats  # the end was measured: noise never stopped the sweep


def test_clearly_worse_respects_margin_and_spread():
    a = Stats((0.0105,) * 5)
    b = Stats((0.0100,) * 5)
    assert clearly_worse(a, b, 0.03)
    assert not clearly_worse(a, b, 0.06)
    noisy = Stats((0.008, 0.009, 0.0105, 0.012, 0.013))
    assert not clearly_worse(noisy, b, 0.03)


def test_exhaustive_measures_everything():
    m = fake(v_curve(5))
    r = search_counts(range(1, 11), m, exhaustive=True)
    assert len(r.stats) == 10 and r.skipped == {} and r.best == Point(5)


def test_pick_best_prefers_fewer_threads_within_tie():
    stats = {Point(2): Stats((0.0100,)), Point(3): Stats((0.0099,)), Point(4): Stats((0.0080,))}
    assert pick_best(stats) == Point(4)
    stats[Point(4)] = Stats((0.00995,))
    stats[Point(2)] = Stats((0.00999,))
    assert pick_best(stats) == Point(2)


def test_stats_median_quartiles_spread():
    s = Stats((0.010, 0.011, 0.012, 0.013, 0.030))
    assert s.median == 0.012
    q1, q3 = s.quartiles
    assert q1 == 0.011 and q3 == 0.013
    assert s.spread == pytest.approx(0.002 / 0.012)
    with pytest.raises(ValueError):
        Stats(())


@settings(max_examples=200, deadline=None)
@given(n=st.integers(min_value=1, max_value=96), frac=st.floats(0, 1), left=st.floats(0.01, 2),
       right=st.floats(0.01, 2))
def test_unimodal_curves_find_the_minimum(n, frac, left, right):
    best = 1 + round(frac * (n - 1))

    def curve(p):
        d = p.intra - best
        return 0.01 * (1 + (left if d < 0 else right) * abs(d) / n + 0.001 * abs(d))

    m = fake(curve)
    r = search_counts(range(1, n + 1), m)
    true_min = min(curve(Point(v)) for v in range(1, n + 1))
    assert r.stats[r.best].median <= true_min * 1.01
    assert set(r.stats) | set(r.skipped) == set(r.candidates)
    if n >= 16:
        assert len(r.stats) < n  # the search saved work


def _pair_curve(p: Point, cpus: int) -> float:
    """Seconds per request: best with 2 requests x (cpus // 2) threads."""
    base = 0.010
    if p.inter * p.intra > cpus:
        return base * 5
    idle = cpus - p.inter * p.intra
    return base * (1 + 0.4 * abs(p.inter - 2) + 0.3 * idle)


def test_pairs_on_eight_cpus_find_two_by_four_and_skip_idle_pairs():
    m = fake(lambda p: _pair_curve(p, 8))
    r = search_pairs(8, m)
    assert r.best == Point(4, 2)
    assert all(p.intra * p.inter <= 8 for p in r.candidates)
    assert set(r.stats) | set(r.skipped) == set(r.candidates)
    assert len(r.stats) < len(r.candidates)
    assert "leaves CPUs idle" in r.skipped[Point(1, 1)]


def test_pairs_on_two_cpus():
    m = fake(lambda p: _pair_curve(p, 2))
    r = search_pairs(2, m)
    assert set(r.candidates) == {Point(1, 1), Point(2, 1), Point(1, 2)}
    assert r.best == Point(1, 2)


def test_pair_candidates_respect_ranges_and_product():
    c = pair_candidates(4, (2, 4), (1, 2))
    assert set(c) == {Point(2, 1), Point(3, 1), Point(4, 1), Point(2, 2)}


def test_pairs_on_sixty_four_cpus_stay_cheap():
    m = fake(lambda p: _pair_curve(p, 64))
    r = search_pairs(64, m)
    assert r.best == Point(32, 2)
    assert len(r.stats) <= 25 < len(r.candidates)


def test_confirm_remeasures_near_ties_and_pools_samples():
    # first pass: 2 looks a bit faster than 3 by luck; the second look shows 3 is really faster
    first = {1: 0.030, 2: 0.0100, 3: 0.0102}
    second = {1: 0.030, 2: 0.0110, 3: 0.0090}
    seen = []

    def measure(p):
        t = (second if p in seen else first)[p.intra]
        seen.append(p)
        return Stats((t,) * 3)

    r = search_counts(range(1, 4), measure, confirm_close=True)
    assert sorted(r.confirmed) == [Point(2), Point(3)]
    assert len(r.stats[Point(3)].samples) == 6 and len(r.stats[Point(1)].samples) == 3
    assert r.best == Point(3)
    assert Point(1) not in r.confirmed  # clearly slower: measured once


def test_confirm_does_nothing_when_the_best_is_clear():
    m = fake(v_curve(4))
    r = search_counts(range(1, 9), m, confirm_close=True)
    assert r.confirmed == [] and len(m.calls) == len(set(m.calls))
