"""The tuner's search: which thread counts to measure, and which ones the measurements rule out.

Pure functions over a ``measure(point) -> Stats`` callable, so tests drive them with a fake curve.
Lower is better everywhere (seconds per call, or seconds per request for throughput).

The rule: measure the ends and the powers of two between them, stop going further in a direction
once the curve is clearly slower than the best (beyond the noise) and still getting slower, then
bisect the gaps next to the best until its neighbours are measured. A point between two measured
points that are both slower than the best is ruled out (the curve is taken to have one valley).
Throughput pairs search the request axis, then the intra-op axis (:func:`search_pairs`); latency
pairs (work that forks inter-op tasks) alternate the two axes and climb to the best neighbouring
pair (:func:`search_grid`).
"""
from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from typing import Any

from parinfo.records.record import record

DEFAULT_MARGIN = 0.03  # smallest relative gap called "clearly" slower
DEFAULT_TIE = 0.01  # medians this close count as equal; the one using fewer threads wins
DEFAULT_PATIENCE = 2  # clearly-slower points in a row before a direction is stopped


@record(frozen=True, order=True)
class Point:
    """One setting to measure: ``inter`` concurrent requests or inter-op threads, ``intra`` threads each."""

    intra: int
    inter: int = 1

    @property
    def threads(self) -> int:
        return self.intra * self.inter

    def label(self, pairs: bool) -> str:
        return f"{self.inter}x{self.intra}" if pairs else str(self.intra)


@record(frozen=True)
class Stats:
    """Repeated timings of one point, in seconds per call."""

    samples: tuple[float, ...]
    number: int = 1  # calls per sample

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError("Stats needs at least one sample")

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    @property
    def quartiles(self) -> tuple[float, float]:
        if len(self.samples) < 4:
            return self.min, self.max
        q = statistics.quantiles(self.samples, n=4, method="inclusive")
        return q[0], q[2]

    @property
    def spread(self) -> float:
        """Relative spread: interquartile range (range below 4 samples) over the median."""
        q1, q3 = self.quartiles
        med = self.median
        return (q3 - q1) / med if med > 0 else 0.0

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The figures a tune's JSON gives of the samples (worked out here), then the samples."""
        q1, q3 = self.quartiles
        return {"median_s": self.median, "q1_s": q1, "q3_s": q3, "min_s": self.min, "max_s": self.max,
                "spread": self.spread, "repeats": len(self.samples), "number": self.number,
                "samples_s": data["samples"]}


def clearly_worse(a: Stats, b: Stats, margin: float = DEFAULT_MARGIN) -> bool:
    """True when ``a`` is slower than ``b`` by more than the margin and both points' noise."""
    tol = max(margin, a.spread, b.spread)
    return a.median > b.median * (1.0 + tol)


@record
class SearchResult:
    """What was measured (in order), the winner, and every candidate left out with the reason."""

    candidates: list[Point]
    order: list[Point] = field(default_factory=list)
    stats: dict[Point, Stats] = field(default_factory=dict)
    best: Point | None = None
    skipped: dict[Point, str] = field(default_factory=dict)
    confirmed: list[Point] = field(default_factory=list)  # measured again: they were within the noise


class _Measured:
    """Memoises measure() and records the order points were measured in."""

    def __init__(self, measure: Callable[[Point], Stats], result: SearchResult) -> None:
        self._measure = measure
        self.result = result

    def __call__(self, p: Point) -> Stats:
        s = self.result.stats.get(p)
        if s is None:
            s = self._measure(p)
            self.result.stats[p] = s
            self.result.order.append(p)
        return s


def confirm(result: SearchResult, measure: Callable[[Point], Stats], *, margin: float = DEFAULT_MARGIN,
            tie: float = DEFAULT_TIE) -> None:
    """Measure the fastest point and every point within its noise once more, pool the samples, and
    pick again: one unlucky run should not decide between near-equal points."""
    if not result.stats:
        return
    fastest = min(result.stats, key=lambda p: (result.stats[p].median, p.threads))
    fs = result.stats[fastest]
    close = [p for p, s in result.stats.items() if p != fastest and not clearly_worse(s, fs, margin)]
    if not close:
        return
    for p in [fastest, *sorted(close)]:
        again = measure(p)
        old = result.stats[p]
        result.stats[p] = Stats(old.samples + again.samples, old.number)
        result.confirmed.append(p)
    result.best = pick_best(result.stats, tie)


