"""``parinfo.tune()``: measure a workload's thread-count curve and say which counts win.

Each point runs with its counts really in force: by default in a fresh process started with the
thread variables set (libraries read them at load), or in this process through the runtime and
threadpoolctl (``in_process=True``), or, for a command, as a whole launched process. The search
(parinfo.tuning.search) measures the ends and powers of two, then refines around the best (for a
latency tune of work that forks, along both axes and around the best pair), and says which points it
ruled out and why. The options are checked in parinfo.tuning.options, the points
measured by parinfo.tuning.measure, and the result (parinfo.tuning.result) written by its writers.
"""
from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from parinfo.tuning import choices, search
from parinfo.tuning.choices import ChoiceSearch
from parinfo.tuning.measure import MEASURERS, Measurer, WorkloadFailed, noise_check
from parinfo.tuning.options import OBJECTIVES, Plan, TuneOptions, resolve
from parinfo.tuning.outcome import NOISY_SPREAD, MachineSummary
from parinfo.tuning.result import TuneResult
from parinfo.tuning.search import Point, SearchResult, Stats

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

__all__ = ["NOISY_SPREAD", "OBJECTIVES", "TuneOptions", "TuneResult", "WorkloadFailed", "run", "tune"]

class ProgressInfo(TypedDict, total=False):
    """What a tune tells its ``progress`` callback with each event: ``start`` (``candidates``,
    ``workload``), ``measuring`` or ``confirming`` and ``measured`` (``point``, ``label``, and
    ``stats`` once measured), ``done`` (nothing)."""

    candidates: int
    workload: str
    point: Point
    label: str
    stats: Stats


Progress = Callable[[str, ProgressInfo], None]


def tune(workload: str | None = None, *, objective: str = "latency", framework: str = "numpy",
         size: int = 1024, stmt: str | None = None, setup: str | None = None, module: str | None = None,
         command: Sequence[str] | None = None, min_threads: int = 1, max_threads: int | None = None,
         min_inter: int = 1, max_inter: int | None = None, repeats: int = 5, warmup: int = 1,
         min_time: float = 0.05, timeout: float = 600.0, in_process: bool = False,
         exhaustive: bool = False, confirm: bool = True, margin: float = search.DEFAULT_MARGIN,
         check_noise: bool = True, allocator: str | Sequence[str] | None = None,
         openmp: str | Sequence[str] | None = None,
         progress: Progress | None = None, facts: MachineFacts | None = None) -> TuneResult:
    """Measure the workload at several thread counts and return the curve and the winner.

    ``workload`` is a built-in (:data:`parinfo.tuning.workloads.BUILTIN`) unless ``stmt`` (with ``setup``),
    ``module`` ("pkg.mod:func") or ``command`` (argv) is given. With ``confirm`` the points within
    the noise of the fastest are measured once more and their samples pooled before the pick.
    ``objective`` latency sweeps intra-op counts ``min_threads..max_threads`` (default: the usable
    CPUs; more only if asked), and with them inter-op counts ``min_inter..max_inter`` (a 2-D search,
    :func:`parinfo.tuning.search.search_grid`) when ``max_inter`` is given or the work may fork
    inter-op tasks (the ensemble, user code with torch); throughput sweeps inter x intra pairs whose
    product fits ``max_threads`` (default usable CPUs), with ``inter`` concurrent requests. Raises
    UsageError/TuneError for bad input and WorkloadFailed when the workload itself fails.
    ``allocator`` / ``openmp`` ("default,jemalloc" or a list of words) measure those preloaded
    libraries at the best counts (:mod:`parinfo.tuning.choices`); the result keeps a choice only when
    it beats ``default`` beyond the noise.
    """
    options = TuneOptions(workload=workload, objective=objective, framework=framework, size=size, stmt=stmt,
                          setup=setup, module=module, command=command, min_threads=min_threads,
                          max_threads=max_threads, min_inter=min_inter, max_inter=max_inter,
                          repeats=repeats, warmup=warmup, min_time=min_time, timeout=timeout,
                          in_process=in_process, exhaustive=exhaustive, confirm=confirm, margin=margin,
                          check_noise=check_noise, allocator=allocator, openmp=openmp)
    return run(options, progress=progress, facts=facts)


