"""CPU throttling and pressure counters: the cgroup's ``cpu.stat`` (v1 and v2) and pressure stall
information (``/proc/pressure/cpu``, the cgroup's ``cpu.pressure``).

The kernel counts CFS bandwidth periods and the periods in which a cgroup ran out of quota, from the
cgroup's creation on: v2 ``nr_periods``, ``nr_throttled``, ``throttled_usec``; v1 the same counts
with ``throttled_time`` in nanoseconds. Those counters live in the cgroup whose quota bites, which
may be an ancestor (a systemd slice, an outer container), so every level with a quota is read.

Everything is read under ``root`` (tests pass fake trees); a file that is missing or unreadable
gives an :class:`~parinfo.records.unknown.Unknown` with the reason, never an exception. Files are
re-read on every call: these are counters.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any

from parinfo.machine import cgroup as _cgroup
from parinfo.machine.sysfs import Missing, Unreadable, garbage, read, shown
from parinfo.records.convert import LOCAL, REQUIRED, dump
from parinfo.records.record import record
from parinfo.records.source import Source, file
from parinfo.records.unknown import Unknown

if TYPE_CHECKING:
    from parinfo.machine.procfs import Proc

#: What a report read from elsewhere says of a pressure it does not carry.
NOT_IN_REPORT = Unknown("not in the report")


@record(frozen=True)
class Throttling:
    """The CFS bandwidth counters of one cgroup level that has a CPU quota (cumulative)."""

    cgroup: str = field(metadata=REQUIRED)  # the directory, as shown on the machine
    quota: float = field(metadata=REQUIRED)  # CPUs the quota pays for per period
    periods: int = field(metadata=REQUIRED)  # periods in which the cgroup had runnable threads
    throttled: int = field(metadata=REQUIRED)  # of those, periods in which it ran out of quota
    throttled_usec: int = field(metadata=REQUIRED)  # time its threads were held back

    @property
    def ratio(self) -> float:
        """Throttled periods over periods (0 when none has elapsed)."""
        return self.throttled / self.periods if self.periods else 0.0

    _json_extra = (("ratio", float),)  # worked out: written by _json_out

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        return {**data, "ratio": round(self.ratio, 4)}  # worked out again when read back


@record(frozen=True)
class CpuCounters:
    """Throttling of a process's cgroup: one entry per level that has a quota, leaf first.

    ``levels`` is empty when no level sets a quota (nothing can throttle); ``unknown`` holds why the
    counters could not be read (then ``levels`` is empty too).
    """

    version: str | None
    levels: tuple[Throttling, ...] = ()
    unknown: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def worst(self) -> Throttling | None:
        """The level that throttled most (by throttled periods), or None."""
        return max(self.levels, key=lambda t: (t.throttled, -t.quota), default=None)

    def since(self, earlier: CpuCounters) -> Throttling | None:
        """The level that throttled most between ``earlier`` and these counters, its figures the
        differences over that window; None when no level of both readings has a quota."""
        before = {t.cgroup: t for t in earlier.levels}
        deltas = [Throttling(t.cgroup, t.quota, t.periods - p.periods, t.throttled - p.throttled,
                             t.throttled_usec - p.throttled_usec)
                  for t in self.levels if (p := before.get(t.cgroup)) is not None]
        return max(deltas, key=lambda t: (t.throttled, -t.quota), default=None)

    _json_extra = (("worst", Throttling | None),)  # written by _json_out, read by _json_in

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        worst = self.worst
        return {"version": data["version"], "levels": data["levels"], "worst": None if worst is None else dump(worst),
                "unknown": data["unknown"], "notes": data["notes"]}

    @classmethod
    def _json_in(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """A report that carries only its ``worst`` level gets that one level."""
        if not data.get("levels") and isinstance(data.get("worst"), Mapping):
            return {**data, "levels": [data["worst"]]}
        return data


def _fields(root: str, rel: str) -> dict[str, int]:
    """``key value`` lines of a flat-keyed cgroup file as integers."""
    text = read(root, rel)
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            raise garbage(rel, line)
        try:
            out[parts[0]] = int(parts[1])
        except ValueError:
            raise garbage(rel, line) from None
    return out


def _throttling(root: str, d: str, version: str, quota: float) -> Throttling:
    rel = f"{d}/cpu.stat"
    stat = _fields(root, rel)
    if version == "v2":
        keys = ("nr_periods", "nr_throttled", "throttled_usec")
    else:
        keys = ("nr_periods", "nr_throttled", "throttled_time")
    missing = [k for k in keys if k not in stat]
    if missing:
        raise Unreadable(f"no {', '.join(missing)} in {shown(rel)}")
    usec = stat["throttled_usec"] if version == "v2" else stat["throttled_time"] // 1000
    return Throttling(shown(d), quota, stat["nr_periods"], stat["nr_throttled"], usec)


def throttling_at(root: str, d: str, version: str) -> Throttling | None:
    """The counters of the cgroup directory ``d`` (relative to ``root``) of a ``version`` hierarchy,
    None when it sets no quota of its own; raise Unreadable when its files cannot be read."""
    quota = _cgroup.quota_at(root, d, version)
    return None if quota is None else _throttling(root, d, version, quota)


def cpu_counters(root: str = "/", proc: Proc | None = None) -> CpuCounters:
    """The throttling counters of process ``proc``'s cgroup (default: this one) and its ancestors."""
    root = os.path.abspath(root)
    try:
        where = _cgroup.controller_dir(root, "cpu", proc)
    except Unreadable as exc:
        return CpuCounters(None, unknown=str(exc))
    if where is None:
        return CpuCounters(None)  # no cgroup file system: no quota, nothing throttles
    levels: list[Throttling] = []
    problems: list[str] = []
    for d in where.levels:
        try:
            level = throttling_at(root, d, where.version)
            if level is not None:
                levels.append(level)
        except Unreadable as exc:
            problems.append(str(exc))
    if problems and not levels:
        return CpuCounters(where.version, unknown="; ".join(problems))
    notes = ("counters may be incomplete: " + "; ".join(problems),) if problems else ()
    return CpuCounters(where.version, tuple(levels), notes=notes)


