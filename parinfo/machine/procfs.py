"""The one front for a process's /proc files: every other module asks it, none opens them itself.

What a process's /proc files say is hostile input (its owner controls its name, environment and
command line, and can exit or exec at any moment), so this module:

- reads with plain system calls, bounded in size, through bytes paths (a cgroup or file name that is
  not UTF-8 stays exact);
- knows the shapes a task can take: a kernel thread, a zombie, a process whose main thread has
  exited while its other threads run on (its per-process files then read empty or fail: they are
  read through a live thread instead), one that vanished, and one whose pid was reused (its start
  time differs from the first reading);
- turns every OS error into parinfo's own in one place (:meth:`Proc.failure`): :class:`ProcessGone`,
  :class:`NoAccess` (both one-line usage errors), or the words of an "unknown (why)".

``root`` is the file system root the files are read under (tests pass a fake tree); ``pid`` None is
this process. A :class:`Proc` is made once, at the door (:meth:`Proc.of`), and that handle is what
every reader of the process takes: the identity its first stat fixes holds through the whole report.
"""
from __future__ import annotations

import errno
import os

import parinfo.safe_file as safe_file
from parinfo.errors import UsageError
from parinfo.machine.capabilities import attach_refusal, memory_refusal, ptrace_scope
from parinfo.machine.proc_memory import Memory
from parinfo.machine.proc_words import (
    PERMISSION,
    PF_KTHREAD,
    Denied,
    NoAccess,
    NotAProcess,
    ProcessGone,
    Stat,
    exited_during_read,
    gone,
    kernel_thread,
    no_access,
    parse_environ,
    parse_stat,
    zombie,
)
from parinfo.machine.sysfs import Unreadable, read_bytes
from parinfo.records.unknown import Unknown

__all__ = ["PERMISSION", "PF_KTHREAD", "Denied", "Memory", "NoAccess", "NotAProcess", "Proc", "ProcessGone", "Stat",
           "exited_during_read", "gone", "kernel_thread", "no_access", "parse_environ", "parse_stat", "pids",
           "ptrace_scope", "this_or", "zombie"]

#: Most of one file read: an environment or command line is at most a few MiB; maps of a large process
#: tens of thousands of lines.
LIMIT = 1 << 24
MAPS_LIMIT = 1 << 26


