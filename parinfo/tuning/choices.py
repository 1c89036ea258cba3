"""Which allocator and OpenMP runtime serve a workload best, measured at the tuned counts.

Asked for with ``--allocator default,jemalloc,...`` / ``--openmp default,intel,...``: after the count
search, each choice is measured at the best counts in fresh processes that preload it as ``parinfo
apply`` does (a trial profile's ``allocator:`` / ``openmp:`` key, parinfo.tuning.measure.trial_child).
One key at a time, allocator first; the OpenMP runtimes are then measured with the allocator kept.
Every choice of a key is measured :data:`ROUNDS` times, round by round beside ``default`` (nothing
preloaded, measured in every round), each round in the reverse order of the one before (default,
X, X, default): a slow start or end of a round falls on every choice alike. Only figures of this
measuring compare: never the count sweep's, taken at another time. A choice is kept (written to the
profile) only when it is faster than default beyond the noise both pooled and in every round
against that round's default, and its process had the library mapped; otherwise the default
stays, and :attr:`ChoiceSearch.why` says why.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Any

from parinfo.errors import UsageError
from parinfo.machine.checks import shown
from parinfo.process import preload as pre
from parinfo.records.record import record
from parinfo.tuning.search import DEFAULT_MARGIN, Point, Stats, clearly_worse

#: The profile keys a tune can choose, in the order they are measured, and their options.
KEYS = ("allocator", "openmp")
OPTIONS = {"allocator": "--allocator", "openmp": "--openmp"}
TITLES = {"allocator": "Allocator", "openmp": "OpenMP runtime"}
ROUNDS = 2  # measurements of each choice, pooled
MAX_WORDS = 8

Trial = Callable[[Point, Mapping[str, str]], tuple[Stats, Any]]


def choosable(key: str) -> tuple[str, ...]:
    """The words a tune can measure for ``key`` (``auto`` is a pick without measuring: not one)."""
    words = pre.ALLOCATOR_WORDS if key == "allocator" else pre.OPENMP_WORDS
    return tuple(w for w in words if w != pre.AUTO)


def _missing(key: str, word: str) -> UsageError | None:
    """A UsageError naming what to install when ``word`` of ``key`` is not installed; else None."""
    if word == pre.DEFAULT:
        return None
    if key == "allocator":
        rec = pre.allocator(word)
        found, label, files, install = pre.locate_allocator(rec), rec.label, rec.files, rec.install
    else:
        rt = pre.openmp_runtime(word)
        found, label, files, install = pre.locate_runtime(rt), rt.label, rt.files, rt.install
    if found.path is not None:
        return None
    others = "".join(f"; {path} is {what}" for path, what in found.rejected)
    return UsageError(f"{OPTIONS[key]} {word}: {label} is not installed (no {' or '.join(files)} in the Python "
                      f"environment or the system's library paths{others}); install it: {install}")


def check(key: str, given: str | Sequence[str]) -> tuple[str, ...]:
    """``given`` (comma-separated words, or a sequence of them) checked: known words, installed,
    ``default`` first (added when missing: the baseline every choice must beat). UsageError otherwise."""
    opt = OPTIONS[key]
    raw = given.split(",") if isinstance(given, str) else [p for g in given for p in str(g).split(",")]
    words = [w.strip() for w in raw]
    allowed = choosable(key)
    if not any(words) or "" in words:
        raise UsageError(f"{opt} {shown(','.join(raw))!r}: give comma-separated choices, e.g. "
                         f"{opt} {','.join(allowed[:2])}")
    if len(words) > MAX_WORDS:
        raise UsageError(f"{opt}: {len(words)} choices; give at most {len(allowed)}: {', '.join(allowed)}")
    for w in words:
        if w == pre.AUTO:
            raise UsageError(f"{opt} auto: name the choices to measure ({', '.join(allowed)}); auto is what "
                             f"apply picks without measuring")
        if w not in allowed:
            raise UsageError(f"{opt} {shown(w)!r}: not a choice; use {', '.join(allowed)}")
    out = tuple(dict.fromkeys([pre.DEFAULT, *words]))
    if len(out) == 1:
        raise UsageError(f"{opt} default: nothing to compare it with; name another choice too "
                         f"({', '.join(w for w in allowed if w != pre.DEFAULT)})")
    for w in out:
        missing = _missing(key, w)
        if missing is not None:
            raise missing
    return out


@record
class ChoiceSearch:
    """One key's choices measured at ``point`` with ``fixed`` (the keys chosen before) preloaded too:
    the pooled timings, what each process reported in force, the ``fastest``, the choice ``kept``
    (``default`` unless one beat it beyond the noise) and ``why``."""

    key: str
    point: Point
    fixed: dict[str, str]
    stats: dict[str, Stats] = field(default_factory=dict)
    in_force: dict[str, object] = field(default_factory=dict)  # each choice's trial: what it said in force
    fastest: str = pre.DEFAULT
    kept: str = pre.DEFAULT
    why: str = ""
    rounds: list[dict[str, Stats]] = field(default_factory=list)  # each round's figures, by choice

    @property
    def written(self) -> bool:
        return self.kept != pre.DEFAULT

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """A tune's JSON of this search: the point and the choices' trials, each with its figures."""
        return {"key": self.key, "intra_op": self.point.intra, "inter_op": self.point.inter,
                "with": dict(self.fixed), "fastest": self.fastest, "kept": self.kept, "written": self.written,
                "why": self.why,
                "trials": [{"choice": w, **data["stats"][w], "in_force": data["in_force"].get(w)}
                           for w in self.stats]}


def not_mapped(seen: Any) -> list[str]:
    """The preloaded files a trial's process reported as not mapped."""
    mapped = seen.get("preloaded") if isinstance(seen, dict) else None
    return [path for path, ok in mapped.items() if ok is False] if isinstance(mapped, dict) else []