def _every_point(result: SearchResult, get: Callable[[Point], Stats], measure: Callable[[Point], Stats], *,
                 confirm_close: bool, margin: float, tie: float) -> SearchResult:
    """An exhaustive search: every candidate measured, the best picked (and confirmed when close)."""
    for p in result.candidates:
        get(p)
    result.best = pick_best(result.stats, tie)
    if confirm_close:
        confirm(result, measure, margin=margin, tie=tie)
    return result


def pick_best(stats: dict[Point, Stats], tie: float = DEFAULT_TIE) -> Point:
    """Fastest median; among points within ``tie`` of it, the one using the fewest threads."""
    fastest = min(s.median for s in stats.values())
    close = [p for p, s in stats.items() if s.median <= fastest * (1.0 + tie)]
    return min(close, key=lambda p: (p.threads, p.inter, stats[p].median))


def coarse_values(values: list[int]) -> list[int]:
    """The ends of ``values`` and the powers of two between them, ascending."""
    lo, hi = values[0], values[-1]
    return [v for v in values if v in (lo, hi) or (v & (v - 1)) == 0]


def _ms(s: Stats) -> str:
    return f"{s.median * 1e3:.3g} ms"


class _Line:
    """One axis being searched: its values, and the stats measured so far keyed by value."""

    def __init__(self, vals: list[int], point_of: Callable[[int], Point], get: _Measured) -> None:
        self.vals = vals
        self.point_of = point_of
        self.get = get
        self.stats: dict[int, Stats] = {}

    def measure(self, v: int) -> Stats:
        if v not in self.stats:
            self.stats[v] = self.get(self.point_of(v))
        return self.stats[v]

    def best(self, tie: float) -> int:
        p = pick_best({self.point_of(v): s for v, s in self.stats.items()}, tie)
        return next(v for v in self.stats if self.point_of(v) == p)

    def fastest(self) -> int:
        return min(self.stats, key=lambda v: (self.stats[v].median, v))

    def coarse(self, margin: float, patience: int) -> int | None:
        """Ends and powers of two, ascending; stop after ``patience`` clearly slower, still worsening
        points. Returns the value the direction was stopped at, if it was."""
        coarse = coarse_values(self.vals)
        run = 0
        prev: Stats | None = None
        for i, v in enumerate(coarse):
            s = self.measure(v)
            b = self.fastest()
            if v != b and clearly_worse(s, self.stats[b], margin) and prev is not None and s.median > prev.median:
                run += 1
            else:
                run = 0
            prev = s
            if run >= patience and i < len(coarse) - 1:
                return v
        return None

    def refine(self) -> None:
        """Bisect the unmeasured gaps on both sides of the fastest until its neighbours are measured."""
        while True:
            b = self.fastest()
            measured = sorted(self.stats)
            lo = max((v for v in measured if v < b), default=None)
            hi = min((v for v in measured if v > b), default=None)
            targets = []
            for a, c in ((lo, b), (b, hi)):
                if a is None or c is None:
                    continue
                gap = [v for v in self.vals if a < v < c]
                if gap:
                    mid = (a + c) / 2
                    targets.append(min(gap, key=lambda v: (abs(v - mid), v)))
            if not targets:
                return
            for t in targets:
                self.measure(t)

    def reasons(self, stopped_at: int | None, pairs: bool) -> dict[int, str]:
        """Why each value not measured was left out."""
        f = self.fastest()
        fs = self.stats[f]
        measured = sorted(self.stats)

        def label(v: int) -> str:
            return self.point_of(v).label(pairs)

        skipped: dict[int, str] = {}
        for v in self.vals:
            if v in self.stats:
                continue
            if stopped_at is not None and v > stopped_at:
                skipped[v] = (f"beyond {label(stopped_at)}: the curve was clearly slower than the fastest "
                              f"({label(f)}, {_ms(fs)}) beyond the noise and still getting slower, "
                              f"so that direction was stopped")
                continue
            a = max(u for u in measured if u < v)
            c = min(u for u in measured if u > v)
            skipped[v] = (f"ruled out: between {label(a)} ({_ms(self.stats[a])}) and {label(c)} "
                          f"({_ms(self.stats[c])}), both slower than the fastest ({label(f)}, {_ms(fs)})")
        return skipped


def search_line(values: Iterable[int], point_of: Callable[[int], Point], get: _Measured, *,
                margin: float = DEFAULT_MARGIN, tie: float = DEFAULT_TIE,
                patience: int = DEFAULT_PATIENCE, exhaustive: bool = False,
                pairs: bool = False) -> tuple[int, dict[int, str]]:
    """Search one axis; return the best value and {value: reason} for the values not measured."""
    vals = sorted(set(values))
    if not vals:
        raise ValueError("nothing to search")
    line = _Line(vals, point_of, get)
    if exhaustive or len(vals) <= 2:
        for v in vals:
            line.measure(v)
        return line.best(tie), {}
    stopped_at = line.coarse(margin, patience)
    line.refine()
    return line.best(tie), line.reasons(stopped_at, pairs)


