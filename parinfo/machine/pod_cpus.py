"""The CPUs a pod pays for, as a profile's ``pod_cpus`` counts them (the ``container`` profile's count).

A limit is a CFS quota the kernel enforces (the container's, or the pod cgroup's when pod-level
resources or every container's limits put a tighter one there); ``usable_cpus`` already takes the
tightest quota of the process's cgroup and its ancestors. A request sets no quota: it is a weight
(``cpu.shares`` / ``cpu.weight``) that gives the container its share of a busy node, and nothing
caps the container at it when the node is idle. More threads than the request pays for is what
oversubscribes a busy node, so ``pod_cpus`` is, for a process in a pod:

1. under a limit (any quota on its cgroup or an ancestor): ``usable_cpus``;
2. else with a request above 0 (a request-only Burstable pod): the request in CPUs rounded as the
   quota rounding says (floor unless told otherwise), at least 1, at most ``usable_cpus``;
3. else (BestEffort, a container without a request, a request that cannot be read): ``usable_cpus``,
   the node's.

Outside a pod it is ``usable_cpus``. :func:`pod_cpus` works on numbers, so ``parinfo k8s snippet``
resolves a pod shape that exists nowhere yet by the same rule (:func:`pod_shaped`).
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from parinfo.machine.rounding import round_quota
from parinfo.records.source import Kind, Source
from parinfo.records.unknown import Unknown

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

#: What every reason about a request says: the kernel caps nothing at it.
NOT_A_LIMIT = "a request is not a limit: the kernel does not throttle at it"


def pod_cpus(usable: int, quota: float | None, quota_source: Source, request: int | Unknown | None,
             request_source: Source, rule: str) -> tuple[int, Source]:
    """(pod_cpus, where it came from, in words that say which case of the module's rule it is) for
    a process that may use ``usable`` CPUs under ``quota`` (None: none), in a pod whose container
    asks for ``request`` millicores (None: the process is in no pod); ``rule`` rounds the request."""
    if quota is not None:
        return usable, quota_source.with_text(
            f"from the CPU limit {quota:g} CPUs ({quota_source}): usable_cpus {usable}")
    if request is None:
        return usable, Source(Kind.NONE, "", f"not in a pod: usable_cpus {usable}")
    if isinstance(request, Unknown):
        return usable, request_source.with_text(f"the pod's CPU request is {request}, and no limit: "
                                                f"usable_cpus {usable}")
    if request <= 0:
        return usable, request_source.with_text(f"no CPU request and no limit (as in a BestEffort pod): the node's "
                                                f"usable CPUs {usable} ({request_source})")
    rounded = round_quota(request / 1000, rule)
    n = max(1, min(usable, rounded))
    bound = "" if n == rounded else f", at most usable_cpus {usable}"
    return n, request_source.with_text(
        f"from the pod's CPU request {request}m (no limit): its share of the node by weight, "
        f"{rule}({request / 1000:g}) = {rounded}{bound} ({request_source}); {NOT_A_LIMIT}")


def of_facts(facts: MachineFacts) -> tuple[int, Source]:
    """:func:`pod_cpus` of the process ``facts`` describe, by their quota rounding."""
    return pod_cpus(facts.usable_cpus, facts.quota, facts.quota_source, facts.pod_request,
                    facts.pod_request_source, facts.quota_rounding)


def pod_shaped(facts: MachineFacts, request: int, limit: float | None, request_source: Source,
               limit_source: Source) -> MachineFacts:
    """The facts of a process in a pod that asks for ``request`` millicores under ``limit`` CPUs
    (None: none) on a node like the one ``facts`` describe: every online CPU in its affinity, no
    cpuset, no scheduler allocation; the usable CPUs and cores worked out again."""
    cpus = tuple(c for core in facts.core_siblings for c in core) or facts.affinity
    node = replace(facts, affinity=tuple(sorted(set(cpus))), cpuset=None, quota=limit, quota_source=limit_source,
                   allocation=None, pod_request=request, pod_request_source=request_source)
    return node.rounded(facts.quota_rounding, facts.quota_rounding_source)


#: The largest CPU quantity taken (millicores): a request or limit beyond 4096 CPUs is a typo.
MAX_MILLICORES = 4_096_000
_MILLI = re.compile(r"([0-9]{1,7})m")
_DECIMAL = re.compile(r"([0-9]{0,7})(?:\.([0-9]+))?")


def millicores(text: str, option: str, *, least: int = 0) -> int:
    """A Kubernetes CPU quantity (``500m``, ``2``, ``1.5``) in millicores, from ``least`` to
    :data:`MAX_MILLICORES`; raise UsageError (one line, naming ``option``) for anything else:
    words, a sign, a unit other than ``m``, an exponent, or a fraction finer than a millicore."""
    from parinfo.errors import UsageError
    from parinfo.safe_text import escape_controls, shorten

    given = text.strip()
    shown = shorten(escape_controls(text), 40)
    milli = _MILLI.fullmatch(given)
    decimal = None if milli else _DECIMAL.fullmatch(given)
    if milli is not None:
        value = int(milli.group(1))
    elif decimal is not None and given not in ("", "."):
        whole, frac = decimal.group(1) or "0", (decimal.group(2) or "").rstrip("0")
        if len(frac) > 3:
            raise UsageError(f"{option} {shown}: finer than a millicore (Kubernetes counts CPU in 1m steps; "
                             "write e.g. 1.5 or 1500m)")
        value = int(whole) * 1000 + int(frac.ljust(3, "0"))
    else:
        raise UsageError(f"{option} {shown}: not a CPU quantity (write e.g. 500m, 2 or 1.5)")
    if not least <= value <= MAX_MILLICORES:
        raise UsageError(f"{option} {shown}: must be from {least}m to {MAX_MILLICORES // 1000} CPUs")
    return value


def quantity(millicores: int) -> str:
    """``millicores`` as Kubernetes writes a CPU quantity: ``2`` for whole CPUs, else ``1500m``."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"
