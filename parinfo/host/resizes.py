"""In-place resizes ``parinfo host`` saw between its scans, and the pools that cannot follow them.

The scanner re-reads each cgroup membership's binding once it is a second old (``FOLLOW_S``): its
quota, cpuset and, in a Kubernetes pod, the container's request and limit and the pod's limit
(:class:`parinfo.machine.resize.CpuBudget`). When a re-read differs from the last, the
:class:`ResizeLog` counts it and keeps the last change in words, from what to what; ``host --json``
lists them under ``resizes``, the text after the pods, ``host --serve`` as
``parinfo_cgroup_resizes_total``. A process that started before a resize that narrowed its CPUs and
still runs a native pool sized for the old CPUs gets ``pool-fixed-after-resize``
(:func:`parinfo.host.judging.resized`).
"""
from __future__ import annotations

import time
from dataclasses import field
from typing import Annotated

from parinfo.machine.resize import CpuBudget, resized
from parinfo.records.convert import LOCAL, between
from parinfo.records.record import record
from parinfo.records.source import clock as hms
from parinfo.safe_text import escape_controls


@record
class CgroupResize:
    """The resizes of one cgroup (as /proc/PID/cgroup names it) seen since the scanner started:
    how many, the last one's time (HH:MM:SS) and changes in words, the usable CPUs [before, after]
    it, and the values read now (``limit``: the quota that binds, in CPUs; ``request_millicores``
    in a pod; ``cpus``: the cpuset's CPUs; None: none set or none read)."""

    cgroup: str
    resizes: Annotated[int, between(0)] = 0
    at: str = ""
    changes: list[str] = field(default_factory=list)
    usable_cpus: list[int] = field(default_factory=list)
    limit: float | None = None
    request_millicores: int | None = None
    cpus: int | None = None
    boot_s: float = field(default=0.0, metadata=LOCAL)  # CLOCK_BOOTTIME of the last: as process starts are


def _boot_now() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class ResizeLog:
    """The resizes one scanner saw, by cgroup membership path."""

    def __init__(self) -> None:
        self.by_cgroup: dict[str, CgroupResize] = {}
        self.current: set[str] = set()  # the cgroups the last scan's processes are in

    def compare(self, cgroup: str, old: CpuBudget, new: CpuBudget, usable: tuple[int, int]) -> None:
        """Count a resize of ``cgroup`` when its re-read ``new`` differs from ``old``; ``usable``:
        the CPUs it allowed before and after."""
        what = resized(old, new)
        if not what:
            return
        seen = self.by_cgroup.get(cgroup) or CgroupResize(cgroup)
        request = new.request
        self.by_cgroup[cgroup] = CgroupResize(
            cgroup, seen.resizes + 1, hms(time.time()), what, list(usable), new.quota,
            request if isinstance(request, int) else None, None if new.cpuset is None else len(new.cpuset),
            _boot_now())

    def forget(self, kept: set[str]) -> None:
        """Drop the cgroups no process is in any more; ``kept`` are those the last scan saw."""
        self.current = kept
        for path in set(self.by_cgroup) - kept:
            del self.by_cgroup[path]

    def counts(self) -> dict[str, int]:
        """{cgroup: resizes seen} for every cgroup the last scan's processes are in (0 for those
        never resized): what ``host --serve`` exports as ``parinfo_cgroup_resizes_total``."""
        return {path: self.by_cgroup[path].resizes if path in self.by_cgroup else 0 for path in sorted(self.current)}


def resize_lines(resizes: list[CgroupResize]) -> list[str]:
    """The text form: one line per resized cgroup."""
    if not resizes:
        return []
    lines = ["resized in place (cgroup: times seen, the last one)"]
    for r in resizes:
        cpus = " -> ".join(map(str, r.usable_cpus))
        lines.append(escape_controls(f"  {r.cgroup}: {r.resizes}, at {r.at}: {'; '.join(r.changes)}; "
                                     f"usable CPUs {cpus}"))
    return [*lines, ""]
