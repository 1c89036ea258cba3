"""The rule over the advisories table (:mod:`parinfo.process.advisories`): a loaded copy of a
library in a known-bad version range, at warning level when the report shows its trigger (two or
more Python threads that can call it, its own pool wide enough), else at info level, with the
upgrade that fixes it. :data:`parinfo.diagnostics.process_rules.RULES` lists it with every other rule.
"""
from __future__ import annotations

from parinfo.diagnostics.findings import Finding, Severity
from parinfo.diagnostics.model import Report
from parinfo.process import libraries as reg
from parinfo.process.advisories import ADVISORIES, Advisory, Trigger
from parinfo.process.pools import PoolRow
from parinfo.safe_text import plural


def _callers(r: Report) -> tuple[bool | None, str]:
    """Whether two or more Python threads can call a pool at once, and the evidence in words."""
    teams, py = r.teams, r.backend.python
    workers = None if teams is None else len(teams.workers)
    threads = None if py is None else py.python_threads
    if workers is None and threads is None:
        return None, "the Python threads of the process could not be read"
    parts = []
    if threads is not None:
        parts.append(f"{plural(threads, 'live Python thread')}")
    if workers:
        parts.append(f"{plural(workers, 'thread')} of a thread pool")
    if py is not None and py.gil_off:
        parts.append("a free-threaded build with the GIL off: their Python code runs at once too")
    present = (threads or 0) >= 2 or (workers or 0) >= 1
    return present, ", ".join(parts)


def _evidence(a: Advisory, pool: PoolRow, r: Report) -> tuple[bool | None, str]:
    """Whether ``a``'s trigger shows in ``r`` for ``pool``: True, False or None (unknown), and why."""
    count = pool.num_threads
    name = pool.library
    if count is not None and count < a.min_threads:
        return False, f"{name} runs {plural(count, 'thread')} here; it shows from {a.min_threads}"
    if a.trigger is Trigger.OWN_THREADS:
        if count is None:
            return None, f"{name}'s count in force could not be read"
        return True, f"{name} runs {plural(count, 'thread')}"
    present, words = _callers(r)
    if present and count is not None and a.min_threads > 1:
        words += f", {name} at {plural(count, 'thread')}"
    return present, words


def _copy(pool: PoolRow) -> str:
    rec = reg.find(pool.library)
    label = rec.label if rec is not None else pool.library
    whose = f"{pool.owner}'s copy" if pool.owner not in ("unknown", "") else pool.filepath or "a copy"
    return f"{label} {pool.version} ({whose})"


def _finding(a: Advisory, pool: PoolRow, r: Report) -> Finding:
    present, evidence = _evidence(a, pool, r)
    refs = ", ".join(a.references[1:])
    message = f"{_copy(pool)} is a known-bad version ({a.reference}): {a.what}"
    if present:
        why = f"its trigger is present: {a.trigger} ({evidence})"
    elif present is None:
        why = f"it bites with {a.trigger}; not known here: {evidence}"
    else:
        why = f"it bites with {a.trigger}; not triggered now: {evidence}"
    why += f"; fixed in {a.fixed}" + (f" ({refs})" if refs else "")
    return Finding("known-bad-version", Severity.WARNING if present else Severity.INFO, message, why, a.upgrade)


def known_bad_versions(r: Report) -> list[Finding]:
    """A loaded copy in a known-bad version range of the advisories table: a warning when its trigger
    shows, else info. One finding per advisory and copy."""
    arch = r.cpu.arch
    out, seen = [], set()
    for pool in r.pools:
        for a in ADVISORIES:
            key = (a, pool.filepath, pool.version)
            if a.library != pool.library or key in seen:
                continue
            if a.covers(pool.version, pool.owner, pool.threading_layer, arch):
                seen.add(key)
                out.append(_finding(a, pool, r))
    return out
