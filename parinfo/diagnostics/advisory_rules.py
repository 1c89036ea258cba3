"""The rule over the advisories table (:mod:`parinfo.process.advisories`): a loaded copy of a
library in a known-bad version range, at warning level when the evidence shows its trigger (threads
of a thread pool that can call it, two or more Python threads on a free-threaded build with the GIL
off, its own pool wide enough), else at info level (other Python threads leave it unknown), with
the upgrade that fixes it. :data:`parinfo.diagnostics.process_rules.RULES` lists it with every other
rule; ``parinfo host`` asks :func:`host_findings` for the processes it reads from outside.
"""
from __future__ import annotations

from collections.abc import Iterable

from parinfo.diagnostics.findings import Finding, Severity
from parinfo.diagnostics.model import Report
from parinfo.process import libraries as reg
from parinfo.process.advisories import ADVISORIES, Advisory, Trigger
from parinfo.process.pools import NO_OWNER
from parinfo.records.record import record
from parinfo.safe_text import plural

#: Whether two or more Python threads can call a pool at once (None: unknown), and the evidence in words.
Callers = tuple[bool | None, str]
UNREAD = "the Python threads of the process could not be read"


@record(frozen=True)
class Copy:
    """One loaded copy of a library as the rule reads it: a report's pool row, or a host's pool."""

    library: str
    version: str | None
    owner: str
    filepath: str | None
    layer: str | None
    count: int | None


def _callers(r: Report) -> Callers:
    teams, py = r.teams, r.backend.python
    workers = None if teams is None else len(teams.workers)
    threads = None if py is None else py.python_threads
    if workers is None and threads is None:
        return None, UNREAD
    parts = []
    if threads is not None:
        parts.append(f"{plural(threads, 'live Python thread')}")
    if workers:
        parts.append(f"{plural(workers, 'thread')} of a thread pool")
    if py is not None and py.gil_off:
        parts.append("a free-threaded build with the GIL off: their Python code runs at once too")
    if (workers or 0) >= 1 or (py is not None and py.gil_off and (threads or 0) >= 2):
        return True, ", ".join(parts)
    if (threads or 0) >= 2:  # other threads, none of a thread pool: whether they call it is not known
        return None, ", ".join(parts) + ", none of them a thread pool's"
    return False, ", ".join(parts)


def _evidence(a: Advisory, c: Copy, callers: Callers) -> Callers:
    """Whether ``a``'s trigger shows for copy ``c``: True, False or None (unknown), and why."""
    if c.count is not None and c.count < a.min_threads:
        return False, f"{c.library} runs {plural(c.count, 'thread')} here; it shows from {a.min_threads}"
    if a.trigger is Trigger.OWN_THREADS:
        if c.count is None:
            return None, f"{c.library}'s count in force could not be read"
        return True, f"{c.library} runs {plural(c.count, 'thread')}"
    present, words = callers
    if present and c.count is not None and a.min_threads > 1:
        words += f", {c.library} at {plural(c.count, 'thread')}"
    return present, words


def _name(c: Copy) -> str:
    rec = reg.find(c.library)
    whose = f"{c.owner}'s copy" if c.owner not in (NO_OWNER, "") else c.filepath or "a copy"
    return f"{rec.label if rec is not None else c.library} {c.version} ({whose})"


def _finding(a: Advisory, c: Copy, callers: Callers, who: str = "") -> Finding:
    present, evidence = _evidence(a, c, callers)
    refs = ", ".join(a.references[1:])
    message = f"{who}{_name(c)} is a known-bad version ({a.reference}): {a.what}"
    if present:
        why = f"its trigger is present: {a.trigger} ({evidence})"
    else:
        why = f"it bites with {a.trigger}; {'not known here' if present is None else 'not triggered now'}: {evidence}"
    why += f"; fixed in {a.fixed}" + (f" ({refs})" if refs else "")
    severity = Severity.WARNING if present else Severity.INFO
    return Finding("known-bad-version", severity, message, why, a.upgrade)


def matches(copies: Iterable[Copy], arch: str | None) -> list[tuple[Advisory, Copy]]:
    """Each (advisory, copy) pair of ``copies`` in a known-bad range, once per advisory and file."""
    out, seen = [], set()
    for c in copies:
        for a in ADVISORIES:
            key = (a, c.filepath, c.version)
            if a.library == c.library and key not in seen and a.covers(c.version, c.owner, c.layer, arch):
                seen.add(key)
                out.append((a, c))
    return out


def copy_findings(copies: Iterable[Copy], arch: str | None, callers: Callers = (None, UNREAD)) -> list[Finding]:
    """The advisories of ``copies`` on a machine of ``arch``, with ``callers`` the evidence of calling
    threads (unknown by default: the pytest plugin's header, read before any test runs)."""
    return [_finding(a, c, callers) for a, c in matches(copies, arch)]


def known_bad_versions(r: Report) -> list[Finding]:
    """A loaded copy in a known-bad version range of the advisories table: a warning when its trigger
    shows, else info. One finding per advisory and copy."""
    copies = (Copy(p.library, p.version, p.owner, p.filepath, p.threading_layer, p.num_threads) for p in r.pools)
    return copy_findings(copies, r.cpu.arch, _callers(r))


def host_findings(where: str, copies: Iterable[tuple[int, Copy]], arch: str | None) -> list[Finding]:
    """The advisories of the processes of one cgroup (``where``) read from outside: one finding per
    advisory and file, naming the processes that load it (``copies``: (pid, copy)). Their Python
    threads cannot be read from outside, so a trigger of calling threads stays unknown (info)."""
    copies = list(copies)
    pids: dict[tuple[str | None, str | None], list[int]] = {}
    for pid, c in copies:
        pids.setdefault((c.filepath, c.version), []).append(pid)
    first = {(c.filepath, c.version): c for _, c in copies}
    out = []
    for a, c in matches(first.values(), arch):
        who = sorted(set(pids[(c.filepath, c.version)]))
        shown = ", ".join(map(str, who[:8])) + (f" and {len(who) - 8} more" if len(who) > 8 else "")
        loads = f"pid {shown} loads " if len(who) == 1 else f"pids {shown} load "
        out.append(_finding(a, c, (None, UNREAD), f"{where}: {loads}"))
    return out
