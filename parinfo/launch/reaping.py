"""Every process the instances start ends with the launch, however parinfo ends.

Four means, each covering what the others cannot:

- each instance leads its own process group (and session), which parinfo ends as a group, and the
  guard too for an instance outside the cgroup. A group's id is its leader's pid, free for another
  process once the leader is reaped and the group empty: so an instance's exit is seen without
  reaping it (:class:`Leader`), and its zombie is reaped only once its group has been ended;
- where parinfo may make one (root, or a delegated cgroup v2 tree), the instances join a cgroup of
  the launch's own, ``parinfo-launch-PID``, as they start, before they can fork: ``cgroup.kill``
  ends all its processes, a daemon that left its group with setsid included;
- parinfo is a child subreaper (``PR_SET_CHILD_SUBREAPER``): a descendant orphaned while parinfo
  runs becomes parinfo's child, and is ended when the instances have exited;
- a guard process (:mod:`parinfo.launch.guard`), started first, holds a pipe from parinfo and
  ends the groups and the cgroup when that pipe closes: when parinfo ends, or is killed by SIGKILL.

Without a cgroup (an unprivileged user, in most set-ups), a descendant that leaves its instance's
process group and is orphaned after parinfo was killed by SIGKILL is out of reach: docs/launch.md.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from parinfo.launch.guard import cgroup_pids

if TYPE_CHECKING:  # pragma: no cover
    import subprocess

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
#: How long leftover processes are given between SIGTERM and SIGKILL (the guard's own grace).
GRACE_S = 1.0
GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "guard.py")


class Leader:
    """An instance's process, the leader of its process group, whose exit is seen without reaping it.

    Its zombie keeps its pid, and so the group's id, from going to another process while parinfo
    may still signal the group; :meth:`Reaper.finish` reaps it (:meth:`release`) once the group has
    been ended. The one way the launch asks whether an instance has exited, and with what status.
    """

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.returncode: int | None = None  # Popen's convention: the code, or -N when killed by signal N
        self.held = True  # not reaped yet: its group's id is still its own

    def poll(self) -> int | None:
        """The returncode once the process has exited, else None; the zombie is left in place."""
        if self.returncode is None:
            self.returncode = self._peek(os.WNOHANG)
        return self.returncode

    def wait(self) -> int:
        """Wait for the process to exit, without reaping it; its returncode."""
        while self.returncode is None:
            self.returncode = self._peek(0)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL to the process, unless it has exited (Popen.kill would reap it)."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass

    def release(self) -> None:
        """Reap the exited process: only now may its pid, and its group's id, go to another process."""
        if self.held and self.poll() is not None:
            self.proc.wait()
            self.held = False

    def _peek(self, flags: int) -> int | None:
        if self.proc.returncode is not None:  # reaped through Popen all the same
            self.held = False
            return self.proc.returncode
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT | flags)
        except ChildProcessError:  # reaped elsewhere: its status is lost, as Popen takes it
            self.held = False
            return 0
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