def run(options: TuneOptions, *, progress: Progress | None = None, facts: MachineFacts | None = None) -> TuneResult:
    """:func:`tune` with its arguments as one :class:`TuneOptions`."""
    t_start = time.perf_counter()
    if facts is None:
        from parinfo.machine.topology import machine_facts

        facts = machine_facts()
    plan = resolve(options, facts)
    measurer = MEASURERS[plan.mode](plan.workload, plan.settings, plan.concurrent, facts)
    noise = noise_check(plan.usable_cpus) if options.check_noise else []
    started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if progress:
        progress("start", {"candidates": plan.candidate_count(), "workload": plan.workload.describe()})
    try:
        result = _search(plan, _reporting(measurer, plan.pairs, progress))
        picked = _choose(plan, result, measurer, progress)
    finally:
        measurer.restore()
    if progress:
        progress("done", {})
    noise += _noise_notes(result, plan)
    notes = [n for p in sorted(result.stats) for n in _not_in_force(p, measurer.in_force.get(p), plan)]
    notes += [n for cs in picked for w, seen in cs.in_force.items()
              for n in _not_in_force(cs.point, seen, plan, f"{cs.key} {w}")]
    return TuneResult(spec=plan.workload, workload=plan.workload.describe(), objective=options.objective,
                      mode=plan.mode, pairs=plan.pairs, concurrent=plan.concurrent,
                      machine=MachineSummary.of(facts), search=result, settings=plan.settings,
                      in_force=dict(measurer.in_force), noise=noise, notes=list(dict.fromkeys(notes)),
                      choices=picked, started=started,
                      total_time_s=time.perf_counter() - t_start)


def _reporting(measurer: Measurer, pairs: bool, progress: Progress | None) -> Callable[[Point], Stats]:
    """``measurer`` wrapped to tell ``progress`` what it measures (and what it measures again)."""
    seen: set[Point] = set()

    def measure(p: Point) -> Stats:
        again = p in seen
        seen.add(p)
        if progress:
            progress("confirming" if again else "measuring", {"point": p, "label": p.label(pairs)})
        s = measurer(p)
        if progress and not again:
            progress("measured", {"point": p, "label": p.label(pairs), "stats": s})
        return s

    return measure


def _search(plan: Plan, measure: Callable[[Point], Stats]) -> SearchResult:
    o = plan.options
    if plan.pairs and plan.concurrent:
        return search.search_pairs(plan.max_product, measure, intra=plan.intra, inter=plan.inter,
                                   margin=o.margin, exhaustive=o.exhaustive, confirm_close=o.confirm)
    if plan.pairs:
        return search.search_grid(plan.intra, plan.inter, measure, margin=o.margin, exhaustive=o.exhaustive,
                                  confirm_close=o.confirm)
    return search.search_counts(range(plan.intra[0], plan.intra[1] + 1), measure, margin=o.margin,
                                exhaustive=o.exhaustive, confirm_close=o.confirm)


def _choose(plan: Plan, result: SearchResult, measurer: Measurer, progress: Progress | None) -> list[ChoiceSearch]:
    """Measure the allocator and OpenMP runtime choices asked for at the best counts, one key at a time."""
    out: list[ChoiceSearch] = []
    fixed: dict[str, str] = {}
    best = result.best
    assert best is not None
    say = (lambda label: progress("measuring", {"point": best, "label": label})) if progress else None
    for key, words in plan.choices:
        cs = choices.measure(key, words, best, fixed, measurer.trial, margin=plan.options.margin,
                             progress=say)
        out.append(cs)
        fixed[key] = cs.kept
    return out


def _noise_notes(result: SearchResult, plan: Plan) -> list[str]:
    """Noisy points, and the points too close to the best to tell apart."""
    pairs = plan.pairs
    notes = [f"{p.label(pairs)}: spread {s.spread:.0%} of the median (noisy: raise --repeats "
             f"or --min-time, or quiet the machine)"
             for p, s in sorted(result.stats.items()) if s.spread > NOISY_SPREAD]
    b = result.best
    assert b is not None
    rivals = [p for p, s in result.stats.items()
              if p != b and not search.clearly_worse(s, result.stats[b], plan.options.margin)]
    if rivals:
        notes.append(f"within the noise of the best ({b.label(pairs)}): "
                     + ", ".join(p.label(pairs) for p in sorted(rivals)))
    return notes


def _not_in_force(p: Point, seen: Any, plan: Plan, what: str = "") -> list[str]:
    """Say where a library ran other counts than the point asked for (the inter-op count too when the
    point's inter-op is the workload's pool), where a preloaded library was not mapped, and where
    nothing could be read back. ``what`` names a choice trial."""
    if not isinstance(seen, dict):
        return []
    inter = plan.pairs and not plan.concurrent
    at = p.label(plan.pairs) + (f" with {what}" if what else "")
    out = []
    for lib, counts in seen.items():
        if lib in ("env", "preloaded", "verified"):
            continue
        wanted = [("intra_op", p.intra)] + ([("inter_op", p.inter)] if inter else [])
        for key, want in wanted:
            got = counts.get(key) if isinstance(counts, dict) else (counts if key == "intra_op" else None)
            values = got if isinstance(got, list) else [got]
            wrong = sorted({c for c in values if isinstance(c, int) and not isinstance(c, bool) and c != want})
            if wrong:
                pool = "" if key == "intra_op" else " inter-op"
                out.append(f"{at}: {lib} ran {', '.join(map(str, wrong))}{pool} threads, not {want} "
                           f"(the library capped or ignored the count; this point measured that)")
    for path in choices.not_mapped(seen):
        out.append(f"{at}: not in force: {path} was preloaded but not mapped in the process")
    if isinstance(seen.get("verified"), str):
        out.append(f"counts and preloads of the command not verified: {seen['verified']}")
    return out
