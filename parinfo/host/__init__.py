"""Every process of the machine (or of one cgroup) against its CPUs: ``parinfo host``.

One scan walks /proc: per process its CPUs (affinity and its cgroup's quota and cpuset), the
native pools mapped into it with each count in force where the library exposes it (read from the
process's memory, see :mod:`parinfo.outside.inforce`) or else the count its launch environment
asks for (said so, never shown as in force), its OS threads by state; per cgroup whose limit binds
(the machine's root when none) the threads its processes can run at once against its usable CPUs,
the runnable threads, and throttling and CPU pressure over the interval; with ``attach``, the
counts of each CPython 3.14+ process read from inside it (opt-in, bounded in total time, marked
attached: :mod:`parinfo.outside.attach`); families (processes with
one parent and one command: server workers, multiprocessing and loky pools, torchrun ranks) and the
finding ``host-oversubscribed``. The processes are never stopped, traced or signalled.

- :func:`scan`: one :class:`~parinfo.host.model.HostReport` (two readings ``interval`` apart).
- :class:`~parinfo.host.scanner.Scanner`: repeated scans that reuse what does not change while a
  process lives (its command, user, launch environment, parsed maps); ``parinfo host`` refreshes
  with one.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from parinfo.host.model import HostReport

__all__ = ["HostReport", "scan"]


def scan(cgroup: str | None = None, user: str | int | None = None, interval: float = 1.0,
         attach: float | None = None) -> HostReport:
    """The processes of this machine (those in cgroup ``cgroup`` and below, and of user ``user``
    when given: a name, or a uid as text or int) against their CPUs, with what happened over
    ``interval`` seconds (0: one reading, cumulative counters only). With ``attach`` (seconds, all
    attaches together), each CPython 3.14+ process with native pools is read from inside
    (docs/process.md). Raises UsageError for an unknown user or cgroup or a bad interval or budget."""
    from parinfo.host.scanner import Scanner, check_interval

    seconds = check_interval(interval)
    scanner = Scanner(cgroup=cgroup, user=user, attach=attach)
    if seconds:
        import time

        scanner.scan(attach=False)
        time.sleep(seconds)
    return scanner.scan()


def __getattr__(name: str) -> Any:
    if name == "HostReport":
        from parinfo.host.model import HostReport

        return HostReport
    raise AttributeError(f"module 'parinfo.host' has no attribute {name!r}")
