"""A process's NUMA memory policy: read it (this thread's, or another process's from outside) and set it.

The kernel keeps one policy per thread (``set_mempolicy``), copied to every thread and process it
starts, and kept across ``execve``: so a launcher sets it on its own thread just before it starts
a program, and the program's memory then comes from those nodes. A process's policy is read:

- for this thread, with ``get_mempolicy`` (exact: mode and nodes);
- for another process, from ``/proc/PID/numa_maps``: each mapping's line names the policy that
  serves it (the thread's own where the mapping has none). That file can be huge and costs the
  kernel a page-table walk per mapping, so only a bounded prefix is read, and the policy most of
  its mappings show is the process's;
- the nodes the process may use at all (its cpuset), from ``Mems_allowed_list`` in
  ``/proc/PID/status``.

Anything that cannot be read is "unknown (why)"; a kernel without NUMA support has no policy to read.
"""
from __future__ import annotations

import os
import re
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Annotated

from parinfo.machine.cpulist import format_cpu_list, parse_cpu_list
from parinfo.machine.procfs import Proc, ProcessGone, this_or
from parinfo.records.field_marks import between
from parinfo.records.record import record
from parinfo.records.source import Kind, Source, unknown
from parinfo.records.unknown import Unknown

# Modes of include/uapi/linux/mempolicy.h.
MPOL_DEFAULT = 0
MPOL_PREFERRED = 1
MPOL_BIND = 2
MPOL_INTERLEAVE = 3
MPOL_LOCAL = 4
MPOL_PREFERRED_MANY = 5
MPOL_WEIGHTED_INTERLEAVE = 6

#: How numa_maps names each mode (mm/mempolicy.c, policy_modes[]).
MODE_WORDS = {MPOL_DEFAULT: "default", MPOL_PREFERRED: "prefer", MPOL_BIND: "bind",
              MPOL_INTERLEAVE: "interleave", MPOL_LOCAL: "local", MPOL_PREFERRED_MANY: "prefer (many)",
              MPOL_WEIGHTED_INTERLEAVE: "weighted interleave"}
_MODE_FLAGS = 0xFFFF << 16  # MPOL_F_STATIC_NODES and friends, or-ed into the mode

# (get_mempolicy, set_mempolicy) system call numbers of the architectures parinfo knows.
_SYSCALLS = {"x86_64": (239, 238), "aarch64": (236, 237)}
_NODE_BITS = 4096  # nodes a mask can name (the kernel's MAX_NUMNODES is at most 1024)

#: How much of /proc/PID/numa_maps is read: enough for the mappings of a large program's start.
NUMA_MAPS_LIMIT = 1 << 16

_LINE = re.compile(r"^[0-9a-f]+ (default|local|prefer \(many\)|weighted interleave|prefer|bind|interleave)"
                   r"(?:=(?:static|relative))?(?::([0-9,-]+))?(?:\s|$)")


