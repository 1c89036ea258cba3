"""Whether a family's parent adopted it: pid 1 and subreapers take in processes whose own parent
exited, and init systems start services each on its own. Their environment is not where such a
family's counts are decided, so no fix may point there.

The evidence, read from /proc: the parent is pid 1 (of the pid namespace parinfo sees), unless pid 1
is the program itself and started them in its own process group (a container whose entry point
forks workers); or the members' process group is led by a process that has exited (gone, or a
zombie its parent has not collected yet) and is not the parent's group (the starter they were
orphaned by; a subreaper then holds them).
"""
from __future__ import annotations

from parinfo.errors import UsageError
from parinfo.machine.procfs import NotAProcess, Proc, ProcessGone
from parinfo.safe_text import escape_controls


def adopter(parent: int, member: int) -> str | None:
    """The parent in words ("pid 1 (systemd)") when it adopted ``member``'s family, else None; None
    too when either process cannot be read (a family is then judged as one, as before)."""
    try:
        group = Proc.of(member).stat().pgrp
        parent_stat = Proc.of(parent).stat()
    except UsageError:
        return None
    words = f"pid {parent} ({escape_controls(parent_stat.name)})"
    if parent == 1:
        return None if group == 1 else words
    if group in (parent, parent_stat.pgrp) or group == member:
        return None
    try:
        Proc.of(group).check()
    except (ProcessGone, NotAProcess):  # gone, or a zombie: it has exited, its parent not reaped it yet
        return words
    return None
