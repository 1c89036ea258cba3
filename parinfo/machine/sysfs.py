"""Reading procfs/sysfs files under a root, and the CPU topology that sysfs describes.

Every reader raises :class:`Unreadable` with a one-line reason ("cannot read /sys/...: No such file
or directory", "garbage in /sys/...: 'x'"); callers turn that into an "unknown (reason)" field.
Paths in reasons are shown as they are on the machine (relative to ``root``), not as the test tree's.
"""
from __future__ import annotations

import os
import re
from dataclasses import field
from functools import lru_cache

from parinfo.machine.cpulist import parse_cpu_list
from parinfo.records.record import record

_CPU = "sys/devices/system/cpu"


class Unreadable(Exception):
    """A file that is missing, unreadable, empty or holds garbage; ``str()`` is the reason."""


class Missing(Unreadable):
    """A file that does not exist (the kernel lacks the feature, or the tree lacks the file)."""


class Empty(Unreadable):
    """A file that exists and holds nothing (a NUMA node without CPUs has an empty cpulist)."""


def shown(rel: str) -> str:
    """The path as it would appear on the machine."""
    return "/" + rel.lstrip("/")


def read_bytes(path: str | bytes, limit: int = 1 << 20, stop: bytes | None = None) -> bytes:
    """The bytes of ``path`` (at most ``limit``; up to ``stop`` when given), read with plain system
    calls: a buffered text file costs several times more per small sysfs file."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        size = 0
        while size < limit:
            chunk = os.read(fd, min(65536, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if stop is not None and stop in chunk:
                break
        return b"".join(chunks)
    finally:
        os.close(fd)


def read(root: str, rel: str) -> str:
    """The stripped text of ``root/rel``; raise Unreadable when missing, unreadable or empty."""
    try:
        text = read_bytes(os.path.join(root, rel)).decode("utf-8", "replace").strip()
    except OSError as exc:
        kind = Missing if isinstance(exc, FileNotFoundError) else Unreadable
        raise kind(f"cannot read {shown(rel)}: {exc.strerror or exc}") from None
    if not text:
        raise Empty(f"{shown(rel)} is empty")
    return text


def garbage(rel: str, text: str) -> Unreadable:
    """The error for a file whose content makes no sense."""
    snippet = text if len(text) <= 40 else text[:37] + "..."
    return Unreadable(f"unexpected content in {shown(rel)}: {snippet!r}")


def read_int(root: str, rel: str) -> int:
    text = read(root, rel)
    try:
        return int(text)
    except ValueError:
        raise garbage(rel, text) from None


def read_cpu_list(root: str, rel: str) -> tuple[int, ...]:
    text = read(root, rel)
    try:
        return tuple(parse_cpu_list(text))
    except ValueError:
        raise garbage(rel, text) from None





@record(frozen=True)
class Topology:
    """What sysfs says about the CPUs; fixed for the life of the process (cached per root)."""

    online: tuple[int, ...] | None
    cores: tuple[tuple[int, ...], ...]  # logical CPUs of each physical core, () when unknown
    sockets: int | None
    numa_nodes: tuple[tuple[int, ...], ...]
    core_types: dict[str, tuple[int, ...]]
    smt: bool | None
    unknown: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    numa_node_ids: tuple[int, ...] = ()  # the kernel's number of each of numa_nodes


@lru_cache(maxsize=32)
def topology(root: str) -> Topology:
    """Read the topology under ``root`` (an absolute path); see Topology. Never raises."""
    unknown: dict[str, str] = {}
    notes: list[str] = []
    online = _online(root, unknown, notes)
    cores: tuple[tuple[int, ...], ...] = ()
    sockets = None
    if online is not None:
        cores = _cores(root, online, unknown)
        sockets = _sockets(root, online, unknown)
    smt = _smt(root, cores, unknown)
    node_ids, nodes = _numa(root, unknown)
    return Topology(
        online=online,
        cores=cores,
        sockets=sockets,
        numa_nodes=nodes,
        core_types=_core_types(root, online or ()),
        smt=smt,
        unknown=unknown,
        notes=tuple(notes),
        numa_node_ids=node_ids,
    )


def _online(root: str, unknown: dict[str, str], notes: list[str]) -> tuple[int, ...] | None:
    reasons = []
    for name in ("online", "present"):
        try:
            return read_cpu_list(root, f"{_CPU}/{name}")
        except Unreadable as exc:
            reasons.append(str(exc))
    n = os.cpu_count() if root == "/" else None
    if n:
        notes.append(f"logical CPUs from os.cpu_count(): {reasons[0]}")
        return tuple(range(n))
    unknown["logical_cpus"] = "; ".join(reasons)
    return None


def _cores(root: str, online: tuple[int, ...], unknown: dict[str, str]) -> tuple[tuple[int, ...], ...]:
    """Group the online CPUs by physical core: by their sibling lists, else by (package, die, core id)."""
    online_set = set(online)
    keys: dict[int, object] = {}
    try:
        for cpu in online:
            keys[cpu] = _siblings(root, cpu, online_set)
    except Unreadable as first:
        try:
            for cpu in online:
                keys[cpu] = (_package(root, cpu), _die(root, cpu),
                             read_int(root, f"{_CPU}/cpu{cpu}/topology/core_id"))
        except Unreadable:
            unknown["physical_cores"] = str(first)
            return ()
    groups: dict[object, list[int]] = {}
    for cpu in online:
        groups.setdefault(keys[cpu], []).append(cpu)
    return tuple(sorted(tuple(g) for g in groups.values()))


def _siblings(root: str, cpu: int, online: set[int]) -> frozenset[int]:
    base = f"{_CPU}/cpu{cpu}/topology"
    try:
        rel = f"{base}/core_cpus_list"
        sib = read_cpu_list(root, rel)
    except Unreadable:
        rel = f"{base}/thread_siblings_list"
        sib = read_cpu_list(root, rel)
    if cpu not in sib:
        raise Unreadable(f"{shown(rel)} does not list cpu{cpu} itself")
    return frozenset(sib) & online


def _package(root: str, cpu: int) -> int:
    return read_int(root, f"{_CPU}/cpu{cpu}/topology/physical_package_id")


def _die(root: str, cpu: int) -> int:
    try:
        return read_int(root, f"{_CPU}/cpu{cpu}/topology/die_id")
    except Unreadable:
        return 0


def _sockets(root: str, online: tuple[int, ...], unknown: dict[str, str]) -> int | None:
    packages = set()
    for cpu in online:
        try:
            packages.add(_package(root, cpu))
        except Unreadable as exc:
            unknown["sockets"] = str(exc)
            return None
    return len(packages)


def _smt(root: str, cores: tuple[tuple[int, ...], ...], unknown: dict[str, str]) -> bool | None:
    if cores:
        return any(len(c) > 1 for c in cores)
    try:
        text = read(root, f"{_CPU}/smt/active")
    except Unreadable as exc:
        unknown["smt"] = str(exc)
        return None
    if text not in ("0", "1"):
        unknown["smt"] = str(garbage(f"{_CPU}/smt/active", text))
        return None
    return text == "1"


_NODE = re.compile(r"^node(\d+)$")


def _numa(root: str, unknown: dict[str, str]) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """The numbers and CPU lists of the NUMA nodes that have CPUs (memory-only nodes are left out)."""
    rel = "sys/devices/system/node"
    try:
        names = os.listdir(os.path.join(root, rel))
    except OSError as exc:
        unknown["numa_nodes"] = f"cannot list {shown(rel)}: {exc.strerror or exc}"
        return (), ()
    nodes = sorted((int(m.group(1)), name) for name in names if (m := _NODE.match(name)))
    ids, out = [], []
    for number, name in nodes:
        try:
            out.append(read_cpu_list(root, f"{rel}/{name}/cpulist"))
        except Empty:
            continue  # a node with memory and no CPU
        except Unreadable as exc:
            unknown["numa_nodes"] = str(exc)
            return (), ()
        ids.append(number)
    if not out:
        unknown["numa_nodes"] = f"no NUMA node with CPUs under {shown(rel)}"
    return tuple(ids), tuple(out)


def _core_types(root: str, online: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """Hybrid core types: Intel's cpu_core/cpu_atom PMUs, else ARM's differing cpu_capacity."""
    types: dict[str, tuple[int, ...]] = {}
    for name, pmu in (("performance", "cpu_core"), ("efficiency", "cpu_atom")):
        try:
            types[name] = read_cpu_list(root, f"sys/devices/{pmu}/cpus")
        except Unreadable:
            pass
    if len(types) == 2:
        return types
    capacity: dict[int, list[int]] = {}
    for cpu in online:
        try:
            capacity.setdefault(read_int(root, f"{_CPU}/cpu{cpu}/cpu_capacity"), []).append(cpu)
        except Unreadable:
            return {}
    if len(capacity) < 2:
        return {}
    levels = sorted(capacity)
    out: dict[str, tuple[int, ...]] = {}
    for level in reversed(levels):
        if level == levels[-1]:
            name = "performance"
        elif level == levels[0]:
            name = "efficiency"
        else:
            name = f"capacity-{level}"
        out[name] = tuple(capacity[level])
    return out