def measure(key: str, words: Sequence[str], point: Point, fixed: Mapping[str, str], trial: Trial, *,
            margin: float = DEFAULT_MARGIN, rounds: int = ROUNDS,
            progress: Callable[[str], None] | None = None) -> ChoiceSearch:
    """Measure each of ``words`` for ``key`` at ``point`` (``rounds`` times, round by round, every
    other round in reverse order, samples pooled) and decide which is kept."""
    out = ChoiceSearch(key, point, dict(fixed))
    for r in range(rounds):
        figures: dict[str, Stats] = {}
        for w in (words if r % 2 == 0 else tuple(reversed(words))):
            if progress:
                progress(f"{key} {w}")
            figures[w], out.in_force[w] = trial(point, {**fixed, key: w})
            old = out.stats.get(w)
            out.stats[w] = figures[w] if old is None else Stats(old.samples + figures[w].samples, old.number)
        out.rounds.append(figures)
    _decide(out, margin)
    return out


def _decide(out: ChoiceSearch, margin: float) -> None:
    """Set ``out``'s fastest, kept and why from its own rounds' figures alone."""
    key, base = out.key, out.stats[pre.DEFAULT]
    out.fastest = min(out.stats, key=lambda w: (out.stats[w].median, w != pre.DEFAULT))
    best = out.stats[out.fastest]
    gain = 1.0 - best.median / base.median if base.median > 0 else 0.0
    noise = max(margin, base.spread, best.spread)
    lost = [n for n, r in enumerate(out.rounds, 1) if not clearly_worse(r[pre.DEFAULT], r[out.fastest], margin)]
    if out.fastest == pre.DEFAULT:
        out.why = f"default (nothing preloaded) was fastest; no {key} key written"
    elif not_mapped(out.in_force[out.fastest]):
        missing = " ".join(not_mapped(out.in_force[out.fastest]))
        out.why = (f"{out.fastest} was fastest but its process did not have {missing} mapped, so it did not "
                   f"measure {out.fastest}; no {key} key written")
    elif clearly_worse(base, best, margin) and not lost:
        out.kept = out.fastest
        out.why = (f"{out.fastest} was {gain:.0%} faster than default, beyond the noise ({noise:.0%}), in each of "
                   f"{len(out.rounds)} rounds against that round's default; written as {key}: {out.fastest}")
    elif clearly_worse(base, best, margin):
        each = "; ".join(f"round {n}: default {r[pre.DEFAULT].median * 1e3:.4g} ms, {out.fastest} "
                         f"{r[out.fastest].median * 1e3:.4g} ms" for n, r in enumerate(out.rounds, 1))
        out.why = (f"{out.fastest} was {gain:.1%} faster than default pooled, but not beyond the noise in round "
                   f"{', '.join(map(str, lost))} ({each}): the rounds disagree; the default stays: no {key} key "
                   f"written")
    else:
        out.why = (f"{out.fastest} was {gain:.1%} faster than default, within the noise ({noise:.0%}); "
                   f"the default stays: no {key} key written")
