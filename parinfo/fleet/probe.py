"""What runs inside one worker: its row of the fleet report, and the per-thread reads and pushes.

Everything here works in any process with parinfo installed and imports neither Dask nor Ray; the
Dask and Ray modules call it on their workers.
"""
from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from parinfo.errors import ProfileError
from parinfo.records.record import record

if TYPE_CHECKING:
    from parinfo.diagnostics.fleet_rows import HostIdentity, ThreadPools
    from parinfo.machine.topology import MachineFacts
    from parinfo.process.pools import PoolRow
    from parinfo.profiles.plan import Plan

#: How long a per-thread run waits for every executor thread to be free.
THREAD_TIMEOUT = 10.0


@record(frozen=True)
class ProfileDocument:
    """A profile checked on the client, as it travels to the workers: ``body``, the profile as plain
    JSON data (free-form, as the user's file is: each worker checks and resolves it on its own CPUs),
    and its ``origin`` (file) for messages."""

    body: dict[str, Any]
    origin: str

    def resolve_here(self) -> Plan:
        """Resolve the profile on this process's machine (its CPUs, cgroup and affinity)."""
        from parinfo.profiles.loading import resolve_profile, validate_profile

        return resolve_profile(validate_profile(self.body, self.origin))

    def to_json(self) -> str:
        """The document as the Ray set-up hook reads it back (:meth:`from_json`)."""
        import json

        return json.dumps({"origin": self.origin, "document": self.body}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ProfileDocument:
        """The document :meth:`to_json` wrote (ValueError, KeyError or TypeError when it is not one)."""
        import json

        carried = json.loads(text)
        return cls(carried["document"], carried["origin"])


class AppliedOnWorker(TypedDict, total=False):
    """What applying a profile did in one Dask worker, as it travels back to the client (empty for
    a worker the profile has not reached yet): the one-line results of ``parinfo.apply``, and the
    executor threads the per-thread limits reached, of how many."""

    applied: list[str]
    not_in_force: list[str]
    threads_reached: list[str]
    threads: int


def profile_document(profile: Any) -> ProfileDocument:
    """A profile checked here without machine facts, as plain data any worker can resolve, with its
    origin (file) for messages. A bad profile raises ProfileError before any worker is touched."""
    from parinfo.profiles.loading import as_profile
    from parinfo.profiles.plan import Plan

    if isinstance(profile, Plan):
        raise ProfileError("a resolved Plan belongs to one machine; give the profile itself",
                           fix="pass its name, path or dict: each worker resolves it on its own CPUs")
    prof = as_profile(profile)
    return ProfileDocument(prof.document(), prof.origin)


def host_identity(machine: MachineFacts) -> HostIdentity:
    """What makes workers share CPUs: one boot of one machine, one cgroup, one set of usable CPUs."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
    except OSError:
        boot = None
    from parinfo.diagnostics.fleet_rows import HostIdentity
    from parinfo.machine.cpulist import format_cpu_list

    cpus = machine.usable_cpu_list

    cpu_text = format_cpu_list(cpus) if cpus else "?"
    name = socket.gethostname()
    key = f"{name}:{(boot or 'noboot')[:8]}:{machine.cgroup_path or '/'}:{cpu_text}"
    return HostIdentity(key, name, boot, machine.cgroup_path, cpu_text)


def worker_row(worker: str, per_thread: list[ThreadPools] | None = None) -> dict[str, Any]:
    """This process as one row of a fleet report (a :class:`WorkerRow` as a dict, the payload that
    travels to the client): host identity, pid, usable CPUs, outer threads, every pool with its
    count and copy, the thread variables with who set them, and the findings (the single-process
    rules and ``outer-times-inner``, over per-thread counts when given)."""
    from parinfo.diagnostics import fleet_rules
    from parinfo.diagnostics.findings import sort_findings
    from parinfo.diagnostics.fleet_rows import WorkerRow
    from parinfo.diagnostics.report import inspect
    from parinfo.records.convert import dump

    report = inspect(imports=[])
    row = WorkerRow(worker, host_identity(report.machine), report, per_thread)
    found = [f for f in report.findings if f.id != "outer-times-inner"]
    report.findings = sort_findings(found + fleet_rules.worker_findings(row))
    return dict(dump(row))


T = TypeVar("T")


def in_each_thread(submit: Callable[[Callable[[], tuple[str, T]]], Future[tuple[str, T]]], threads: int,
                   fn: Callable[[], T], timeout: float = THREAD_TIMEOUT) -> list[tuple[str, T]]:
    """Run ``fn`` once in each of a pool's ``threads`` threads: (thread name, result) per run.

    Each call waits at a barrier until all ``threads`` calls have started, so no thread takes two.
    Threads still busy after ``timeout`` break the barrier: the calls that started run ``fn``
    anyway, and the caller sees fewer distinct threads than it asked for.
    """
    barrier = threading.Barrier(threads)

    def one() -> tuple[str, T]:
        try:
            barrier.wait(timeout)
        except threading.BrokenBarrierError:
            pass
        return threading.current_thread().name, fn()

    futures = [submit(one) for _ in range(threads)]
    out = []
    for fut in futures:
        try:
            out.append(fut.result(timeout + 5))
        except Exception:  # a busy thread: its call runs later, or never
            continue
    return out


def thread_pools() -> list[PoolRow]:
    """The pools' counts as the calling thread sees them (OpenMP's limit is per thread), each
    library's first copy."""
    from parinfo.process.pools import native_pools

    return [p for p in native_pools() if not p.duplicate_of]


def push_thread_limits(counts: dict[str, int]) -> list[str]:
    """Set, in the calling thread, the limits whose scope is the thread (OpenMP's), from a plan's
    ``libraries`` counts; the one-line results (``library=count``, a refusal named)."""
    from parinfo.process import setter

    done = setter.set_counts(counts, per_thread_only=True, torch=False)
    return sorted({f"{o.library}={o.asked}" + (f" (refused: {o.error})" if o.error else "") for o in done})
