"""A tune's result written out: the JSON form (``--json``, :class:`TuneJson`) and the profile (``--write``).

The plots (terminal bars, SVG/PNG) are in parinfo.tuning.plot.
"""
from __future__ import annotations

import os
from dataclasses import field
from typing import TYPE_CHECKING, Any

import parinfo.safe_file as safe_file
from parinfo.errors import UsageError
from parinfo.machine.checks import shown
from parinfo.records.convert import FLATTEN
from parinfo.records.record import record
from parinfo.safe_text import plural
from parinfo.tuning.choices import TITLES

if TYPE_CHECKING:  # pragma: no cover
    from parinfo.tuning.choices import ChoiceSearch
    from parinfo.tuning.measure import Settings
    from parinfo.tuning.outcome import MachineSummary, TuneOutcome
    from parinfo.tuning.search import Point, Stats
    from parinfo.tuning.workloads import Workload

HOW = {"subprocess": "each point in a fresh process",
       "in-process": "in one process through the runtime and threadpoolctl",
       "command": "the command timed as a whole process"}


@record(frozen=True)
class PointAt:
    """A point as a tune's JSON names it: its counts and its label."""

    intra_op: int
    inter_op: int
    label: str

    @classmethod
    def of(cls, r: TuneOutcome, p: Point) -> PointAt:
        return cls(p.intra, p.inter, r.label(p))


@record(frozen=True)
class MeasuredRow:
    """A measured point: its figures (:class:`Stats`' JSON), calls per second, when it was measured
    (1: first), whether its spread calls it noisy, whether it was measured again, and what its
    process reported in force."""

    at: PointAt = field(metadata=FLATTEN)
    stats: Stats = field(metadata=FLATTEN)
    per_second: float | None = None
    order: int = 0
    noisy: bool = False
    confirmed: bool = False
    in_force: Any = None


@record(frozen=True)
class BestRow:
    """The winning point with its figures."""

    at: PointAt = field(metadata=FLATTEN)
    stats: Stats = field(metadata=FLATTEN)


@record(frozen=True)
class SkippedRow:
    """A candidate not measured, and why."""

    at: PointAt = field(metadata=FLATTEN)
    reason: str


@record(frozen=True)
class TuneJson:
    """What ``parinfo tune --json`` prints, key by key in this order (through :func:`parinfo.records.convert.dump`)."""

    workload: str
    spec: Workload
    objective: str
    mode: str
    axis: str
    unit: str
    machine: MachineSummary
    settings: Settings
    candidates: int
    points: list[MeasuredRow]
    best: BestRow
    counts: dict[str, int]
    skipped: list[SkippedRow]
    noise: list[str]
    notes: list[str]
    choices: list[ChoiceSearch]
    started: str
    total_time_s: float

    @classmethod
    def of(cls, r: TuneOutcome) -> TuneJson:
        """The JSON form of a tune's outcome."""
        order, confirmed = r.search.order, r.search.confirmed
        points = [MeasuredRow(PointAt.of(r, p), s, 1.0 / s.median if s.median > 0 else None, order.index(p) + 1,
                              r.is_noisy(s), p in confirmed, r.in_force.get(p)) for p, s in r.measured]
        return cls(workload=r.workload, spec=r.spec, objective=r.objective, mode=r.mode, axis=r.axis, unit=r.unit,
                   machine=r.machine, settings=r.settings, candidates=len(r.search.candidates), points=points,
                   best=BestRow(PointAt.of(r, r.best), r.best_stats), counts=r.counts(),
                   skipped=[SkippedRow(PointAt.of(r, p), why) for p, why in r.skipped], noise=list(r.noise),
                   notes=list(r.notes), choices=list(r.choices), started=r.started, total_time_s=r.total_time_s)