def read_small(path: bytes | str) -> bytes:
    """A short /proc file (a stat line) in one read: a second read to meet its end would double the
    cost of a scan over thousands of threads."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def pids(root: str = "/") -> list[int]:
    """The pids /proc lists now; UsageError when /proc cannot be listed."""
    try:
        return [int(e) for e in os.listdir(os.path.join(root, "proc")) if e.isdigit() and e.isascii()]
    except OSError as exc:
        raise UsageError(f"cannot list /proc: {exc.strerror or exc}") from None


def this_or(proc: Proc | None, root: str = "/") -> Proc:
    """``proc``, or the handle of this process under ``root`` when it is None (a reader's default)."""
    return Proc.of(None, root) if proc is None else proc


#: The files a process's main thread keeps readable after it exits (the others read empty or fail).
_OWN_FILES = ("stat", "status", "cgroup", "task")


class Proc:
    """Process ``pid`` as /proc shows it under ``root``, read file by file on demand.

    The first :meth:`stat` is the process's identity (pid and start time); :meth:`same` says whether
    the pid still names that process. Per-process files of a process whose main thread has exited
    are read through one of its live threads (:attr:`via`)."""

    __slots__ = ("_base", "_first", "_via", "pid", "root")

    @classmethod
    def of(cls, pid: int | None, root: str = "/") -> Proc:
        """The handle of process ``pid`` (None: this process) under ``root``: the one place a
        handle is made, so that one report follows one process."""
        return cls(pid, root)

    def parent(self) -> Proc:
        """The handle of this process's parent (by the ppid of its stat now)."""
        return Proc.of(self.stat().ppid, self.root)

    def same_or_gone(self) -> None:
        """Raise ProcessGone when the pid no longer names the process first read (it ended, and
        the pid may have been given to another): the check at the end of a report."""
        if self._first is not None and not self.same():
            raise exited_during_read(self.pid or 0)

    def __init__(self, pid: int | None, root: str = "/") -> None:
        if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0):
            raise UsageError(f"pid {pid!r}: give a process id, a whole number above 0")
        self.pid = pid
        self.root = root
        self._base = os.fsencode(os.path.join(root, "proc", "self" if pid is None else str(pid)))
        self._first: Stat | None = None
        self._via: bytes | None = None

    @property
    def label(self) -> str:
        """The pid as /proc names it."""
        return "self" if self.pid is None else str(self.pid)

    def path(self, name: str, tid: int | None = None) -> bytes:
        """The path of one of the process's files (of thread ``tid``'s with a tid)."""
        if tid is not None:
            return b"%s/task/%d/%s" % (self._base, tid, name.encode())
        return self._base + b"/" + name.encode()

    def _file(self, name: str) -> bytes:
        """A per-process file's path: through a live thread when the main thread has exited."""
        return self.path(name) if self._via is None or name in _OWN_FILES else self._via + b"/" + name.encode()

    def live_path(self, name: str) -> bytes:
        """A per-process file's path as it can be read now (through a live thread when the main
        thread has exited)."""
        return self._file(name)

    def shown(self, name: str) -> str:
        """A file's path as it is on the machine, for messages."""
        return f"/proc/{self.label}/{name}"

    # -- errors, translated in one place ---------------------------------------------------------

    def exists(self) -> bool:
        return os.path.isdir(self._base)

    def failure(self, exc: OSError, what: str) -> UsageError:
        """The error for ``exc``, raised while reading ``what``: ProcessGone when the process has
        gone (or the file says so), NoAccess otherwise."""
        if isinstance(exc, (FileNotFoundError, ProcessLookupError, NotADirectoryError)) \
                or exc.errno == errno.ESRCH or not self.exists():
            return gone(self.pid or 0) if self._first is None else exited_during_read(self.pid or 0)
        return no_access(self.pid or os.getpid(), what, exc)

    def why(self, exc: OSError, what: str) -> str:
        """The reason for an "unknown (why)" when ``what`` cannot be read."""
        if isinstance(exc, PermissionError):
            return self.permission_reason()
        if isinstance(exc, (FileNotFoundError, ProcessLookupError)) or exc.errno == errno.ESRCH:
            return "the process has exited"
        return f"cannot read {what}: {exc.strerror or exc}"

    def permission_reason(self) -> Denied:
        """Why this user may not read the process's memory or maps: another user's process, or rules
        the kernel applies even to its own user or to root
        (:func:`~parinfo.machine.capabilities.memory_refusal`)."""
        return memory_refusal(self._status_of(b"/proc/self"), self._status_of(self._base))

    def attach_refusal(self) -> Denied:
        """Why the kernel refused to let this process write into this one's memory (what
        ``sys.remote_exec`` does): :func:`~parinfo.machine.capabilities.attach_refusal`."""
        return attach_refusal(self._status_of(b"/proc/self"), self._status_of(self._base))

    def mount_namespace(self) -> int | None:
        """The inode of the process's mount namespace (None when it cannot be read): two processes
        with the same see the same files under the same paths."""
        try:
            return os.stat(self._base + b"/ns/mnt").st_ino
        except OSError:
            return None

    def inner_pid(self) -> int | None:
        """The pid as the process itself sees it (the last of NSpid: its own pid namespace)."""
        try:
            return int(self.status().get("NSpid", "").split()[-1])
        except (IndexError, ValueError):
            return None

    @staticmethod
    def _status_of(base: bytes) -> dict[str, str]:
        try:
            raw = read_bytes(base + b"/status", 1 << 16)
        except OSError:
            return {}
        out = {}
        for line in raw.decode("ascii", "replace").splitlines():
            key, _, value = line.partition(":")
            out[key] = value.strip()
        return out

    # -- reading ---------------------------------------------------------------------------------

    def read(self, name: str, limit: int = LIMIT) -> bytes:
        """The bytes of one file (at most ``limit``); ProcessGone or NoAccess when it cannot be read.
        Per-process files of a process whose main thread exited are read through a live thread."""
        path = self._file(name)
        try:
            return read_bytes(path, limit)
        except OSError as exc:
            raise self.failure(exc, self.shown(name)) from None

    def read_or_why(self, name: str, limit: int = LIMIT) -> bytes | Unknown:
        """The bytes of one file, or Unknown(why) when it cannot be read (its ``why`` a
        :class:`Denied` for a refusal); ProcessGone when the process has gone."""
        path = self._file(name)
        try:
            return read_bytes(path, limit)
        except OSError as exc:
            if isinstance(exc, (FileNotFoundError, ProcessLookupError)) or exc.errno == errno.ESRCH \
                    or not self.exists():
                raise self.failure(exc, self.shown(name)) from None
            return Unknown(self.why(exc, self.shown(name)))

    def text(self, name: str, limit: int = 1 << 22) -> str:
        """The stripped text of one file, for a fact of the machine layer (surrogateescape keeps a
        cgroup name that is not UTF-8 exact); :class:`~parinfo.machine.sysfs.Unreadable` ("cannot
        read /proc/PID/NAME: why") when it is missing, unreadable or empty."""

        path = self._file(name)
        try:
            found = read_bytes(path, limit).decode("utf-8", "surrogateescape").strip()
        except OSError as exc:
            raise Unreadable(f"cannot read {self.shown(name)}: {exc.strerror or exc}") from None
        if not found:
            raise Unreadable(f"{self.shown(name)} is empty")
        return found

    def stat(self) -> Stat:
        """The process's stat line now; the first one read is its identity."""
        try:
            found = parse_stat(read_small(self.path("stat")), self.pid or os.getpid())
        except OSError as exc:
            raise self.failure(exc, self.shown("stat")) from None
        except ValueError:
            raise gone(self.pid or 0) from None  # a task being torn down gives an empty line
        if self._first is None:
            self._first = found
        elif found.start != self._first.start:
            raise exited_during_read(self.pid or 0)  # the pid now names another process
        return found

    def same(self) -> bool:
        """Whether the pid still names the process first read (same start time)."""
        first = self._first
        try:
            now = parse_stat(read_small(self.path("stat")), self.pid or os.getpid())
        except (OSError, ValueError):
            return False
        return first is None or now.start == first.start

    def check(self) -> Stat:
        """The process's stat, after raising a one-line error when the pid names nothing to report
        on: ProcessGone when no process has it, NotAProcess for a kernel thread (no user-space pools)
        or a zombie. A process whose main thread exited while others run is not a zombie: its
        files are read through a live thread from here on."""
        if self.pid is not None and not self.exists():
            raise gone(self.pid)
        st = self.stat()
        if st.kernel_thread:
            raise kernel_thread(st.pid, st.name)
        if st.dead and not self.follow_live_thread():
            try:
                parent_name: str | None = self.parent().stat().name if st.ppid > 0 else None
            except UsageError:
                parent_name = None
            raise zombie(st.pid, st.name, st.ppid, parent_name)
        return st

    def follow_live_thread(self) -> bool:
        """When the main thread has exited and another thread runs on, read the per-process files
        through that thread; False when no thread is alive (a zombie) or none can be listed (the
        process has gone meanwhile, or its threads may not be read)."""
        try:
            tids = self.thread_ids()
        except UsageError:
            return False
        for tid in tids:
            st = self.thread_stat(tid)
            if st is not None and not st.dead:
                self._via = b"%s/task/%d" % (self._base, tid)
                return True
        return False

    @property
    def leader_exited(self) -> bool:
        """Whether the files are read through a live thread because the main thread has exited."""
        return self._via is not None

    def status(self) -> dict[str, str]:
        """/proc/PID/status as {field: value}."""
        out = {}
        for line in self.read("status", 1 << 16).decode("utf-8", "surrogateescape").splitlines():
            key, sep, value = line.partition(":")
            if sep:
                out[key] = value.strip()
        return out

    def uid(self) -> int:
        """The real uid (the /proc directory's owner is the effective one)."""
        try:
            return int(self.status().get("Uid", "").split()[0])
        except (IndexError, ValueError):
            raise gone(self.pid or 0) from None

    def environ(self) -> dict[str, str]:
        """The environment the process was launched with (later edits are not visible from outside)."""
        return parse_environ(self.read("environ", 1 << 22))

    def cmdline(self) -> list[str]:
        return [a.decode("utf-8", "surrogateescape") for a in self.read("cmdline", 1 << 20).split(b"\0") if a]

    def maps(self) -> bytes:
        return self.read("maps", MAPS_LIMIT)

    def cgroup(self) -> bytes:
        return self.read("cgroup", 1 << 16)

    def limits(self) -> str:
        return self.read("limits", 1 << 16).decode("utf-8", "replace")

    def exe(self) -> str | Unknown:
        """The executable's path, or Unknown(why)."""
        try:
            return os.fsdecode(os.readlink(self.path("exe")))
        except OSError as exc:
            return Unknown(self.why(exc, self.shown("exe")))

    def affinity(self) -> set[int]:
        """The CPUs the process may run on (sched_getaffinity; its status when that is refused)."""
        try:
            return os.sched_getaffinity(self.pid or 0)
        except ProcessLookupError:
            raise gone(self.pid or 0) from None
        except OSError:
            from parinfo.machine.cpulist import parse_cpu_list

            try:
                return set(parse_cpu_list(self.status().get("Cpus_allowed_list", "")))
            except ValueError:
                raise self.failure(PermissionError(errno.EACCES, "no CPU list"), self.shown("status")) from None

    # -- threads ---------------------------------------------------------------------------------

    def thread_ids(self) -> list[int]:
        """The process's thread ids now, sorted; ProcessGone or NoAccess."""
        try:
            return sorted(int(t) for t in os.listdir(self.path("task")) if t.isdigit())
        except OSError as exc:
            raise self.failure(exc, "the threads") from None

    def thread_stat(self, tid: int) -> Stat | None:
        """One thread's stat; None when it ended while it was read."""
        try:
            return parse_stat(read_small(self.path("stat", tid)), tid)
        except (OSError, ValueError):
            return None

    def thread_file(self, tid: int, name: str, limit: int = 1 << 16) -> bytes | None:
        """One of a thread's files; None when it cannot be read (ended, or not permitted)."""
        try:
            return read_bytes(self.path(name, tid), limit)
        except OSError:
            return None

    def thread_names(self) -> list[tuple[int, str | None]]:
        """(tid, name) of each thread (name None when it ended meanwhile)."""
        out: list[tuple[int, str | None]] = []
        for tid in self.thread_ids():
            raw = self.thread_file(tid, "comm", 256)
            out.append((tid, None if raw is None else raw.decode("utf-8", "surrogateescape").rstrip("\n")))
        return out

    def thread_states(self) -> list[tuple[bytes, str]] | None:
        """(raw name, state) of each live thread, read in one pass for a scan over every process of
        the machine; None when the threads cannot be listed (the process has gone)."""
        try:
            tids = os.listdir(self.path("task"))
        except OSError:
            return None
        task = self._base + b"/task/"
        out = []
        for tid in tids:
            try:
                data = read_small(task + tid + b"/stat")
                close = data.rindex(b")")
                out.append((data[data.index(b"(") + 1:close], chr(data[close + 2])))
            except (OSError, ValueError, IndexError):
                continue  # the thread ended
        return out

    # -- mapped files and memory -----------------------------------------------------------------

    def open_mapping(self, start: int, end: int, path: str, inode: int, deleted: bool) -> tuple[int | None, str]:
        """The file mapped at ``start``-``end`` open read-only (its descriptor), or (None, why not).

        ``map_files`` is the mapped file itself, even deleted or replaced since (root only): no path
        is resolved, so a container cannot point parinfo elsewhere with a symlink. Else the path
        through the process's root (another mount namespace), believed only when its inode is the
        one maps names (not the device: overlayfs shows the underlying file's device there), and
        reached through :func:`parinfo.safe_file.open_beneath`: the process's owner may have made the
        path a FIFO or a link since, and the open neither blocks nor leaves that root."""
        candidates = [(b"%s/map_files/%x-%x" % (self._base, start, end), b"")]
        if not deleted:
            candidates.append(((self._via or self._base) + b"/root", os.fsencode(path)))
        why: str | None = None  # None: no candidate said more than that it is not there
        for candidate, beneath in candidates:
            try:
                fd = (safe_file.open_beneath(candidate, beneath) if beneath
                      else safe_file.open_file(candidate, follow=True))
            except PermissionError:
                why = self.permission_reason() if not deleted else Denied(
                    "the library file was deleted or replaced after load: only root can open the copy the "
                    "process maps")
                continue
            except OSError as exc:
                if not self.exists():
                    raise exited_during_read(self.pid or 0) from None
                if not isinstance(exc, FileNotFoundError):
                    why = f"cannot open {os.fsdecode(candidate + beneath)}: {exc.strerror or exc}"
                continue
            if inode and os.fstat(fd).st_ino != inode:
                os.close(fd)
                why = "the library file was replaced after the process loaded it, and its mapping cannot be opened"
                continue
            return fd, ""
        if why is None:
            why = ("the library file was deleted after the process loaded it, and its mapping cannot be opened"
                   if deleted else "cannot open the library file as the process sees it")
        return None, why

    def memory(self) -> Memory:
        """The process's memory, opened on first read; close it when done."""
        return Memory(self)