class PolicyError(OSError):
    """The policy cannot be read or set here; ``str()`` says why in a few words. ``errno`` is set
    when the kernel refused, None when the call could not be made at all."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


@record(frozen=True)
class MemoryPolicy:
    """A process's NUMA memory policy: the report's ``memory`` section.

    - ``policy``: the mode as numa_maps words it (default, bind, interleave, prefer, local, ...), or
      None when unknown (``source`` then says why);
    - ``nodes``: the nodes the policy names (empty for default and local);
    - ``allowed``: the nodes the process may use at all (its cpuset's mems), None when unknown;
    - ``source`` and ``allowed_source``: where each was read;
    - ``note``: what else was seen (mappings under another policy).
    """

    policy: str | None = None
    nodes: tuple[Annotated[int, between(0)], ...] = ()
    allowed: tuple[Annotated[int, between(0)], ...] | None = None
    source: Source = unknown("not read")
    allowed_source: Source = unknown("not read")
    note: str | None = None

    @property
    def text(self) -> str:
        """``bind:0-1`` as numa_maps writes it, ``default``, or ``unknown (why)``."""
        if self.policy is None:
            return str(self.source)
        return f"{self.policy}:{format_cpu_list(self.nodes)}" if self.nodes else self.policy


def _syscall(index: int) -> tuple[object, int]:
    """libc's syscall() and the number of get_mempolicy (0) or set_mempolicy (1) on this machine."""
    machine = os.uname().machine if hasattr(os, "uname") else ""
    numbers = _SYSCALLS.get(machine) if sys.platform.startswith("linux") else None
    if numbers is None:
        raise PolicyError(f"parinfo does not know the memory-policy system calls of {machine or sys.platform}")
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall, numbers[index]
    except (OSError, AttributeError) as exc:
        raise PolicyError(f"no syscall() in the C library ({exc})") from None


def _mask(nodes: Sequence[int]) -> object:
    import ctypes

    words = (ctypes.c_ulong * (_NODE_BITS // (8 * ctypes.sizeof(ctypes.c_ulong))))()
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    for node in nodes:
        if not 0 <= node < _NODE_BITS:
            raise PolicyError(f"node {node} is outside 0-{_NODE_BITS - 1}")
        words[node // bits] |= 1 << (node % bits)
    return words


def _failure(call: str, err: int) -> PolicyError:
    import errno

    why = os.strerror(err)
    if err == errno.ENOSYS:
        why = "the kernel has no NUMA support"
    elif err == errno.EPERM:
        why = "not permitted (a container's system-call filter?)"
    elif err == errno.EINVAL:
        why = "refused (a node outside this process's cpuset, or not online)"
    return PolicyError(err, f"{call}: {why}")


def set_policy(mode: int, nodes: Sequence[int]) -> None:
    """Set the calling thread's policy (inherited by every thread and process it starts from now on,
    and kept across exec); PolicyError says why it could not."""
    import ctypes

    call, number = _syscall(1)
    mask = _mask(nodes) if nodes else None
    maxnode = _NODE_BITS + 1 if nodes else 0  # the kernel counts one bit fewer than it is given
    if call(ctypes.c_long(number), ctypes.c_int(mode), mask, ctypes.c_ulong(maxnode)) != 0:  # type: ignore[operator]
        raise _failure("set_mempolicy", ctypes.get_errno())


def get_policy() -> tuple[int, tuple[int, ...]]:
    """The calling thread's (mode, nodes); PolicyError says why it could not be read."""
    import ctypes

    call, number = _syscall(0)
    mode = ctypes.c_int(0)
    mask = (ctypes.c_ulong * (_NODE_BITS // (8 * ctypes.sizeof(ctypes.c_ulong))))()
    if call(ctypes.c_long(number), ctypes.byref(mode), mask, ctypes.c_ulong(_NODE_BITS), None,  # type: ignore[operator]
            ctypes.c_ulong(0)) != 0:
        raise _failure("get_mempolicy", ctypes.get_errno())
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    nodes = tuple(i * bits + b for i, word in enumerate(mask) for b in range(bits) if word >> b & 1)
    return mode.value & ~_MODE_FLAGS, nodes


def parse_numa_maps(data: bytes) -> tuple[str | None, tuple[int, ...], str | None]:
    """(policy, nodes, note) from a prefix of numa_maps: the policy most mappings show; None when no
    line could be read. A partial last line (the prefix's cut) is left out."""
    text = data.decode("ascii", "replace")
    lines = text.split("\n")
    if not text.endswith("\n"):
        lines = lines[:-1]
    seen: Counter[tuple[str, str]] = Counter()
    for line in lines:
        m = _LINE.match(line)
        if m:
            seen[(m.group(1), m.group(2) or "")] += 1
    if not seen:
        return None, (), None
    (word, nodes_text), count = seen.most_common(1)[0]
    try:
        nodes = tuple(parse_cpu_list(nodes_text)) if nodes_text else ()
    except ValueError:
        return None, (), None
    note = None
    if len(seen) > 1:
        others = ", ".join(f"{w}:{n}" if n else w for (w, n), _ in seen.most_common()[1:4])
        note = f"{count} of {sum(seen.values())} mappings read; others: {others}"
    return word, nodes, note


def memory_policy(handle: Proc | None = None, root: str = "/") -> MemoryPolicy:
    """The memory policy of process ``handle`` (None: this one, read for the calling thread) and the
    nodes it may use; "unknown (why)" parts, never an exception but ProcessGone for a process that has
    gone (a one-line usage error)."""
    proc = this_or(handle, root)
    policy: str | None = None
    nodes: tuple[int, ...] = ()
    note = None
    if handle is None and root == "/":
        try:
            mode, nodes = get_policy()
            policy = MODE_WORDS.get(mode, f"mode {mode}")
            source = Source(Kind.GETTER, "get_mempolicy", "get_mempolicy, this thread")
        except PolicyError as exc:
            source = unknown(str(exc))
    else:
        where = proc.shown("numa_maps")
        raw = _read(proc, "numa_maps", NUMA_MAPS_LIMIT, "a kernel without NUMA support")
        if isinstance(raw, Unknown):
            source = unknown(raw.why)
        elif not raw:
            source = unknown(f"{where} is empty (a kernel without NUMA support, or no mappings)")
        else:
            policy, nodes, note = parse_numa_maps(raw)
            source = Source(Kind.FILE, where) if policy else unknown(f"no policy in the first lines of {where}")
    allowed, allowed_source = _allowed(proc)
    return MemoryPolicy(policy, nodes, allowed, source, allowed_source, note)


def _read(proc: Proc, name: str, limit: int, missing: str) -> bytes | Unknown:
    """A bounded read of one of the process's files, or Unknown saying why it could not be read
    (``missing``: why the file may not exist); ProcessGone only when another process has gone (this
    one's missing file is only missing)."""
    try:
        return proc.read_or_why(name, limit)
    except ProcessGone:
        if proc.pid is not None and not proc.exists():
            raise
        return Unknown(f"{proc.shown(name)} does not exist ({missing})")


def _allowed(proc: Proc) -> tuple[tuple[int, ...] | None, Source]:
    where = proc.shown("status")
    raw = _read(proc, "status", 1 << 16, "no such file")
    if isinstance(raw, Unknown):
        return None, unknown(raw.why)
    for line in raw.decode("ascii", "replace").splitlines():
        key, _, value = line.partition(":")
        if key == "Mems_allowed_list":
            try:
                return tuple(parse_cpu_list(value.strip())), Source(Kind.FILE, f"{where} (Mems_allowed_list)")
            except ValueError:
                return None, unknown(f"Mems_allowed_list in {where} is not a node list")
    return None, unknown(f"no Mems_allowed_list in {where}")
