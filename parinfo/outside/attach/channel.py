"""The private channel between parinfo and the script it runs inside another process.

A folder made for one attach in the target's /dev/shm, else its /tmp, as the target sees them
(through ``/proc/PID/root`` when it lives in another mount namespace, walked one component at a time
with no link followed). The target's user chooses what those paths are (a process in its own user
and mount namespaces may bind-mount /etc over its /dev/shm), so a base is used only when that user
could create entries there itself: it owns it and may write it, or everyone may, with the sticky
bit, in a directory of root's or its own. parinfo never makes anything anywhere else.

The folder is parinfo's user's, mode 0700 while it is filled: the script (0400) and a FIFO (0600)
whose read end parinfo holds open, each made with O_EXCL through the folder's descriptor. Only then
are the two entries handed to the target's user (when that is another: only root may) and the
folder opened to traversal (0711): the target can open its two entries, and nobody but parinfo's
user can add, rename or remove anything in it, so there is nothing to race and parinfo can always
remove it all. Every entry is checked (type, owner, mode) before it is believed; the target's user
could write the FIFO, but its process's answer is read as hostile data anyway.

The answer is bounded by the FIFO's size (set to :data:`PIPE_SIZE` where the kernel allows): the
script writes it without ever blocking, and parinfo reads at most that many bytes before a deadline.
Closing removes every entry: a script that runs later finds no FIFO and returns at once. Every OS
error on the way is one :class:`ChannelError` line, and what was made is removed.
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
from parinfo.safe_file import create, open_dir_beneath

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
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ChannelError(UsageError):
    """The channel cannot be made or used (one line: where, and why)."""


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def user_may_create(st: os.stat_result, uid: int) -> bool:
    """Whether user ``uid`` may create entries in the directory of ``st`` itself: its own and
    writable by it, or writable by all with the sticky bit in a directory of root's or its own
    (where nobody else may then rename what it puts there)."""
    if st.st_uid == uid and st.st_mode & stat.S_IWUSR:
        return True
    return bool(st.st_mode & stat.S_IWOTH and st.st_mode & stat.S_ISVTX) and st.st_uid in (0, uid)


class Channel:
    """One attach's folder, script and FIFO; use as a context manager (closing removes them)."""

    def __init__(self, proc: Proc, uid: int, gid: int) -> None:
        self.proc, self.uid, self.gid = proc, uid, gid
        self.base_fd = self.dir_fd = self.read_fd = self.script_fd = -1
        self.name = ""
        self.folder = ""  # the folder's path as the target sees it
        self.shown = ""  # the base's path as parinfo names it, for messages
        self.cap = 0
        self.heard = False  # whether the script has written anything (it writes a space first)
        self._made: list[str] = []
        self._dir_id: tuple[int, int] | None = None
        self._written_atime = -1

    # making --------------------------------------------------------------------------------------
    def __enter__(self) -> Channel:
        try:
            self._open()
        except OSError as exc:
            self.close()
            where = f" in {self.shown}" if self.shown else ""
            raise ChannelError(f"cannot make the attach channel{where}: {_why(exc)}") from None
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _base(self) -> str:
        """Open the first base fit for the channel (:attr:`base_fd`); its path as the target sees it."""
        mine = Proc.of(None).mount_namespace()
        same = mine is not None and mine == self.proc.mount_namespace()
        whys = []
        for base in BASES:
            root, shown = (b"/", base) if same else (self.proc.path("root"), self.proc.shown("root") + base)
            try:
                fd = open_dir_beneath(root, base)
                st = os.fstat(fd)
            except OSError as exc:
                whys.append(f"cannot open {shown}: {_why(exc)}")
                continue
            if user_may_create(st, self.uid):
                self.base_fd, self.shown = fd, shown
                return base
            os.close(fd)
            whys.append(f"{shown} is not a place uid {self.uid} may create files in (owner uid {st.st_uid}, "
                        f"mode {stat.S_IMODE(st.st_mode):04o})")
        raise ChannelError("no place the process's own user could write to make the attach channel in: "
                           + "; ".join(whys))

    def _open(self) -> None:
        base = self._base()
        for _ in range(16):
            name = PREFIX + secrets.token_hex(8)
            try:
                os.mkdir(name, 0o700, dir_fd=self.base_fd)
            except FileExistsError:
                continue
            self.name = name
            break
        else:
            raise ChannelError(f"cannot make a private folder in {self.shown}: every name tried exists")
        self.folder = f"{base}/{self.name}"
        self.dir_fd = os.open(self.name, _DIR, dir_fd=self.base_fd)
        st = os.fstat(self.dir_fd)
        if st.st_uid == os.geteuid():  # parinfo's user's: the folder it made (nobody else may make one of its)
            self._dir_id = (st.st_dev, st.st_ino)
        self._check(st, stat.S_IFDIR, os.geteuid(), 0o700, "the folder", mask=0o077)
        os.fchmod(self.dir_fd, 0o700)
        os.mkfifo(FIFO, 0o600, dir_fd=self.dir_fd)
        self._made.append(FIFO)
        self.read_fd = os.open(FIFO, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.dir_fd)
        self._check(os.fstat(self.read_fd), stat.S_IFIFO, os.geteuid(), 0o600, "the FIFO", mask=0o077)
        os.fchmod(self.read_fd, 0o600)
        try:
            fcntl.fcntl(self.read_fd, _F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # the user's pipe budget is spent: the kernel's default size bounds the answer
        self.cap = fcntl.fcntl(self.read_fd, _F_GETPIPE_SZ)
        self.script_fd = create(self.dir_fd, SCRIPT, 0o600)
        self._made.append(SCRIPT)

    def _give(self, fd: int) -> None:
        """Hand an entry (by its descriptor, never its path) to the target's user, when that is not
        parinfo's (only root may)."""
        if (self.uid, self.gid) == (os.geteuid(), os.getegid()):
            return
        try:
            os.fchown(fd, self.uid, self.gid)
        except OSError as exc:
            raise ChannelError(f"cannot hand the attach files to the process's user (uid {self.uid}): "
                               f"{_why(exc)}; attach to another user's process as root") from None

    @staticmethod
    def _check(st: os.stat_result, kind: int, owner: int, mode: int, what: str, mask: int = 0o777) -> None:
        if stat.S_IFMT(st.st_mode) != kind or st.st_uid != owner or st.st_mode & mask != mode & mask:
            raise ChannelError(f"{what} of the attach channel is not what parinfo made (type, owner or mode "
                               "changed): nothing is sent")

    def write_script(self, source: str) -> str:
        """Write the script (once), hand it and the FIFO to the target's user and open the folder to
        traversal; the script's path as the target sees it."""
        if self.script_fd < 0:
            raise ChannelError("the attach script was written already: one script per channel")
        fd, self.script_fd = self.script_fd, -1
        try:
            data = source.encode("utf-8")
            while data:
                data = data[os.write(fd, data):]
            os.fchmod(fd, 0o400)
            self._give(fd)
            self._give(self.read_fd)
            self._check(os.fstat(self.dir_fd), stat.S_IFDIR, os.geteuid(), 0o700, "the folder")
            os.fchmod(self.dir_fd, 0o711)
            self._written_atime = os.fstat(fd).st_atime_ns
        except OSError as exc:
            raise ChannelError(f"cannot write the attach script in {self.shown}: {_why(exc)}") from None
        finally:
            os.close(fd)
        return f"{self.folder}/{SCRIPT}"

    def script_read(self) -> bool:
        """Whether the script's access time moved since it was written: the target read it (False
        also where the file system keeps no access times)."""
        try:
            st = os.stat(SCRIPT, dir_fd=self.dir_fd, follow_symlinks=False)
        except OSError:
            return False
        return st.st_atime_ns != self._written_atime

    @property
    def fifo(self) -> str:
        """The FIFO's path as the target sees it."""
        return f"{self.folder}/{FIFO}"

    # reading -------------------------------------------------------------------------------------
    def receive(self, deadline: float) -> bytes | None:
        """The whole answer, once the script has written it and closed the FIFO; None when the
        deadline passes first (:attr:`heard` then says whether the script had begun). An answer
        longer than :attr:`cap` is cut there (it fails to parse)."""
        poller = select.poll()
        poller.register(self.read_fd, select.POLLIN)
        chunks: list[bytes] = []
        size = 0
        try:
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
                self.heard = True
                chunks.append(chunk)
                size += len(chunk)
                if size > self.cap:
                    return b"".join(chunks)[: self.cap + 1]
        except OSError as exc:
            raise ChannelError(f"cannot read the attach answer: {_why(exc)}") from None

    # removing ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the FIFO (a late script then finds nobody reading) and remove every entry: through
        the folder's descriptor, and the folder itself only when its name still names it."""
        for attr in ("read_fd", "script_fd"):
            fd = getattr(self, attr)
            if fd >= 0:
                os.close(fd)
                setattr(self, attr, -1)
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
            if self.name and self._dir_id is not None:
                try:
                    st = os.stat(self.name, dir_fd=self.base_fd, follow_symlinks=False)
                    if (st.st_dev, st.st_ino) == self._dir_id:
                        os.rmdir(self.name, dir_fd=self.base_fd)
                except OSError:
                    pass
            os.close(self.base_fd)
            self.base_fd = -1