def search_counts(counts: Iterable[int], measure: Callable[[Point], Stats], *,
                  margin: float = DEFAULT_MARGIN, tie: float = DEFAULT_TIE,
                  patience: int = DEFAULT_PATIENCE, exhaustive: bool = False,
                  confirm_close: bool = False) -> SearchResult:
    """Latency search over intra-op counts (one request at a time).

    With ``confirm_close`` the points within the noise of the fastest are measured again (see
    :func:`confirm`)."""
    vals = sorted(set(counts))
    result = SearchResult(candidates=[Point(v) for v in vals])
    get = _Measured(measure, result)
    best, skipped = search_line(vals, Point, get, margin=margin, tie=tie, patience=patience,
                                exhaustive=exhaustive)
    result.best = Point(best)
    result.skipped = {Point(v): r for v, r in skipped.items()}
    if confirm_close:
        confirm(result, measure, margin=margin, tie=tie)
    return result


def pair_candidates(max_product: int, intra: tuple[int, int], inter: tuple[int, int]) -> list[Point]:
    """Every (inter, intra) pair in the ranges whose product fits ``max_product``."""
    return [Point(a, e) for e in range(inter[0], inter[1] + 1) for a in range(intra[0], intra[1] + 1)
            if a * e <= max_product]


def search_pairs(max_product: int, measure: Callable[[Point], Stats], *,
                 intra: tuple[int, int] | None = None, inter: tuple[int, int] | None = None,
                 margin: float = DEFAULT_MARGIN, tie: float = DEFAULT_TIE,
                 patience: int = DEFAULT_PATIENCE, exhaustive: bool = False,
                 confirm_close: bool = False) -> SearchResult:
    """Search inter x intra pairs whose product fits ``max_product``.

    First along the inter-op axis, each inter-op count with as many intra-op threads as fit (the
    pairs that fill the CPUs); then along the intra-op axis at the best inter-op count, in case
    fewer threads per request do better.
    """
    intra = intra or (1, max_product)
    inter = inter or (1, max_product)
    cands = pair_candidates(max_product, intra, inter)
    if not cands:
        raise ValueError("no inter x intra pair fits")
    result = SearchResult(candidates=cands)
    get = _Measured(measure, result)
    if exhaustive:
        return _every_point(result, get, measure, confirm_close=confirm_close, margin=margin, tie=tie)

    def full(e: int) -> Point:
        return Point(min(intra[1], max_product // e), e)

    inter_vals = sorted({p.inter for p in cands})
    best_e, skipped_e = search_line(inter_vals, full, get, margin=margin, tie=tie, patience=patience,
                                    pairs=True)
    intra_vals = sorted(p.intra for p in cands if p.inter == best_e)
    _, skipped_a = search_line(intra_vals, lambda a: Point(a, best_e), get, margin=margin, tie=tie,
                                    patience=patience, pairs=True)
    result.best = pick_best(result.stats, tie)
    reasons = {full(e): r for e, r in skipped_e.items()}
    reasons.update({Point(a, best_e): r for a, r in skipped_a.items()})
    for p in cands:
        if p in result.stats:
            continue
        result.skipped[p] = reasons.get(p) or (
            f"not searched: {p.inter} x {p.intra} leaves CPUs idle; for {p.inter} inter-op the full pair "
            f"{full(p.inter).label(True)} stood for it, and fewer intra-op threads were only tried at "
            f"the best inter-op count ({best_e})")
    if confirm_close:
        confirm(result, measure, margin=margin, tie=tie)
    return result



DEFAULT_ROUNDS = 3  # rounds of the 2-D latency search before it stops, whatever it finds
DEFAULT_CLIMB = 6  # moves to a clearly faster neighbour per round


def grid_bound(n_intra: int, n_inter: int, rounds: int = DEFAULT_ROUNDS, climb: int = DEFAULT_CLIMB) -> int:
    """The most points :func:`search_grid` measures on an ``n_intra`` x ``n_inter`` grid (before the
    confirmation): each round one search along each axis, then up to ``climb`` moves that each
    measure the ten neighbours of the best."""
    return min(n_intra * n_inter, rounds * (n_intra + n_inter + 10 * climb))


def _at_inter(inter: int, intra: int) -> Point:
    return Point(intra, inter)


def _neighbours(p: Point, intra: tuple[int, int], inter: tuple[int, int]) -> list[Point]:
    """The pairs one step away from ``p`` on either axis or both, and the two trades that keep its
    thread count (half the intra-op threads for twice the inter-op ones, and back), inside the ranges."""
    steps = [(a, e) for e in (p.inter - 1, p.inter, p.inter + 1) for a in (p.intra - 1, p.intra, p.intra + 1)]
    steps += [(p.intra // 2, p.inter * 2), (p.intra * 2, p.inter // 2)]
    out: list[Point] = []
    for a, e in steps:
        q = Point(a, e)
        if q != p and q not in out and intra[0] <= a <= intra[1] and inter[0] <= e <= inter[1]:
            out.append(q)
    return out


def _climb(start: Point, intra: tuple[int, int], inter: tuple[int, int], get: _Measured, result: SearchResult,
           margin: float, tie: float, steps: int) -> Point:
    """Measure the neighbours of the best pair and move to the fastest while it is clearly faster
    (beyond the noise), ``steps`` moves at most; return where it stopped."""
    here = start
    for _ in range(steps):
        near = _neighbours(here, intra, inter)
        for n in near:
            get(n)
        lead = pick_best({p: result.stats[p] for p in [here, *near]}, tie)
        if lead == here or not clearly_worse(result.stats[here], result.stats[lead], margin):
            break
        here = lead
    return here


def search_grid(intra: tuple[int, int], inter: tuple[int, int], measure: Callable[[Point], Stats], *,
                margin: float = DEFAULT_MARGIN, tie: float = DEFAULT_TIE, patience: int = DEFAULT_PATIENCE,
                rounds: int = DEFAULT_ROUNDS, climb: int = DEFAULT_CLIMB, exhaustive: bool = False,
                confirm_close: bool = False) -> SearchResult:
    """Latency search over inter-op x intra-op pairs (one request at a time whose work forks inter-op
    tasks): a small adaptive 2-D search, not the full grid.

    Each round searches the intra-op axis at the inter-op count of the best pair so far (the 1-D
    search: ends, powers of two, refine), then the inter-op axis at the intra-op count it found,
    then climbs: it measures the pairs next to the best (one step on either axis or both, and the
    two trades that keep its thread count: half the intra-op threads for twice the inter-op ones,
    and back, which an axis search cannot see) and moves to the fastest while it is clearly faster
    (beyond the noise), ``climb`` moves at most. The search stops when a round ends where the last
    one did or no clearly faster pair than it, or after ``rounds`` rounds; it measures at most
    :func:`grid_bound` points. The winner is :func:`pick_best` over every pair
    measured (the fewest threads among near-equal ones).
    """
    intra_vals = list(range(intra[0], intra[1] + 1))
    inter_vals = list(range(inter[0], inter[1] + 1))
    if not intra_vals or not inter_vals:
        raise ValueError("nothing to search")
    cands = [Point(a, e) for e in inter_vals for a in intra_vals]
    result = SearchResult(candidates=cands)
    get = _Measured(measure, result)
    if exhaustive:
        return _every_point(result, get, measure, confirm_close=confirm_close, margin=margin, tie=tie)
    reasons: dict[Point, str] = {}
    centre: Point | None = None
    done = 0
    while done < rounds:
        done += 1
        e = centre.inter if centre is not None else inter[0]
        a, skipped_a = search_line(intra_vals, functools.partial(_at_inter, e), get, margin=margin, tie=tie,
                                   patience=patience, pairs=True)
        reasons.update({Point(v, e): r for v, r in skipped_a.items()})
        _, skipped_e = search_line(inter_vals, functools.partial(Point, a), get, margin=margin, tie=tie,
                                   patience=patience, pairs=True)
        reasons.update({Point(a, v): r for v, r in skipped_e.items()})
        here = _climb(pick_best(result.stats, tie), intra, inter, get, result, margin, tie, climb)
        if centre is not None and (here == centre or not clearly_worse(result.stats[centre], result.stats[here],
                                                                       margin)):
            break
        centre = here
    result.best = pick_best(result.stats, tie)
    b = result.best
    for p in cands:
        if p not in result.stats:
            result.skipped[p] = reasons.get(p) or (
                f"not searched: the 2-D search settled on {b.label(True)} ({_ms(result.stats[b])}) after "
                f"{done} round(s), no pair next to it faster beyond the noise; {p.label(True)} is further away")
    if confirm_close:
        confirm(result, measure, margin=margin, tie=tie)
    return result
