"""A finding (one thing wrong, or worth knowing, with why and the fix), its severities and their order.

Every rule module builds :class:`Finding` objects; :func:`parinfo.diagnostics.process_rules.diagnose` runs
them all and orders the result with :func:`sort_findings`.
"""
from __future__ import annotations

from dataclasses import field
from enum import Enum
from typing import Annotated

from parinfo.records.convert import REQUIRED, matching
from parinfo.records.record import record


class Severity(str, Enum):
    """How much a finding matters, declared least first: that order ranks findings in every report
    and is what ``--check=LEVEL`` compares (``<`` and ``>=`` follow it, never the alphabet). A member
    is its name as a str (``Severity.WARNING == "warning"``), so JSON, text and metric labels carry
    the same words as before."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value  # "warning", not "Severity.WARNING", in str() and f-strings

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def rank(self) -> int:
        """0 for info, rising with how much it matters."""
        return _RANK[self]

    @classmethod
    def parse(cls, value: object) -> Severity | None:
        """The severity named ``value`` ("warning"), or None when it names none."""
        try:
            return cls(value)
        except ValueError:
            return None

    def _rank_of(self, other: str) -> int:
        known = Severity.parse(other)
        if known is None:
            raise TypeError(f"a severity compares only with a severity, not {other!r}")
        return known.rank

    def __lt__(self, other: str) -> bool:
        return self.rank < self._rank_of(other)

    def __le__(self, other: str) -> bool:
        return self.rank <= self._rank_of(other)

    def __gt__(self, other: str) -> bool:
        return self.rank > self._rank_of(other)

    def __ge__(self, other: str) -> bool:
        return self.rank >= self._rank_of(other)


_RANK = {s: i for i, s in enumerate(Severity)}
#: Every severity, worst first, as reports group findings for people.
WORST_FIRST = tuple(sorted(Severity, reverse=True))


@record(frozen=True)
class Finding:
    """One thing wrong (or worth knowing) about the process's parallelism."""

    id: Annotated[str, matching("^[a-z0-9-]+$")] = field(metadata=REQUIRED)  # a report from elsewhere keeps
    # the findings it can say in full
    severity: Severity = field(metadata=REQUIRED)
    message: str = field(metadata=REQUIRED)
    why: str = field(metadata=REQUIRED)
    fix: str = field(metadata=REQUIRED)


def at_least(findings: list[Finding], severity: Severity | str) -> list[Finding]:
    """The findings at ``severity`` or above."""
    floor = Severity(severity)
    return [f for f in findings if f.severity >= floor]


def sort_findings(found: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then infos (the order of every report); a stable sort, so the
    findings of one severity keep the order of the rules that made them."""
    return sorted(found, key=lambda f: -f.severity.rank)
