"""Default thread counts and caps that follow from the machine's facts alone.

The library records (:mod:`parinfo.process.libraries`) point at these as their ``default`` and
``cap``; the rules that read a variable or ask a loaded module stay beside their records there.
A default rule takes the machine's facts and a context (``ctx``: what only the library itself can
tell, e.g. torch's hardware_concurrency) and returns (count or None, the phrase the report prints);
a cap takes the facts, the environment and the context.

Importing this module is cheap (the standard library only): the launcher imports the registry on
the start-up path of ``parinfo apply P -- CMD``.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

class ModuleFacts(NamedTuple):
    """What only a library's loaded module can tell its default and cap (None: it did not say)."""

    ncores: int | None = None  # numexpr.ncores: the online CPUs it detected
    max_threads: int | None = None  # numexpr.MAX_THREADS: its pool
    max_set: bool = False  # NUMEXPR_MAX_THREADS was set
    default: int | None = None  # numba.config.NUMBA_DEFAULT_NUM_THREADS
    hardware_concurrency: int | None = None  # torch's std::thread::hardware_concurrency
    limit: int | None = None  # a cap the library puts on every count, its default included (XGBoost: the
    # quota it reads; Arrow: OMP_THREAD_LIMIT)
    limit_why: str = ""  # what set ``limit`` (or ``floor``), in words
    floor: int | None = None  # a count the library never goes below, its default included (JAX: its CPU devices)


#: A module that said nothing.
NO_FACTS = ModuleFacts()

#: A default rule: (facts, context) -> (count or None, why).
Rule = Callable[["MachineFacts", "ModuleFacts"], "tuple[int | None, str]"]
#: A cap on a variable's request: (facts, environment, context) -> (cap or None, why); None: no cap.
Cap = Callable[["MachineFacts", Mapping[str, str], "ModuleFacts | None"], "tuple[int | None, str]"]


def affinity_cpus(facts: MachineFacts, ctx: ModuleFacts | None = None) -> tuple[int, str]:
    """The CPUs in this process's affinity mask."""
    n = len(facts.affinity) or facts.logical_cpus or 1
    return n, f"{plural(n, 'CPU')} in affinity"


def physical_in_affinity(facts: MachineFacts, ctx: ModuleFacts | None = None) -> tuple[int, str]:
    """The physical cores with at least one CPU in the affinity mask."""
    aff = set(facts.affinity)
    if facts.core_siblings:
        n = max(1, sum(1 for core in facts.core_siblings if aff & set(core)))
    elif facts.physical_cores and facts.logical_cpus:
        per_core = max(1, facts.logical_cpus // facts.physical_cores)
        n = max(1, min(facts.physical_cores, math.ceil(len(aff) / per_core)))
    else:
        n, _ = affinity_cpus(facts)
        return n, f"{plural(n, 'CPU')} in affinity (physical cores unknown)"
    return n, f"{plural(n, 'physical core')} in affinity"


def affinity_cap(facts: MachineFacts, env: Mapping[str, str],
                 ctx: ModuleFacts | None = None) -> tuple[int, str]:
    """A request capped at the CPUs in affinity (OpenBLAS)."""
    return affinity_cpus(facts)


def single_thread(facts: MachineFacts, ctx: ModuleFacts) -> tuple[int, str]:
    """One thread unless asked (BLIS)."""
    return 1, "1 (BLIS runs single-threaded unless asked)"


def backend_decides(facts: MachineFacts, ctx: ModuleFacts) -> tuple[None, str]:
    """No count of its own: the backend it loads decides (FlexiBLAS)."""
    return None, "decided by FlexiBLAS's backend"


def affinity_no_variable(facts: MachineFacts, ctx: ModuleFacts) -> tuple[int, str]:
    """The CPUs in affinity, for a runtime that reads no count variable (TBB)."""
    n, why = affinity_cpus(facts)
    return n, why + " (TBB reads no count variable)"


def hardware_concurrency(facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
    """torch's inter-op default: std::thread::hardware_concurrency (ignores affinity and quota)."""
    n = ctx.hardware_concurrency or facts.logical_cpus
    return n, f"{n} logical CPUs (std::thread::hardware_concurrency; ignores affinity and quota)"
