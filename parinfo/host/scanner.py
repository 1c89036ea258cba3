"""The scan behind ``parinfo host``: every process of the machine read from /proc, grouped by the
cgroup whose CPU limit binds it, with its families and the finding ``host-oversubscribed``.

Cost. A scan reads, per thread, its ``stat`` (name and state), and per process its ``stat``,
``cgroup``, affinity (one system call) and ``maps`` (the runtimes mapped into it), plus each pool's
count from the process's memory where the library exposes one. What does not change while a
process lives (its command line, user, launch environment) is read once per process: the
:class:`Scanner` keeps it, keyed by pid, start time and name, so a warm scan (``parinfo host``'s
refresh) pays for the changing files only. ``maps`` is re-read on every scan (a library can be
loaded at any time) but parsed again only when its bytes changed. Plain reads of /proc are used
rather than psutil: one process's row needs a few files, and psutil's per-process objects and
exceptions cost several times more per process.

A process that exits during a scan is dropped; a zombie or a kernel thread has no row (kernel
threads are counted apart). A process whose maps or environment this user may not read gets its
pools as "unknown (permission: ...)": they are never guessed, and it counts for nothing in the
sums its cgroup is judged by.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import shlex
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from parinfo.diagnostics import fleet_rules
from parinfo.diagnostics.fleet_rows import ProcessLoad
from parinfo.errors import UsageError
from parinfo.host.model import (
    FROM_LAUNCH,
    CgroupRow,
    Family,
    HostProcess,
    HostReport,
    PoolCount,
    ThreadGroup,
)
from parinfo.machine.sysfs import read_bytes
from parinfo.process import libraries as reg
from parinfo.process.inforce import IN_FORCE, PERMISSION
from parinfo.process.tasks import CLOCK_TICKS, thread_group
from parinfo.record import record

if TYPE_CHECKING:
    from parinfo.machine.pressure import CpuCounters, PressureFacts
    from parinfo.machine.topology import MachineFacts

#: What a process this user may not read gets for its pools (the same words as a count read from memory).
NO_PERMISSION = f"unknown ({PERMISSION})"

_PF_KTHREAD = 0x00200000  # task flag of a kernel thread (include/linux/sched.h)
_DIGITS = re.compile(r"\d+")


def check_interval(interval: float) -> float:
    """``interval`` as seconds; UsageError unless it is a number from 0 to 3600."""
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 <= interval <= 3600:
        raise UsageError(f"interval {interval!r}: give seconds from 0 to 3600")
    return float(interval)


@functools.cache
def _runtime_paths() -> re.Pattern[bytes]:
    """Lines of a maps file whose path's file name starts like a thread runtime's (the registry's
    prefixes); :func:`parinfo.process.pools.classify` decides on each path found."""
    prefixes = sorted({p for r in reg.records() for p in r.prefixes})
    names = b"|".join(re.escape(p.encode()) for p in prefixes)
    return re.compile(rb"(/[^\n]*/(?:" + names + rb")[^/\n]*\.so[^/\n]*)$", re.MULTILINE | re.IGNORECASE)


def pools_in_maps(maps: bytes) -> list[dict[str, Any]]:
    """One row per thread runtime file mapped (a :class:`~parinfo.process.pools.PoolRow` as a dict,
    copies marked), from the bytes of a /proc/PID/maps."""
    from parinfo.process.pools import PoolRow, classify, mark_duplicates

    rows = []
    for raw in dict.fromkeys(m.group(1) for m in _runtime_paths().finditer(maps)):
        path = raw.decode("utf-8", "replace")
        family = classify(path)
        if family is not None:
            rows.append(PoolRow.of_file(path, family, seen_by="/proc/PID/maps", note=None).to_dict())
    mark_duplicates(rows)
    return rows


def _read_stat(path: str) -> bytes:
    """A /proc stat file in one read: it is one short line (a few hundred bytes), and a second read
    to meet its end would double the cost of a scan over thousands of threads."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=4096)
