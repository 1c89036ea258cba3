"""A tune's result written out: the JSON form (``--json``) and the profile (``--write``).

The plots (terminal bars, SVG/PNG) are in parinfo.tuning.plot.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from parinfo.checks import shown
from parinfo.convert import dump
from parinfo.errors import UsageError
from parinfo.safe_text import plural
from parinfo.tuning.choices import TITLES

if TYPE_CHECKING:  # pragma: no cover
    from parinfo.tuning.outcome import TuneOutcome
    from parinfo.tuning.search import Point

HOW = {"subprocess": "each point in a fresh process",
       "in-process": "in one process through the runtime and threadpoolctl",
       "command": "the command timed as a whole process"}


def _point(r: TuneOutcome, p: Point) -> dict[str, Any]:
    return {"intra_op": p.intra, "inter_op": p.inter, "label": r.label(p)}


def to_json(r: TuneOutcome) -> dict[str, Any]:
    """Plain, JSON-serialisable form (what ``parinfo tune --json`` prints)."""
    points = []
    for p, s in r.measured:
        points.append({**_point(r, p), **dump(s), "per_second": 1.0 / s.median if s.median > 0 else None,
                       "order": r.search.order.index(p) + 1, "noisy": r.is_noisy(s),
                       "confirmed": p in r.search.confirmed, "in_force": r.in_force.get(p)})
    return {
        "workload": r.workload,
        "spec": dump(r.spec),
        "objective": r.objective,
        "mode": r.mode,
        "axis": r.axis,
        "unit": r.unit,
        "machine": dump(r.machine),
        "settings": {"warmup": r.settings.warmup, "repeats": r.settings.repeats,
                     "min_time_s": r.settings.min_time},
        "candidates": len(r.search.candidates),
        "points": points,
        "best": {**_point(r, r.best), **dump(r.best_stats)},
        "counts": r.counts(),
        "skipped": [{**_point(r, p), "reason": why} for p, why in r.skipped],
        "noise": list(r.noise),
        "notes": list(r.notes),
        "choices": [dump(cs) for cs in r.choices],
        "started": r.started,
        "total_time_s": r.total_time_s,
    }


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

    if name is not None:
        check_name(name)

    body: dict[str, Any] = {"version": 1, "name": name or f"tuned-{r.spec.kind}",
                            "description": _description(r), **r.counts(), **r.preloads()}
    if r.spec.framework == "torch":
        body["libraries"] = {"torch": r.best.intra}
    # a command's argument may hold a line break: keep every comment on one line
    comments = "".join(ln.replace("\r", "\\r").replace("\n", "\\n") + "\n" for ln in _comments(r))
    return comments + yaml.safe_dump(body, sort_keys=False, width=1000)


def write_profile(r: TuneOutcome, path: str | os.PathLike[str], name: str | None = None) -> None:
    """Write :func:`profile_yaml` to ``path``; UsageError when the file cannot be written."""
    text = profile_yaml(r, name)
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise UsageError(f"--write {shown(os.fspath(path))}: cannot write ({exc.strerror or exc})") from None