class Reaper:
    """One launch's means of ending everything its instances start (the module's note)."""

    def __init__(self, cgroup: str | None, guard: subprocess.Popen[bytes] | None, orders: int | None,
                 subreaper: bool, earlier: frozenset[int] = frozenset()) -> None:
        self.cgroup = cgroup
        self.guard = guard
        self.orders = orders  # the write end of the guard's pipe
        self.subreaper = subreaper  # made one here, so to be undone at the end
        self.earlier = earlier  # children the calling program had before the launch: never ended here
        self.leaders: list[Leader] = []
        self.join_fd: int | None = None
        if cgroup is not None:
            try:
                self.join_fd = os.open(os.path.join(cgroup, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
            except OSError:
                self.join_fd = None

    @classmethod
    def start(cls) -> Reaper:
        """Become a subreaper, make the launch's cgroup where allowed, start the guard."""
        earlier = frozenset(_children())
        subreaper = not _is_subreaper() and _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        cgroup = _make_cgroup()
        guard, orders = _start_guard()
        reaper = cls(cgroup, guard, orders, subreaper, earlier)
        if cgroup is not None:
            reaper._order(f"c {cgroup}")
        return reaper

    def preexec(self, then: Callable[[], None] | None) -> Callable[[], None]:
        """The function an instance runs between fork and exec: join the cgroup, then ``then``."""
        join_fd = self.join_fd

        def hook() -> None:
            if join_fd is not None:
                try:
                    os.write(join_fd, b"0")
                except OSError:
                    pass  # not allowed here: the process group and the guard still end it
            if then is not None:
                then()
        return hook

    def watch(self, leader: Leader) -> None:
        """An instance, whose group is ended with the launch. The guard is given the group only when
        the instance is not in the cgroup (it could not join): after a SIGKILL of parinfo, a group's
        id may be another's once the leader is reaped elsewhere, and the cgroup is unambiguous."""
        self.leaders.append(leader)
        if self.cgroup is None or leader.pid not in cgroup_pids(self.cgroup):
            self._order(f"g {leader.pid}")

    def kill(self, signum: int) -> None:
        """``signum`` to every instance's group and, for SIGKILL, to every process of the cgroup."""
        for leader in self.leaders:
            if not leader.held:
                continue  # its group's id may be another's now
            try:
                os.killpg(leader.pid, signum)
            except OSError:
                pass
        if signum == signal.SIGKILL and self.cgroup is not None:
            try:
                fd = os.open(os.path.join(self.cgroup, "cgroup.kill"), os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, b"1")
                finally:
                    os.close(fd)
            except OSError:
                pass

    def reap(self) -> None:
        """Reap the orphans that came to parinfo and have exited (a long run must not gather
        zombies); never an instance, whose zombie holds its group's id until :meth:`finish`."""
        for pid in _children() - self._keep():
            if not _alive(pid):
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def finish(self) -> None:
        """The instances have exited: end what they left (the guard ends the cgroup and the groups
        it was given; the orphans that came to parinfo are ended here), within a bound; then reap
        the instances, whose groups no one signals any more. Idempotent."""
        if self.orders is not None:
            os.close(self.orders)  # the guard's signal to end them
            self.orders = None
        _end_children(self._keep())
        if self.guard is not None:
            import subprocess

            try:
                self.guard.wait(timeout=GRACE_S + 4)
            except subprocess.TimeoutExpired:
                self.guard.kill()  # stuck: it must not signal a group once the leaders are reaped
                self.guard.wait()
            self.guard = None
        for leader in self.leaders:
            leader.release()
        if self.join_fd is not None:
            os.close(self.join_fd)
            self.join_fd = None
        if self.subreaper:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)
            self.subreaper = False

    def _keep(self) -> set[int]:
        """The children never ended nor reaped as orphans: the caller's, the guard, the instances."""
        guard = {self.guard.pid} if self.guard is not None else set()
        return set(self.earlier) | guard | {leader.pid for leader in self.leaders if leader.held}

    def _order(self, line: str) -> None:
        if self.orders is None:
            return
        try:
            os.write(self.orders, os.fsencode(line) + b"\n")
        except OSError:
            pass


def _is_subreaper() -> bool:
    """Whether this process is a child subreaper already (then it stays one, as its owner chose)."""
    try:
        import ctypes

        flag = ctypes.c_int(0)
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)) == 0 and flag.value != 0
    except (OSError, AttributeError):
        return False


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def cgroup_base() -> str | None:
    """The folder of parinfo's own cgroup v2, where a launch's cgroup is made; None without one."""
    try:
        with open("/proc/self/cgroup", encoding="ascii", errors="replace") as fh:
            own = next((line[3:].strip() for line in fh if line.startswith("0::")), None)
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            mounts = [line.split() for line in fh if " - cgroup2 " in line]
    except OSError:
        return None
    if own is None:
        return None
    for fields in mounts:
        root, point = fields[3].rstrip("/"), fields[4]
        if own == root or own.startswith(root + "/"):
            return point + own[len(root):]
    return None


def _make_cgroup() -> str | None:
    """A new cgroup v2 folder for this launch, under parinfo's own cgroup, that ``cgroup.kill`` can
    end; None where parinfo may not make one, or the kernel lacks cgroup.kill (before 5.14)."""
    base = cgroup_base()
    if base is None:
        return None
    path = os.path.join(base, f"parinfo-launch-{os.getpid()}")
    try:
        os.mkdir(path, 0o755)
    except OSError:
        return None
    if os.path.exists(os.path.join(path, "cgroup.kill")):
        return path
    os.rmdir(path)
    return None


def _start_guard() -> tuple[subprocess.Popen[bytes] | None, int | None]:
    """The guard process and the write end of its pipe; (None, None) when it cannot start."""
    import subprocess

    if not sys.executable:
        return None, None
    read, write = os.pipe()
    try:
        guard = subprocess.Popen([sys.executable, "-I", "-S", GUARD], stdin=read, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
    except (OSError, subprocess.SubprocessError):
        os.close(write)
        return None, None
    finally:
        os.close(read)
    return guard, write


def _children() -> set[int]:
    """This process's children (the orphans a subreaper received among them)."""
    pids: set[int] = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as fh:
                pids.update(int(p) for p in fh.read().split())
        except (OSError, ValueError):
            continue
    return pids


def _end_children(keep: set[int] | frozenset[int]) -> None:
    """SIGTERM to every child but ``keep``, SIGKILL to those left after GRACE_S; each reaped."""
    deadline = time.monotonic() + GRACE_S
    signum = signal.SIGTERM
    signalled: set[int] = set()
    while True:
        left = _children() - keep
        for pid in left:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        left = {p for p in _children() - keep if _alive(p)}
        if not left:
            return
        if signum == signal.SIGTERM and time.monotonic() >= deadline:
            signum = signal.SIGKILL
            signalled.clear()
        if signum == signal.SIGKILL and time.monotonic() >= deadline + 2:
            return  # not ending (uninterruptible sleep): leave it rather than hang
        for pid in left - signalled:
            try:
                os.kill(pid, signum)
            except OSError:
                pass
            signalled.add(pid)
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (not a zombie, not gone), as the /proc front reads it."""
    from parinfo.errors import UsageError
    from parinfo.machine.procfs import Proc

    try:
        return not Proc.of(pid).stat().dead
    except UsageError:
        return False
