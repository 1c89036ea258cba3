"""A finding (one thing wrong, or worth knowing, with why and the fix), its severities and their order.

Every rule module builds :class:`Finding` objects; :func:`parinfo.diagnostics.process_rules.diagnose` runs
them all and orders the result with :func:`sort_findings`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from parinfo.payload import section, text
from parinfo.record import record

SEVERITIES = ("info", "warning", "error")


@record(frozen=True)
class Finding:
    """One thing wrong (or worth knowing) about the process's parallelism."""

    id: str
    severity: str
    message: str
    why: str
    fix: str

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding | None:
        """The finding of :meth:`to_dict`; None when a part is missing or the severity is not one of
        :data:`SEVERITIES` (a report from elsewhere keeps the findings it can say in full)."""
        d = section(data)
        parts = [text(d.get(key)) for key in ("id", "severity", "message", "why", "fix")]
        if any(part is None for part in parts) or parts[1] not in SEVERITIES:
            return None
        fid, severity, message, why, fix = (str(part) for part in parts)
        return cls(fid, severity, message, why, fix)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def at_least(findings: list[Finding], severity: str) -> list[Finding]:
    """The findings at ``severity`` or above."""
    floor = SEVERITIES.index(severity)
    return [f for f in findings if SEVERITIES.index(f.severity) >= floor]


def sort_findings(found: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then infos (the order of every report); a stable sort, so the
    findings of one severity keep the order of the rules that made them."""
    return sorted(found, key=lambda f: -SEVERITIES.index(f.severity))
