"""A real cgroup with a CPU quota for tests: find where one can be made, make it, change its quota."""
from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

PERIOD_US = 100_000


def cpu_cgroup_parent() -> tuple[Path, str] | str:
    """A cgroup directory where a child with a CPU quota can be made, and its kind; else why not."""
    if os.geteuid() != 0:
        return "not root"
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError as exc:
        return f"cannot read mountinfo: {exc}"
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup" and "cpu" in tail[2].split(",") and fields[3] == "/":
            return Path(fields[4]), "v1"
        if tail[0] == "cgroup2" and fields[3] == "/":
            point = Path(fields[4])
            try:
                if "cpu" in (point / "cgroup.subtree_control").read_text().split():
                    return point, "v2"
            except OSError:
                pass
    return "no writable cgroup hierarchy with the cpu controller"


def set_quota(cg: Path, kind: str, cpus: float | None) -> None:
    """Limit cgroup ``cg`` to ``cpus`` CPUs (None: no limit)."""
    quota = -1 if cpus is None else int(cpus * PERIOD_US)
    if kind == "v1":
        (cg / "cpu.cfs_quota_us").write_text(str(quota))
    else:
        (cg / "cpu.max").write_text(f"{'max' if quota < 0 else quota} {PERIOD_US}")


@contextlib.contextmanager
def quota_cgroup(cpus: float | None, suffix: str = "") -> Iterator[tuple[Path, str] | str]:
    """A fresh cgroup limited to ``cpus`` CPUs, as (path, kind), or why none could be made (a
    string: the caller skips); removed afterwards, once the processes put in it have ended.
    ``suffix`` ends its name (hostile names: control characters, or bytes that are not UTF-8 given
    through os.fsdecode)."""
    found = cpu_cgroup_parent()
    if isinstance(found, str):
        yield found
        return
    parent, kind = found
    cg = parent / f"parinfo-test-{uuid.uuid4().hex[:12]}{suffix}"
    try:
        cg.mkdir()
        if kind == "v1":
            (cg / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        set_quota(cg, kind, cpus)
    except OSError as exc:
        if cg.exists():
            cg.rmdir()
        yield f"cannot make a cgroup under {parent}: {exc}"
        return
    try:
        yield cg, kind
    finally:
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)
