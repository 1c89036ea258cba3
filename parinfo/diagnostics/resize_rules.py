"""``pool-fixed-after-resize``: a process's native pools were sized once, at start, for CPUs an
in-place resize has since taken away.

Kubernetes resizes a pod's CPU limit and the CPU manager's cpuset in place (GA in 1.35), without
restarting it; OpenBLAS, OpenMP, MKL and torch size their pools when they load and keep that count
(as nproc, GOMAXPROCS and the JVM keep theirs). A pool whose count was within the CPUs the cgroup
allowed before the resize and is above what it allows now is such a pool: it did not follow, and
will not. ``parinfo host`` judges it per process, from the resize its scanner saw between scans.
"""
from __future__ import annotations

from collections.abc import Sequence

from parinfo.diagnostics.findings import Finding, Severity
from parinfo.safe_text import plural


def pool_fixed_after_resize(where: str, pid: int, name: str, pools: Sequence[tuple[str, int]], before: int,
                            after: int, at: str, what: Sequence[str],
                            variables: Sequence[str] = ()) -> Finding | None:
    """The finding for process ``pid`` (``name``) in ``where``, whose pools (library, count in force)
    ran while the cgroup's usable CPUs went from ``before`` to ``after`` at ``at`` (``what``: the
    resize in words); None unless one pool's count is within ``before`` and above ``after``."""
    fixed = [(library, n) for library, n in pools if after < n <= before]
    if not fixed or after >= before:
        return None
    shown = ", ".join(f"{library} {n}" for library, n in fixed)
    assign = " ".join(f"{v}={after}" for v in variables)
    return Finding(
        "pool-fixed-after-resize", Severity.WARNING,
        f"{where}: pid {pid} ({name}) runs {shown} thread{'s' if len(fixed) > 1 or fixed[0][1] != 1 else ''}, "
        f"sized for {plural(before, 'usable CPU')}; the resize at {at} ({'; '.join(what)}) left "
        f"{plural(after, 'usable CPU')}",
        "native pools size themselves once, when their library loads, and keep that count: after an "
        "in-place resize their threads outnumber the CPUs, and under a quota the cgroup is throttled",
        "restart the process (in Kubernetes: resizePolicy restartPolicy RestartContainer for cpu) "
        + (f"with {assign} " if assign else "")
        + "so its pools are sized for the new limit; or run it under parinfo's runtime, whose defaults follow a "
        "resize (docs/runtime.md), or `parinfo apply container`",
    )
