"""The cgroup memory limit over a process and how many tasks its cgroup holds.

For the thread-stack budget: every thread reserves a stack, and the threads of a cgroup share its
memory limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``, the tightest of the cgroup and its
ancestors). ``pids.current`` counts the cgroup's tasks, that is its threads, across all its
processes. Read under ``root`` (tests pass fake trees); unreadable facts give their reason.
"""
from __future__ import annotations

import os
from dataclasses import field
from typing import TYPE_CHECKING

from parinfo.machine import cgroup as _cgroup
from parinfo.machine.sysfs import Unreadable, garbage, read, shown
from parinfo.records.record import record
from parinfo.records.source import NO_LIMIT, Source, file

if TYPE_CHECKING:
    from parinfo.machine.procfs import Proc

# v1 writes "no limit" as the largest page-aligned signed 64-bit value; anything this large is none.
_V1_UNLIMITED = 1 << 62


@record(frozen=True)
class MemoryFacts:
    """``limit`` in bytes (None: no limit) with the file it came from; ``tasks`` the threads in the
    process's cgroup (None: unknown); ``unknown`` maps a field to why it could not be read."""

    limit: int | None = None
    limit_source: Source = NO_LIMIT
    tasks: int | None = None
    tasks_source: Source = NO_LIMIT
    unknown: dict[str, str] = field(default_factory=dict)


def _limit_at(root: str, d: str, version: str) -> tuple[int | None, str] | None:
    name = "memory.max" if version == "v2" else "memory.limit_in_bytes"
    rel = f"{d}/{name}"
    if not os.path.lexists(os.path.join(root, rel)):
        return None
    text = read(root, rel)
    if text == "max":
        return None, rel
    try:
        value = int(text)
    except ValueError:
        raise garbage(rel, text) from None
    if value < 0:
        raise garbage(rel, text)
    return (None if value >= _V1_UNLIMITED else value), rel


def memory_facts(root: str = "/", proc: Proc | None = None) -> MemoryFacts:
    """The memory limit over process ``proc`` (default: this one) and its cgroup's task count."""
    root = os.path.abspath(root)
    facts = MemoryFacts()
    try:
        mem = _cgroup.controller_dir(root, "memory", proc)
        pids = _cgroup.controller_dir(root, "pids", proc)
    except Unreadable as exc:
        facts.unknown["limit"] = facts.unknown["tasks"] = str(exc)
        return facts
    limit, source, problems = None, NO_LIMIT, []
    levels = [(d, mem.version) for d in mem.levels] if mem is not None else []
    for d, version in levels:
        try:
            found = _limit_at(root, d, version)
        except Unreadable as exc:
            problems.append(str(exc))
            continue
        if found is not None and found[0] is not None and (limit is None or found[0] < limit):
            limit, source = found[0], file(shown(found[1]))
    if problems and limit is None:
        facts.unknown["limit"] = "; ".join(problems)
    tasks, tasks_source = None, NO_LIMIT
    if pids is not None:
        rel = f"{pids.leaf}/pids.current"
        try:
            tasks, tasks_source = int(read(root, rel)), file(shown(rel))
        except ValueError:
            facts.unknown["tasks"] = f"unexpected content in {shown(rel)}"
        except Unreadable as exc:
            facts.unknown["tasks"] = str(exc)
    return MemoryFacts(limit, source, tasks, tasks_source, facts.unknown)
