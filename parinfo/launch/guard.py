"""The watchdog of one launch of instances: ends every process they started once parinfo is gone,
even when parinfo was killed by SIGKILL (which no handler of parinfo's own can see).

:mod:`parinfo.launch.reaping` runs this file as ``python -I -S guard.py``, in a session of its
own (no terminal signal reaches it), its stdin the read end of a pipe that only parinfo holds open.
parinfo writes one line per thing to end, ``c PATH`` (the launch's cgroup v2 folder) or ``g PGID``
(the process group of an instance that is not in that cgroup: the groups are the fallback). When the
pipe closes, because parinfo ended or was killed, the guard sends SIGTERM to every group and to
every process of the cgroup, waits at most GRACE_S for them to go, then sends SIGKILL
(``cgroup.kill``: what left its group goes too), and removes the cgroup. A group found gone is
never signalled again. Standard library only, and no import of parinfo: it starts fast, whatever
parinfo's state.

A group's id is its leader's pid. While parinfo runs it keeps each leader unreaped until the guard
has ended (parinfo.launch.reaping.Leader), so the id stays the group's. When parinfo is killed,
the leaders go to another reaper; a group whose leader is reaped and whose last member ends before
the guard's signal leaves its id free, and a process that took that pid and made itself a group
leader in that moment would be signalled. The window is the guard's first milliseconds (or a poll
of 20 ms), the pid space must wrap around in it, and there is none for an instance in the cgroup.
"""
from __future__ import annotations

import os
import signal
import time

GRACE_S = 1.0
#: How long the guard waits, after SIGKILL, for the cgroup to empty so that it can be removed.
REMOVE_WITHIN_S = 3.0
_IGNORED = ("SIGINT", "SIGHUP", "SIGQUIT", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGUSR1", "SIGUSR2", "SIGPIPE")


def read_orders(fd: int) -> tuple[list[int], list[str]]:
    """The process groups and cgroup folders written to ``fd``, read until it closes."""
    groups: list[int] = []
    cgroups: list[str] = []
    pending = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            return groups, cgroups
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            kind, _, arg = line.partition(b" ")
            if kind == b"g" and arg.isdigit():
                groups.append(int(arg))
            elif kind == b"c" and arg:
                cgroups.append(os.fsdecode(arg))


def cgroup_pids(cgroup: str) -> list[int]:
    try:
        with open(os.path.join(cgroup, "cgroup.procs"), "rb") as fh:
            return [int(p) for p in fh.read().split()]
    except (OSError, ValueError):
        return []


def send(groups: list[int], cgroups: list[str], signum: int) -> bool:
    """Send ``signum`` to every group and every process of every cgroup; whether any was there.
    A group that is gone is taken out of ``groups``: its id may be another's from now on."""
    alive = False
    for pgid in list(groups):
        try:
            os.killpg(pgid, signum)
            alive = True
        except ProcessLookupError:
            groups.remove(pgid)
        except OSError:
            pass
    for cgroup in cgroups:
        pids = cgroup_pids(cgroup)
        alive = alive or bool(pids)
        if signum == signal.SIGKILL and _write(os.path.join(cgroup, "cgroup.kill"), b"1"):
            continue
        for pid in pids:
            try:
                os.kill(pid, signum)
            except OSError:
                pass
    return alive


def end(groups: list[int], cgroups: list[str], grace: float = GRACE_S) -> None:
    """SIGTERM to all, SIGKILL to what is left after ``grace`` seconds, then remove the cgroups."""
    deadline = time.monotonic() + grace
    if send(groups, cgroups, signal.SIGTERM):
        while time.monotonic() < deadline and send(groups, cgroups, 0):
            time.sleep(0.02)
        send(groups, cgroups, signal.SIGKILL)
    deadline = time.monotonic() + REMOVE_WITHIN_S
    for cgroup in cgroups:
        while True:
            try:
                os.rmdir(cgroup)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() >= deadline:
                    break
                send([], [cgroup], signal.SIGKILL)
                time.sleep(0.02)


def _write(path: str, data: bytes) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.write(fd, data)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def main() -> None:
    for name in _IGNORED:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    groups, cgroups = read_orders(0)
    end(groups, cgroups)


if __name__ == "__main__":
    main()
