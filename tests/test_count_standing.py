"""The one precedence rule for another process's pool counts (parinfo.outside.standing), on hand-made
reads: in force > attached > launch environment > unknown; a prediction is typed as one."""
from __future__ import annotations

import dataclasses

from parinfo.machine.topology import machine_facts
from parinfo.outside.inforce import IN_FORCE, CountInForce
from parinfo.outside.standing import Standing, decide
from parinfo.records.source import Kind, Source, unknown

PATH = "/lib/libgomp.so.1"
FACTS = dataclasses.replace(machine_facts(), usable_cpus=2)


def _memory(count: int | None, denied: bool = False) -> CountInForce:
    return CountInForce("libgomp", PATH, count, IN_FORCE if count else unknown("the reason"), denied=denied)


def test_each_step_of_the_rule_in_order():
    env = {"OMP_NUM_THREADS": "3"}
    inside = (1, Source(Kind.ATTACHED, "", "read inside the process"))
    got = decide("libgomp", _memory(2), env, FACTS, attached=inside)
    assert (got.count, got.standing, got.in_force) == (2, Standing.IN_FORCE, True)
    got = decide("libgomp", None, env, FACTS, attached=inside)
    assert (got.count, got.standing, got.in_force) == (1, Standing.ATTACHED, True)
    got = decide("libgomp", _memory(None), env, FACTS)
    assert (got.count, got.standing, got.in_force) == (3, Standing.PREDICTED, False)
    assert got.variable is not None and "OMP_NUM_THREADS=3" in got.variable
    assert got.source.kind is Kind.LAUNCH_ENVIRONMENT and got.unread == "the reason"
    got = decide("libgomp", None, None, FACTS)
    assert (got.count, got.standing) == (None, Standing.UNKNOWN)
    assert got.source.text.endswith("its launch environment cannot be read either)")


def test_a_default_is_a_prediction_without_a_variable():
    got = decide("libgomp", None, {}, FACTS)
    assert (got.count, got.standing, got.variable, got.in_force) == (2, Standing.PREDICTED, None, False)


def test_a_refused_read_is_never_replaced_by_a_prediction():
    got = decide("libgomp", _memory(None, denied=True), {"OMP_NUM_THREADS": "3"}, FACTS)
    assert (got.count, got.standing, got.source.text) == (None, Standing.UNKNOWN, "unknown (the reason)")
