"""The private channel between parinfo and the script it runs inside another process.

A folder made for one attach in the target's /dev/shm, else its /tmp (as the target sees them:
through ``/proc/PID/root`` when it lives in another mount namespace; a base is used only when root
owns it and nobody else may write there, or its sticky bit keeps others from renaming or removing
what is not theirs; /dev/shm first: memory, no disk), mode 0700 and owned by the target's
user (parinfo's own, or, for root attaching to another user's process, that user's: the script must
be readable there), holding two entries made with O_EXCL: the script (0400) and a FIFO (0600) whose
read end parinfo holds open. Every entry is opened through the folder's descriptor without
following links, and checked (type, owner, mode) before it is believed. No other user can list,
read, write or replace any of it; the target's own user could, but that user already owns the
process whose answer is read, and its answer is read as hostile data anyway.

The answer is bounded by the FIFO's size (set to :data:`PIPE_SIZE` where the kernel allows): the
script writes it without ever blocking, and parinfo reads at most that many bytes before a deadline.
Closing removes every entry: a script that runs later finds no FIFO and returns at once.
"""
from __future__ import annotations

import fcntl
import os
import secrets
import select
import stat
import time

from parinfo.errors import UsageError
from parinfo.machine.procfs import Proc

#: Where the folder is made, first fit first (as the target sees them), its name (a random suffix
#: follows) and its entries.
BASES = ("/dev/shm", "/tmp")
PREFIX = "parinfo-attach-"
SCRIPT = "s.py"
FIFO = "r"
#: The FIFO's size asked for: the largest answer taken (the kernel may grant less).
PIPE_SIZE = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)


class ChannelError(UsageError):
    """The channel cannot be made (one line: where, and why)."""


class Channel:
    """One attach's folder, script and FIFO; use as a context manager (closing removes them)."""

    def __init__(self, proc: Proc, uid: int, gid: int) -> None:
        self.proc, self.uid, self.gid = proc, uid, gid
        self.base_fd = self.dir_fd = self.read_fd = -1
        self.name = ""
        self.folder = ""  # the folder's path as the target sees it
        self.cap = 0
        self._made: list[str] = []

    # making --------------------------------------------------------------------------------------
    def __enter__(self) -> Channel:
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _base(self) -> tuple[str, str]:
        """Open the first base fit for the channel (:attr:`base_fd`); (its path as the target sees
        it, as this process names it)."""
        mine = Proc(None).mount_namespace()
        same = mine is not None and mine == self.proc.mount_namespace()
        why = ""
        for base in BASES:
            path = base.encode() if same else self.proc.path("root") + base.encode()
            shown = base if same else self.proc.shown("root") + base
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                why = f"cannot open {shown}: {exc.strerror or exc}"
                continue
            st = os.fstat(fd)
            if st.st_uid == 0 and (not st.st_mode & 0o022 or st.st_mode & stat.S_ISVTX):
                self.base_fd = fd
                return base, shown
            os.close(fd)
            why = f"{shown} is not root's, or others may rename what is in it (no sticky bit)"
        raise ChannelError(f"no private place the process can read the attach script from: {why}")

    def _open(self) -> None:
        base, shown = self._base()
        for _ in range(16):
            name = PREFIX + secrets.token_hex(8)
            try:
                os.mkdir(name, 0o700, dir_fd=self.base_fd)
            except FileExistsError:
                continue
            except OSError as exc:
                raise ChannelError(f"cannot make a private folder in {shown}: {exc.strerror or exc}") from None
            self.name = name
            break
        else:
            raise ChannelError(f"cannot make a private folder in {shown}: every name tried exists")
        self.folder = f"{base}/{self.name}"
        self.dir_fd = os.open(self.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=self.base_fd)
        self._check(os.fstat(self.dir_fd), stat.S_IFDIR, os.geteuid(), "the folder")
        self._give(self.dir_fd, None)
        os.mkfifo(FIFO, 0o600, dir_fd=self.dir_fd)
        self._made.append(FIFO)
        self._give(None, FIFO)
        self.read_fd = os.open(FIFO, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.dir_fd)
        self._check(os.fstat(self.read_fd), stat.S_IFIFO, self.uid, "the FIFO")
        try:
            fcntl.fcntl(self.read_fd, _F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # the user's pipe budget is spent: the kernel's default size bounds the answer
        self.cap = fcntl.fcntl(self.read_fd, _F_GETPIPE_SZ)

    def _give(self, fd: int | None, name: str | None) -> None:
        """Hand the folder (``fd``) or an entry (``name``) to the target's user, when that is not
        parinfo's (only root may)."""
        if (self.uid, self.gid) == (os.geteuid(), os.getegid()):
            return
        try:
            if fd is not None:
                os.fchown(fd, self.uid, self.gid)
            else:
                os.chown(str(name), self.uid, self.gid, dir_fd=self.dir_fd, follow_symlinks=False)
        except OSError as exc:
            raise ChannelError(f"cannot hand the attach files to the process's user (uid {self.uid}): "
                               f"{exc.strerror or exc}; attach to another user's process as root") from None

    def _check(self, st: os.stat_result, kind: int, owner: int, what: str) -> None:
        if stat.S_IFMT(st.st_mode) != kind or st.st_uid != owner or st.st_mode & 0o077:
            raise ChannelError(f"{what} of the attach channel is not what parinfo made (type, owner or mode "
                               "changed): nothing is sent")

    def write_script(self, source: str) -> str:
        """Write the script (read-only, created with O_EXCL); its path as the target sees it."""
        fd = os.open(SCRIPT, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=self.dir_fd)
        self._made.append(SCRIPT)
        try:
            data = source.encode("utf-8")
            while data:
                data = data[os.write(fd, data):]
            os.fchmod(fd, 0o400)
            self._give(fd, None)
        finally:
            os.close(fd)
        return f"{self.folder}/{SCRIPT}"

    @property
    def fifo(self) -> str:
        """The FIFO's path as the target sees it."""
        return f"{self.folder}/{FIFO}"

    # reading -------------------------------------------------------------------------------------
    def receive(self, deadline: float) -> bytes | None:
        """The whole answer, once the script has written it and closed the FIFO; None when the
        deadline passes first. An answer longer than :attr:`cap` is cut there (it fails to parse)."""
        poller = select.poll()
        poller.register(self.read_fd, select.POLLIN)
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not poller.poll(max(1, int(left * 1000))):
                continue
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:  # the writer closed: that is the whole answer
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > self.cap:
                return b"".join(chunks)[: self.cap + 1]

    # removing ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the FIFO (a late script then finds nobody reading) and remove every entry."""
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1
        if self.dir_fd >= 0:
            for name in reversed(self._made):
                try:
                    os.unlink(name, dir_fd=self.dir_fd)
                except OSError:
                    pass
            os.close(self.dir_fd)
            self.dir_fd = -1
        self._made = []
        if self.base_fd >= 0:
            if self.name:
                try:
                    os.rmdir(self.name, dir_fd=self.base_fd)
                except OSError:  # something else was put there: the folder stays, still private
                    pass
            os.close(self.base_fd)
            self.base_fd = -1
