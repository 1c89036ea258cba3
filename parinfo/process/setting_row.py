"""The rows of a report's ``settings`` section (:class:`SettingRow`: one count in force and the
source that decided it, with :class:`Refused` for a request a library refused) and what
``parinfo.apply`` set in this process (:class:`SetByApply`). :mod:`parinfo.process.provenance`
makes them.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Annotated, Any

from parinfo.records.convert import REQUIRED, at_most
from parinfo.records.record import record
from parinfo.records.source import Source


@record
class Refused:
    """A count a library refused because it is above its cap (numexpr above NUMEXPR_MAX_THREADS):
    the variable, the count asked, the cap and why, and the count the library runs instead."""

    variable: str = field(metadata=REQUIRED)
    asked: int = field(metadata=REQUIRED)
    cap: int = field(metadata=REQUIRED)
    why: str = field(metadata=REQUIRED)
    runs: int = field(metadata=REQUIRED)


@record
class SettingRow:
    """One count in force and the source that decided it: a row of the report's ``settings`` section.

    - ``library``: the pool's library (openblas, libgomp, mkl, tbb...), "torch intra-op",
      "torch inter-op", a Python-module library's name (numexpr...), or one of parinfo's own pools
      ("parinfo intra-op", "parinfo inter-op").
    - ``count``: the count in force (int), or None when it cannot be read.
    - ``source``: the :class:`~parinfo.records.source.Source` that decided it; its kind is a variable, a
      library default, a run-time call, a framework (torch on its libgomp), a profile, unknown...;
      its words: "env MKL_NUM_THREADS=1", "env OMP_NUM_THREADS=8, capped at 2 CPUs in affinity",
      "default: 2 CPUs in affinity", "set at run time (API call)", "unknown (...)".
    - ``precedence``: the variables this library reads, first wins (for parinfo's pools: every
      source in order, "explicit call" first).
    - ``own``: one of parinfo's own pools, whose runtime records the source itself: their rows
      carry only library, count, source, precedence and ``capped_to``.
    - ``variable``: the variable that decided it, or None.
    - ``expected_from_env``: the count the environment (and default) predicts, or None.
    - ``cap_vars``: the variables that steer its cap on a request (MKL_DYNAMIC, NUMEXPR_MAX_THREADS).
    - ``note``: extra remarks (a variable changed after launch and ignored...), or None.
    - ``asked_now``: the count the environment of now (and the default) asks for, or None.
    - ``ignored_changes``: the variables changed after launch that this library loaded before: its
      count is still the launch environment's and differs from ``asked_now`` ([] otherwise). The
      ``variable-after-load`` finding is made of these rows only, so it and this row always agree.
    - ``refused``: a request above the library's cap that it refused rather than cut (numexpr keeps
      1 thread), or None. The ``count-refused`` finding.
    - ``owner`` / ``filepath``: which copy (from the pool row), so duplicates can be told apart.
    - ``capped_to``: parinfo's pools only: the pool ceiling, when the count is above it (what runs).
    """

    library: str = field(metadata={"missing": "unknown"})
    count: int | None = None
    source: Source | None = None
    precedence: list[str] = field(default_factory=list)
    own: bool = False
    variable: str | None = None
    expected_from_env: int | None = None
    cap_vars: list[str] = field(default_factory=list)
    note: str | None = None
    asked_now: int | None = None
    ignored_changes: list[str] = field(default_factory=list)
    refused: Refused | None = None
    owner: str | None = None
    filepath: str | None = None
    capped_to: int | None = None

    #: Keys only a version 1 report has, each with why it went: a strict reading names it (a test's
    #: row that still sets it tests nothing); a lenient one lets it go.
    _json_gone = (("kind", "a version 1 key, never read: the row's source.kind says it"),)

    #: The keys both of its JSON shapes hold (a row of parinfo's own pools carries no more).
    _json_always = ("library", "count", "source", "precedence")

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The row's JSON: a row of parinfo's own pools carries only what its runtime records."""
        out = {k: data[k] for k in (_OWN_KEYS if self.own else _ROW_KEYS)}
        if self.capped_to is not None:
            out["capped_to"] = self.capped_to
        return out


_OWN_KEYS = ("library", "count", "source", "own", "precedence")
_ROW_KEYS = ("library", "count", "source", "variable", "expected_from_env", "precedence", "cap_vars", "note",
             "asked_now", "ignored_changes", "refused", "owner", "filepath")


@record(frozen=True)
class SetByApply:
    """A variable ``parinfo.apply`` set in this process: the ``value`` it set, the ``profile``, and
    what was ``loaded`` at that moment (library files and Python modules): a library loaded later read
    this value when it loaded, one loaded before did not."""

    value: Annotated[str, at_most(1 << 12)] = field(metadata=REQUIRED)
    profile: Annotated[str, at_most(400)] = field(metadata=REQUIRED)
    loaded: Annotated[frozenset[Annotated[str, at_most(1 << 12)]], at_most(1 << 12)] = field(
        default=frozenset(), metadata=REQUIRED)