def _group_of(raw: bytes) -> str:
    """The thread group of a raw thread name (names repeat: one decode and match per name)."""
    return thread_group(raw.decode("utf-8", "replace"))


def _parse_stat(data: bytes) -> tuple[str, str, int, int, int, int]:
    """(name, state, ppid, flags, utime+stime ticks, start time) of a /proc stat line."""
    close = data.rindex(b")")
    rest = data[close + 2:].split()
    return (data[data.index(b"(") + 1:close].decode("utf-8", "replace"), rest[0].decode(), int(rest[1]),
            int(rest[6]), int(rest[11]) + int(rest[12]), int(rest[19]))


@functools.cache
def _user(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _uid_of(name: str) -> int:
    import pwd

    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        if name.isdigit():
            return int(name)
        raise UsageError(f"--user {name!r}: no such user (give a user name or a numeric uid)") from None


def _why(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return NO_PERMISSION
    return f"unknown ({exc.strerror or exc})"


@record
class _Static:
    """What stays while one process lives: read once per (pid, start time, name)."""

    args: tuple[str, ...]
    command: str
    uid: int
    environ: dict[str, str] | str  # its thread variables at launch, or "unknown (why)"
    maps: bytes | None = None
    pools: list[dict[str, Any]] | str | None = None  # rows of pools_in_maps, or "unknown (why)"
    symbol_maps: str | None = None  # the maps lines of its pools whose count can be read from memory


@record
class _CgroupInfo:
    """One cgroup membership (the text of /proc/PID/cgroup) and the cgroup whose limit binds it."""

    path: str
    key: str
    quota: float | None
    cpuset: tuple[int, ...] | None
    usable: int
    pid: int  # a process in it, to read its counters through


@record
class _Reading:
    clock: float
    ticks: dict[tuple[int, int], int]  # (pid, start time) -> CPU ticks
    counters: dict[str, CpuCounters]
    pressure: dict[str, PressureFacts]


def _own_pressure(key: str, a: PressureFacts, b: PressureFacts, dt: float) -> float | str:
    """Cgroup ``key``'s CPU pressure over the interval, when the v2 cgroup its processes' pressure
    was read from is ``key`` itself; a v1 cgroup has no pressure file, and the figure of the v2
    cgroup its processes sit in (often the root: the whole machine) is not its own."""
    from parinfo.watching.sample import pressure_percent

    if b.cgroup_dir is None or os.path.realpath(b.cgroup_dir) != os.path.realpath(key):
        where = f"its processes' v2 cgroup is {b.cgroup_dir}" if b.cgroup_dir else "no v2 cgroup"
        return f"unknown (no CPU pressure file of its own: {where})"
    return pressure_percent(a.cgroup, b.cgroup, dt)


class Scanner:
    """Scans of the processes (of ``user``, in ``cgroup``), each made against the previous one:
    CPU use, throttling and pressure are counted over the time between them."""

    def __init__(self, cgroup: str | None = None, user: str | None = None) -> None:
        from parinfo.machine.topology import machine_facts

        self.uid = None if user is None else _uid_of(user)
        self.user = user
        self.facts: MachineFacts = machine_facts()
        self.cgroup = None if cgroup is None else self._cgroup_path(cgroup)
        self.cgroup_given = cgroup
        self._static: dict[tuple[int, int, str], _Static] = {}
        self._cgroups: dict[bytes, _CgroupInfo] = {}
        self._last: _Reading | None = None

    @property
    def counters(self) -> dict[str, CpuCounters]:
        """The cumulative throttling counters the last scan read, by cgroup row (``CgroupRow.path``;
        rows with a quota only), each level with a quota from the row's cgroup up: what
        ``host --serve`` exports as counters, never reset between scans."""
        return {} if self._last is None else dict(self._last.counters)

    # -- the pieces of one process --------------------------------------------------------------

    @staticmethod
    def _cgroup_path(given: str) -> str:
        """A cgroup as /proc/PID/cgroup names it ("/demo"), from that form or a directory under a
        cgroup mount ("/sys/fs/cgroup/cpu/demo"); UsageError when neither names a cgroup."""
        from parinfo.machine.cgroup import _mounts
        from parinfo.machine.sysfs import Unreadable, read

        path = "/" + given.strip().strip("/")
        try:
            mounts = _mounts(read("/", "proc/self/mountinfo"))
        except Unreadable:
            mounts = []
        for m in sorted(mounts, key=lambda m: -len(m.point)):
            point = "/" + m.point
            if path == point or path.startswith(point + "/"):
                if not os.path.isdir(path):
                    break
                return "/" + path[len(point):].strip("/")
        if any(os.path.isdir(os.path.join("/", m.point, path.lstrip("/"))) for m in mounts) or path == "/":
            return path
        raise UsageError(f"--cgroup {given!r}: no such cgroup (give its path as /proc/PID/cgroup shows it, "
                         f"e.g. /system.slice/app.service, or its directory under /sys/fs/cgroup)")

    def _static_of(self, pid: int, key: tuple[int, int, str]) -> _Static | None:
        static = self._static.get(key)
        if static is not None:
            return static
        try:
            raw = read_bytes(f"/proc/{pid}/cmdline", 1 << 20)
            uid = os.stat(f"/proc/{pid}").st_uid
            with open(f"/proc/{pid}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Uid:"):
                        uid = int(line.split()[1])  # the real uid (the directory shows the effective one)
                        break
        except (FileNotFoundError, ProcessLookupError):
            return None
        except OSError:
            raw = b""
            uid = -1
        args = tuple(a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0") if a)
        from parinfo.safe_text import escape_controls

        command = escape_controls(shlex.join(args)) if args else f"[{key[2]}]"
        environ: dict[str, str] | str
        try:
            env: dict[str, str] = {}
            for item in read_bytes(f"/proc/{pid}/environ", 1 << 22).decode("utf-8", "surrogateescape").split("\0"):
                name, sep, value = item.partition("=")
                if sep and name in reg.THREAD_VARS:
                    env.setdefault(name, value)
            environ = env
        except (FileNotFoundError, ProcessLookupError):
            return None
        except OSError as exc:
            environ = _why(exc)
        static = _Static(args, command, uid, environ)
        self._static[key] = static
        return static

    def _cgroup_of(self, pid: int) -> _CgroupInfo | None:
        try:
            raw = read_bytes(f"/proc/{pid}/cgroup")
        except OSError:
            return None
        info = self._cgroups.get(raw)
        if info is None:
            info = self._cgroups[raw] = self._binding(pid)
        return info

    def _binding(self, pid: int) -> _CgroupInfo:
        """The cgroup whose CPU limit binds ``pid``: where its tightest quota is set, else the
        nearest cpuset narrower than the machine, else "/" (the machine)."""
        from parinfo.machine.cgroup import cgroup_facts
        from parinfo.machine.topology import usable_from

        cg = cgroup_facts("/", pid)
        online = self.facts.logical_cpus or len(self.facts.affinity) or 1
        narrower = cg.cpuset is not None and len(cg.cpuset) < online
        if cg.quota is not None:
            key = os.path.dirname(cg.quota_source)
        elif narrower:
            key = os.path.dirname(cg.cpuset_source.split(", ")[0])
        else:
            key = "/"
        cpus = len(cg.cpuset) if cg.cpuset is not None else online
        return _CgroupInfo(cg.path or "/", key, cg.quota, cg.cpuset if narrower else None,
                           usable_from(cpus, None, cg.quota), pid)

    def _pools(self, pid: int, static: _Static) -> list[dict[str, Any]] | str:
        try:
            maps = read_bytes(f"/proc/{pid}/maps", 1 << 26)
        except OSError as exc:
            return _why(exc)
        if static.pools is None or maps != static.maps:
            static.maps, static.pools = maps, pools_in_maps(maps)
            static.symbol_maps = _symbol_lines(maps, static.pools)
        return static.pools if static.pools is not None else []

    def _counts(self, pid: int, rows: list[dict[str, Any]], static: _Static,
                facts: MachineFacts) -> list[PoolCount]:
        """Each pool's count: in force where it can be read from the process's memory, else what its
        launch environment asks for (said so), else unknown."""
        from parinfo.process.provenance import model_of, predict

        read = _in_force(pid, static.symbol_maps)
        out = []
        for row in rows:
            library, path = row["library"], row["filepath"]
            count, source, in_force = None, "", False
            found = read.get(path)
            if found is not None and found[0] is not None:
                count, source, in_force = found[0], IN_FORCE, True
            elif found is not None and PERMISSION in found[1]:
                source = found[1]  # the launch environment would be a guess: memory is closed to us
            elif isinstance(static.environ, str):
                source = static.environ
            else:
                lib = reg.find(library)
                if lib is not None:
                    guess = predict(model_of(lib), static.environ, facts)
                    count = guess.count
                    source = (f"from its launch environment ({guess.phrase}); {FROM_LAUNCH}"
                              if count is not None else guess.phrase)
                else:
                    source = f"unknown (parinfo has no record for {library})"
            out.append(PoolCount(library, path, row.get("owner") or "unknown", count, source, in_force,
                                 row.get("duplicate_of")))
        return out

    # -- one scan ---------------------------------------------------------------------------------

    def scan(self) -> HostReport:
        """One reading of every process in scope, judged; counted over the time since the last one."""
        started = time.perf_counter()
        clock = time.monotonic()
        before = self._last
        dt = None if before is None else max(clock - before.clock, 1e-6)
        processes: list[HostProcess] = []
        ticks: dict[tuple[int, int], int] = {}
        reps: dict[str, _CgroupInfo] = {}
        kernel_threads = kernel_runnable = 0
        seen: set[tuple[int, int, str]] = set()
        try:
            entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
        except OSError as exc:
            raise UsageError(f"cannot list /proc: {exc.strerror or exc}") from None
        for pid in entries:
            try:
                name, state, ppid, flags, cpu, start = _parse_stat(_read_stat(f"/proc/{pid}/stat"))
            except (OSError, ValueError, IndexError):
                continue  # exited meanwhile
            if flags & _PF_KTHREAD or pid == 2:
                kernel_threads += 1
                kernel_runnable += state == "R"
                continue
            if state in ("Z", "X"):
                continue
            key = (pid, start, name)
            static = self._static_of(pid, key)
            if static is None:
                continue
            seen.add(key)
            if self.uid is not None and static.uid != self.uid:
                continue
            cg = self._cgroup_of(pid)
            if cg is None:
                continue
            if self.cgroup is not None and self.cgroup != "/" and not (
                    cg.path == self.cgroup or cg.path.startswith(self.cgroup + "/")):
                continue
            row = self._process(pid, ppid, name, static, cg)
            if row is None:
                continue
            ticks[(pid, start)] = cpu
            if before is not None and dt is not None and (pid, start) in before.ticks:
                row.cpu_percent = round((cpu - before.ticks[(pid, start)]) / CLOCK_TICKS / dt * 100, 1)
            reps.setdefault(cg.key, cg)
            processes.append(row)
        for gone in set(self._static) - seen:
            del self._static[gone]
        families = _families(processes)
        report = HostReport(time=time.time(), interval=None if dt is None else round(dt, 3),
                            scope={"cgroup": self.cgroup_given, "user": self.user},
                            logical_cpus=self.facts.logical_cpus, processes=processes, families=families,
                            kernel_threads=kernel_threads, kernel_runnable=kernel_runnable)
        reading = self._judge(report, reps, clock, ticks, before, dt)
        self._last = reading
        report.elapsed_ms = round((time.perf_counter() - started) * 1e3, 2)
        return report

    def _process(self, pid: int, ppid: int, name: str, static: _Static, cg: _CgroupInfo) -> HostProcess | None:
        try:
            affinity = os.sched_getaffinity(pid)
        except ProcessLookupError:
            return None
        except OSError:
            affinity = set(self.facts.affinity)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return None
        states: dict[str, int] = {}
        by_raw: dict[bytes, list[int]] = {}
        task = f"/proc/{pid}/task/"
        for tid in tids:
            try:
                data = _read_stat(task + tid + "/stat")
                close = data.rindex(b")")
            except (OSError, ValueError):
                continue  # the thread ended
            state = chr(data[close + 2])
            states[state] = states.get(state, 0) + 1
            counts = by_raw.get(raw := data[data.index(b"(") + 1:close])
            if counts is None:
                counts = by_raw[raw] = [0, 0]
            counts[0] += 1
            counts[1] += state == "R"
        if not states:
            return None
        by_name: dict[str, list[int]] = {}
        for raw, (n, r) in by_raw.items():
            group = by_name.setdefault(_group_of(raw), [0, 0])
            group[0] += n
            group[1] += r
        cpus = cg.cpuset
        usable_list = [c for c in affinity if cpus is None or c in cpus] or sorted(affinity)
        from parinfo.machine.topology import usable_from

        usable = usable_from(len(usable_list), None, cg.quota)
        maps = self._pools(pid, static)
        pools: list[PoolCount] = []
        unknown = None
        if isinstance(maps, str):
            unknown = maps
        elif maps:
            facts = dataclasses.replace(self.facts, affinity=tuple(sorted(affinity)), cpuset=cg.cpuset,
                                        quota=cg.quota, usable_cpus=usable)
            pools = self._counts(pid, maps, static, facts)
        multi = sorted({p.library for p in pools if not p.duplicate_of})
        own = thread_group(name)
        groups = [ThreadGroup(n, v[0], v[1], ", ".join(multi) if n == own and multi else None)
                  for n, v in sorted(by_name.items(), key=lambda kv: (-kv[1][1], -kv[1][0], kv[0]))]
        return HostProcess(
            pid=pid, ppid=ppid, name=name, command=static.command, user=_user(static.uid) if static.uid >= 0 else "?",
            cgroup=cg.path, group=cg.key, usable_cpus=usable, affinity=len(affinity), pools=pools,
            pools_unknown=unknown, threads=sum(states.values()), states=states, runnable_now=states.get("R", 0),
            groups=groups)

    def _judge(self, report: HostReport, reps: Mapping[str, _CgroupInfo], clock: float,
               ticks: dict[tuple[int, int], int], before: _Reading | None, dt: float | None) -> _Reading:
        """Fill the report's cgroup rows and findings; return this reading's counters."""
        from parinfo.machine.pressure import cpu_counters, cpu_pressure
        from parinfo.watching.sample import pressure_percent, throttle_use

        counters: dict[str, CpuCounters] = {}
        pressure: dict[str, PressureFacts] = {}
        by_group: dict[str, list[HostProcess]] = {}
        for p in report.processes:
            by_group.setdefault(p.group, []).append(p)
        families = {f.key: f for f in report.families}
        for key in sorted(by_group, key=lambda k: (k != "/", k)):
            info, members = reps[key], by_group[key]
            pressure[key] = cpu_pressure("/", info.pid)
            row = CgroupRow(key, info.quota, info.cpuset, info.usable, [p.pid for p in members],
                            sum(p.threads for p in members), sum(p.runnable_now for p in members))
            row.threads_at_once = sum(p.threads_at_once or 0 for p in members if p.pools)
            row.unknown_pids = [p.pid for p in members if p.pools_unknown is not None]
            if info.quota is not None:
                counters[key] = cpu_counters("/", info.pid)
            else:
                row.throttling_unknown = "none: no CPU quota on this cgroup or its ancestors"
            if before is not None and dt is not None:
                row.cpu_percent = round(sum(p.cpu_percent or 0.0 for p in members), 1)
                if key in counters and key in before.counters:
                    row.throttling, why = throttle_use(before.counters[key], counters[key], dt)
                    row.throttling_unknown = why
                if key in before.pressure:
                    a, b = before.pressure[key], pressure[key]
                    row.pressure_some = (pressure_percent(a.system, b.system, dt) if key == "/" else
                                         _own_pressure(key, a, b, dt))
            loads = [_load(p, families) for p in members if p.pools or p.pools_unknown is not None]
            row.findings = fleet_rules.cgroup_findings(
                "the machine" if key == "/" else f"cgroup {key}", row.usable_cpus, loads)
            report.cgroups.append(row)
        both = [k for k in pressure if before is not None and k in before.pressure]
        if before is not None and dt is not None and both:  # every reading holds the machine's too
            report.pressure_some = pressure_percent(before.pressure[both[0]].system, pressure[both[0]].system, dt)
        report.processes.sort(key=lambda p: (p.group != "/", p.group, -(p.threads_at_once or 0), p.pid))
        return _Reading(clock, ticks, counters, pressure)


def _load(p: HostProcess, families: Mapping[str, Family]) -> ProcessLoad:
    library, count = p.widest
    unknown = p.pools_unknown or (next(x.source for x in p.pools if x.count is None) if count is None else None)
    family = families.get(p.family or "")
    variables = []
    for pool in p.pools:
        lib = reg.find(pool.library)
        if lib is not None and lib.count_vars and pool.count is not None and pool.count > 1:
            variables.append(lib.count_vars[0])
    return ProcessLoad(p.pid, p.name, library, count, p.outer_threads, p.ppid,
                       tuple(family.pids) if family is not None else (p.pid,), p.command,
                       tuple(dict.fromkeys(variables)), unknown)


def _families(processes: list[HostProcess]) -> list[Family]:
    """Processes with one parent and one command, two or more of them. Numbers in the command are
    masked: workers that differ by a pipe handle or an index (``spawn_main(pipe_handle=11)``,
    ``--process-name LokyProcess-3``) run one command."""
    groups: dict[tuple[int, str], list[HostProcess]] = {}
    for p in processes:
        groups.setdefault((p.ppid, _DIGITS.sub("#", p.command)), []).append(p)
    out = []
    for (parent, _), members in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[1][0].pid)):
        if len(members) < 2 or parent < 1:
            continue
        key = f"{parent}:{members[0].pid}"
        for p in members:
            p.family = key
        out.append(Family(key, parent, members[0].command, sorted(p.pid for p in members)))
    return out


def _symbol_lines(maps: bytes, rows: list[dict[str, Any]]) -> str | None:
    """The lines of a maps file that map the pools among ``rows`` whose library keeps its count where
    it can be read from outside (the registry's ``count_symbol``), or None when none does. Reading the counts
    needs those lines only: kept per maps version, they spare each scan a parse of the whole file."""
    paths = {r["filepath"].removesuffix(" (deleted)") for r in rows  # maps names a file deleted after load so
             if (lib := reg.find(r["library"])) is not None and lib.count_symbol is not None}
    if not paths:
        return None
    text = maps.decode("utf-8", "surrogateescape")
    return "\n".join(line for line in text.splitlines()
                     if line.split(None, 5)[-1].removesuffix(" (deleted)") in paths)


def _in_force(pid: int, symbol_maps: str | None) -> dict[str, tuple[int | None, str]]:
    """{library file: (count or None, source)}: each count read from the process's memory
    (:mod:`parinfo.process.inforce`) for the files of ``symbol_maps`` (:func:`_symbol_lines`); {}
    when there are none (nothing is read then)."""
    if symbol_maps is None:
        return {}
    from parinfo.process.inforce import counts_in_force
    from parinfo.process.tasks import NoAccess, ProcessGone

    try:
        found = counts_in_force(pid, symbol_maps)
    except (ProcessGone, NoAccess):
        return {}
    return {c.mapped_as: (c.count, c.source) for c in found}