def _comments(r: TuneOutcome) -> list[str]:
    m = r.machine
    obj = ("latency: fastest single call" if r.objective == "latency"
           else "throughput: most requests per second with concurrent requests")
    lines = [
        f"# Written by `parinfo tune` on {r.started}.",
        f"# Workload: {r.workload}",
        f"# Objective: {obj}; {HOW[r.mode]}; axis: {r.axis}",
        (f"# Machine: {m.cpu_model}; {m.usable_cpus} usable CPUs "
         f"({m.usable_physical_cores} physical cores), affinity {m.affinity}"),
        (f"# Timing: {r.settings.warmup} warm-up, median of {r.settings.repeats} repeats; "
         f"total {r.total_time_s:.1f} s"),
        f"# Measured ({r.unit}, median and relative spread):",
    ]
    for p, s in r.measured:
        mark = "  <- chosen" if p == r.best else ""
        lines.append(f"#   {r.label(p):>7}: {s.median * 1e3:.4g} ms ({s.spread:.0%}){mark}")
    lines.append(f"# Skipped: {r.skipped_summary()}")
    for cs in r.choices:
        with_ = "".join(f", {k} {v}" for k, v in cs.fixed.items())
        lines.append(f"# {TITLES[cs.key]} at {r.label(cs.point)}{with_} ({r.unit}, median and relative spread, "
                     f"{len(next(iter(cs.stats.values())).samples)} samples each):")
        lines += [f"#   {w:>9}: {s.median * 1e3:.4g} ms ({s.spread:.0%})" for w, s in cs.stats.items()]
        lines.append(f"#   {cs.why}")
    lines += [f"# Noise: {note}" for note in r.noise]
    lines += [f"# Note: {note}" for note in r.notes]
    if not r.pairs:
        lines.append("# inter_op 1: requests come one at a time, so a second inter-op thread has "
                     "nothing to run (not measured).")
    elif not r.concurrent:
        lines.append("# inter_op and intra_op searched together (2-D search): one request at a time whose "
                     "work runs inter-op tasks.")
    return lines


def _description(r: TuneOutcome) -> str:
    b, bs = r.best, r.best_stats
    what = (f"{b.inter} {'requests' if r.concurrent else 'inter-op'} x {b.intra} intra-op" if r.pairs
            else f"{plural(b.intra, 'intra-op thread')}")
    return (f"Tuned by parinfo tune ({r.objective}) for {r.workload}: {what}, "
            f"{bs.median * 1e3:.4g} ms {r.unit.split(' ', 1)[1]}")


def check_name(name: str) -> str:
    """``name`` when a profile may carry it (the profile language's own rule, so ``apply`` reads the
    written file); UsageError naming ``--name`` otherwise. Checked before any measuring."""
    from parinfo.errors import ProfileError
    from parinfo.profiles.loading import validate_profile

    try:
        validate_profile({"version": 1, "name": name, "intra_op": 1}, "--name")
    except ProfileError as exc:
        raise UsageError(f"--name {shown(name, 40)!r}: {exc.message}" + (f" ({exc.fix})" if exc.fix else "")) from None
    return name


def profile_yaml(r: TuneOutcome, name: str | None = None) -> str:
    """A profile (``version: 1``) with the winning counts, and comments recording how they were found."""
    import yaml

    from parinfo.tuning.workloads import TORCH

    if name is not None:
        check_name(name)

    body: dict[str, object] = {"version": 1, "name": name or f"tuned-{r.spec.kind}",
                               "description": _description(r), **r.counts(), **r.preloads()}
    if r.spec.framework == TORCH:
        body["libraries"] = {"torch": r.best.intra}
    # a command's argument may hold a line break: keep every comment on one line
    comments = "".join(ln.replace("\r", "\\r").replace("\n", "\\n") + "\n" for ln in _comments(r))
    return comments + yaml.safe_dump(body, sort_keys=False, width=1000)


def write_profile(r: TuneOutcome, path: str | os.PathLike[str], name: str | None = None) -> None:
    """Write :func:`profile_yaml` to ``path``; UsageError when the file cannot be written."""
    text = profile_yaml(r, name)
    try:
        with os.fdopen(safe_file.create_at(os.fspath(path)), "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise UsageError(f"--write {shown(os.fspath(path))}: cannot write ({exc.strerror or exc})") from None
