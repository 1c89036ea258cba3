"""Diagnostics: rules over the facts of a report, each with a stable id, a severity, one line, why, and the fix.

Rules read the typed sections of a :class:`~parinfo.diagnostics.model.Report` (a payload from
elsewhere, or a hand-made dict in a test, becomes one through ``Report.from_dict``), so they never
touch the process themselves. :data:`RULES` is the one list of them, with those of
:mod:`parinfo.diagnostics.fleet_rules` (outer threads) and :mod:`parinfo.diagnostics.live_rules`
(live evidence); :func:`diagnose` runs it. The rules over a process's own facts are those of
:mod:`~parinfo.diagnostics.count_rules` (its counts), :mod:`~parinfo.diagnostics.runtime_rules`
(the runtimes loaded together), :mod:`~parinfo.diagnostics.machine_rules` (the machine) and
:mod:`~parinfo.diagnostics.thread_rules` (the team each thread gets),
:mod:`~parinfo.diagnostics.advisory_rules` (library versions known to give wrong results) and
:mod:`~parinfo.diagnostics.compile_rules` (torch.compile's compile workers), over the views of
:mod:`~parinfo.diagnostics.rule_views`.
"""
from __future__ import annotations

from collections.abc import Callable

from parinfo.diagnostics import (
    advisory_rules,
    compile_rules,
    count_rules,
    fleet_rules,
    live_rules,
    machine_rules,
    runtime_rules,
    thread_rules,
)
from parinfo.diagnostics.count_rules import interop_fix
from parinfo.diagnostics.findings import Finding, Severity, at_least, sort_findings
from parinfo.diagnostics.model import Report

__all__ = ["RULES", "Finding", "Rule", "Severity", "at_least", "diagnose", "interop_fix"]

Rule = Callable[[Report], list[Finding]]


def diagnose(report: Report) -> list[Finding]:
    """Run every rule of :data:`RULES` over ``report``; errors first, then warnings, then infos
    (within one severity, in the order of the rules)."""
    return sort_findings([f for rule in RULES for f in rule(report)])


#: Every rule a report runs, in order: those over the process's facts (its counts, the runtimes
#: loaded together, the machine), the outer threads times the pools (fleet_rules), then the live
#: evidence (live_rules). The one list of rules.
RULES: tuple[Rule, ...] = (
    count_rules.oversubscribed_interop, count_rules.oversubscribed_pools, count_rules.above_quota_or_affinity,
    count_rules.above_physical, count_rules.invalid_variables, machine_rules.invalid_machine_variables,
    machine_rules.fractional_quota, machine_rules.scheduler_unbound, count_rules.refused_counts,
    count_rules.above_ceiling, count_rules.set_after_load, runtime_rules.several_openmp, runtime_rules.openmp_and_tbb,
    runtime_rules.openblas_pthreads_with_openmp, runtime_rules.kmp_duplicate, runtime_rules.duplicate_copies,
    machine_rules.free_threaded, compile_rules.compile_workers,
    thread_rules.limit_not_in_workers, thread_rules.shared_pool_callers, thread_rules.teams_oversubscribed,
    advisory_rules.known_bad_versions,
    fleet_rules.outer_findings,
    live_rules.throttled, live_rules.thread_stack_budget, live_rules.runnable_above_usable,
    live_rules.idle_spin_throttled,
)
