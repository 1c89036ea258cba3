"""Why the kernel refuses this process another's memory or an attach: its owner, the capabilities
each holds, Yama's ptrace_scope. ``mine`` and ``theirs`` are the two processes' status files as
fields (:meth:`parinfo.machine.procfs.Proc.permission_reason` reads them); the answers are
:class:`~parinfo.machine.proc_words.Denied`, told from other reasons by their type.
"""
from __future__ import annotations

import os

from parinfo.machine.proc_words import PERMISSION, Denied
from parinfo.machine.sysfs import read_bytes

_CAPABILITIES = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
                 "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
                 "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
                 "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
                 "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
                 "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
                 "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
                 "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE")


def _has_capability(mask: str, bit: int) -> bool:
    try:
        return bool(int(mask, 16) >> bit & 1)
    except ValueError:
        return False


def ptrace_scope(root: str = "/") -> int | None:
    """Yama's kernel.yama.ptrace_scope (0 classic rules, 1 descendants only, 2 CAP_SYS_PTRACE only,
    3 none), or None where Yama is not in the kernel."""
    try:
        return int(read_bytes(os.path.join(root, "proc/sys/kernel/yama/ptrace_scope"), 64))
    except (OSError, ValueError):
        return None


def _capability_names(mask: int) -> str:
    names = [(_CAPABILITIES[i] if i < len(_CAPABILITIES) else f"capability {i}")
             for i in range(mask.bit_length()) if mask >> i & 1]
    return ", ".join(names)


def memory_refusal(mine: dict[str, str], theirs: dict[str, str]) -> Denied:
    """Why this user may not read a process's memory or maps: another user's process, or rules
    the kernel applies even to its own user or to root (capabilities the target holds and this
    process lacks, a process that is not dumpable, Yama's ptrace_scope, a security module)."""
    if os.geteuid() != 0 and str(os.geteuid()) not in theirs.get("Uid", "").split():
        return Denied(PERMISSION)
    try:
        extra = int(theirs.get("CapPrm", "0"), 16) & ~int(mine.get("CapEff", "0"), 16)
    except ValueError:
        extra = 0
    if extra:
        return Denied(f"permission: refused{' even to root' if os.geteuid() == 0 else ''}: the process holds "
                      f"capabilities this one lacks ({_capability_names(extra)}); run parinfo with them")
    if os.geteuid() == 0:
        return Denied("permission: refused even to root (a security module's rule, or another user namespace)")
    return Denied("permission: the kernel lets only root read this process's memory "
                  "(kernel.yama.ptrace_scope, or a process that is not dumpable): run as root")

def attach_refusal(mine: dict[str, str], theirs: dict[str, str]) -> Denied:
    """Why the kernel refused to let this process write into this one's memory (what
    ``sys.remote_exec`` does, with a debugger's rights): another user's process, Yama's
    ptrace_scope, capabilities the target holds, or a rule of a security module. parinfo never
    asks for more rights than it has; the words say which rule refused and what would be allowed."""
    scope = ptrace_scope()
    cap_ptrace = _has_capability(mine.get("CapEff", "0"), _CAPABILITIES.index("CAP_SYS_PTRACE"))
    owners = theirs.get("Uid", "").split()
    if not cap_ptrace and owners and any(uid != str(os.getuid()) for uid in owners[:3]):
        return Denied("permission: another user's process (the kernel lets a process attach only to its "
                      "own user's, without CAP_SYS_PTRACE): run parinfo as its user or as root")
    if scope == 3:
        return Denied("permission: kernel.yama.ptrace_scope is 3: no process may attach to another on this "
                      "machine until it reboots")
    if scope == 2 and not cap_ptrace:
        return Denied("permission: kernel.yama.ptrace_scope is 2: only a process with CAP_SYS_PTRACE may "
                      "attach: run parinfo as root")
    if scope == 1 and not cap_ptrace:
        return Denied("permission: kernel.yama.ptrace_scope is 1: a process may attach only to its own "
                      "descendants (or a process that allowed it with prctl PR_SET_PTRACER): run parinfo "
                      "as root, or start the program under it")
    return memory_refusal(mine, theirs)
