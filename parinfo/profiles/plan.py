"""A resolved profile: every setting with its value and why, ready to be put in force.

The profile loader (parinfo.profiles.loading) produces a Plan for one machine; parinfo.profiles.applying puts it in
force in this process, in a launched program, or across pinned instances.
"""
from __future__ import annotations

from dataclasses import field

from parinfo.convert import LOCAL
from parinfo.record import record


@record(frozen=True)
class Setting:
    """One resolved count: ``value`` and ``why`` (the expression and the machine facts it used)."""

    key: str = field(metadata=LOCAL)  # the plan's JSON names it by where it sits
    value: int
    why: str


@record(frozen=True)
class InstancePlan:
    """One pinned instance of a multi-instance plan."""

    index: int
    cpus: tuple[int, ...]
    intra_op: int
    inter_op: int
    env: dict[str, str]


@record(frozen=True)
class Plan:
    """What a profile means on this machine.

    ``libraries`` maps blas|openmp|mkl|numexpr|torch to its count; ``env`` is every environment
    variable the plan sets (derived counts plus the profile's extra variables), with ``env_why``.
    """

    name: str
    description: str
    origin: str  # the profile's file, or "<profile>"
    intra_op: Setting
    inter_op: Setting
    libraries: dict[str, Setting] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    env_why: dict[str, str] = field(default_factory=dict)
    affinity: tuple[int, ...] | None = None
    affinity_why: str = "not set: inherited"
    instances: tuple[InstancePlan, ...] = ()
    notes: tuple[str, ...] = ()