@record(frozen=True)
class Pressure:
    """CPU pressure stall information: the share of time some (or all) runnable tasks waited for
    a CPU, as 10 s averages (percent) and cumulative totals (microseconds)."""

    source: Source = field(metadata=REQUIRED)  # the pressure file
    some_avg10: float = field(metadata=REQUIRED)
    some_total_usec: int = field(metadata=REQUIRED)
    full_avg10: float | None = None  # "full" is reported for cgroups (and systems since 5.13)
    full_total_usec: int | None = None


def read_pressure(root: str, rel: str) -> Pressure:
    """Parse a pressure file (``some avg10=.. avg60=.. avg300=.. total=..`` and a ``full`` line)."""
    text = read(root, rel)
    found: dict[str, tuple[float, int]] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        values = dict(item.partition("=")[::2] for item in rest.split())
        try:
            found[kind] = (float(values["avg10"]), int(values["total"]))
        except (KeyError, ValueError):
            raise garbage(rel, line) from None
    if "some" not in found:
        raise garbage(rel, text)
    full = found.get("full")
    return Pressure(file(shown(rel)), found["some"][0], found["some"][1],
                    None if full is None else full[0], None if full is None else full[1])


@record(frozen=True)
class PressureFacts:
    """The machine's CPU pressure and the process's cgroup's, each a Pressure or an Unknown
    (:data:`NOT_IN_REPORT` when a report read back does not carry it); in JSON an Unknown is its words."""

    system: Pressure | Unknown = field(metadata={"missing": NOT_IN_REPORT})
    cgroup: Pressure | Unknown = field(default=Unknown("no cgroup v2 hierarchy"), metadata={"missing": NOT_IN_REPORT})
    #: the v2 cgroup directory ``cgroup`` was read from (None: none was read); not in the report
    cgroup_dir: str | None = field(default=None, metadata=LOCAL)


def cpu_pressure(root: str = "/", proc: Proc | None = None) -> PressureFacts:
    """CPU pressure of the whole machine (/proc/pressure/cpu) and of process ``proc``'s v2 cgroup."""
    root = os.path.abspath(root)
    try:
        system: Pressure | Unknown = read_pressure(root, "proc/pressure/cpu")
    except Unreadable as exc:
        system = Unknown(f"{exc}{'; the kernel has no PSI' if isinstance(exc, Missing) else ''}")
    try:
        where = _cgroup.unified_dir(root, proc)
    except Unreadable as exc:
        return PressureFacts(system, Unknown(str(exc)))
    if where is None:
        return PressureFacts(system)
    try:
        group: Pressure | Unknown = read_pressure(root, f"{where.leaf}/cpu.pressure")
    except Unreadable as exc:
        group = Unknown(str(exc))
    return PressureFacts(system, group, where.leaf)
