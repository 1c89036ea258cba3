"""The one way parinfo opens, reads or creates a file at a path another user may have a say in.

Another user can put a FIFO where a file is expected (an open or a read then waits forever), a file
on a FUSE mount it serves itself (a read then waits as long as it likes), a link where parinfo will
write (root then writes where that user chose), an endless file, or swap any of these between a check
and a use. So, here and nowhere else:

- :func:`open_file` never blocks (``O_NONBLOCK``), follows no link at the last component
  (``O_NOFOLLOW``) unless asked, and keeps the descriptor only when ``fstat`` of that very descriptor
  says regular file (not FUSE, unless asked);
- :func:`open_beneath` walks a path one component at a time from a directory (``/proc/PID/root``),
  following no link at all: the path cannot leave that root or turn into a FIFO on the way
  (:func:`open_dir_beneath` likewise, to a directory);
- :func:`read_bounded` and :func:`read_file` read at most a limit;
- :func:`writable_dir` opens (making what is missing) a directory to write in, reached from ``/``
  without following a link that another user owns, through directories no other user may rename
  things in, itself writable by parinfo's user (and root) only;
- :func:`create` makes a file there with ``O_EXCL | O_NOFOLLOW`` (an older file of the name is
  unlinked first: in such a directory nobody else can have put it there);
- :func:`create_at` makes a file at a path the user named (a trace to write), whose folder may also
  be a sticky one every user may write (/tmp): another user's file or link there is replaced, or
  the create fails, never written through.

Every refusal is an :class:`OSError` (an :class:`Unsafe`) whose ``strerror`` says what was found, so
the callers' existing "cannot read X: why" paths report it unchanged.
"""
from __future__ import annotations

import errno
import os
import stat

__all__ = ["OnFuse", "Unsafe", "create", "create_at", "kind", "open_beneath", "open_dir_beneath", "open_file",
           "open_in_root", "read_bounded", "read_file", "writable_dir"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
#: statfs f_type of FUSE (linux/magic.h): a file there is served by a user-space process.
_FUSE_MAGIC = 0x65735546
#: The most path components walked, and the most links followed in one path (the kernel's own 40).
_MAX_PARTS = 4096
_MAX_LINKS = 40

_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFLNK: "a symbolic link"}


class Unsafe(OSError):
    """A path parinfo will not use as asked: its ``strerror`` says what it is and why."""

    def __init__(self, what: str, code: int = errno.EPERM) -> None:
        super().__init__(code, what)


class OnFuse(Unsafe):
    """A file on a FUSE file system, refused where a read must not wait on a user-space process:
    told from the other refusals by its type (a copy on a local file system is the fix)."""


def kind(mode: int) -> str:
    """What a file of this mode is, in words ("a FIFO")."""
    return "a regular file" if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _on_fuse(fd: int) -> bool:
    """Whether the open file lies on a FUSE file system (its reads are answered by a process)."""
    import ctypes

    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux; f_type first
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.fstatfs(fd, buf) != 0:
            return False
    except (OSError, AttributeError):
        return False
    return int.from_bytes(buf.raw[:ctypes.sizeof(ctypes.c_long)], "little" if _little() else "big") == _FUSE_MAGIC


def _little() -> bool:
    import sys

    return sys.byteorder == "little"


def _checked_regular(fd: int, fuse: bool) -> int:
    """``fd`` when it is a regular file (and not on FUSE unless ``fuse``); else close it and raise."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unsafe(f"is {kind(st.st_mode)}, not a regular file", errno.EINVAL)
        if not fuse and _on_fuse(fd):
            raise OnFuse("lies on a FUSE file system, whose reads its owner's process may never answer",
                         errno.EINVAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path: str | bytes, *, dir_fd: int | None = None, follow: bool = False, fuse: bool = False) -> int:
    """A read-only descriptor of the regular file ``path`` (relative to ``dir_fd`` when given),
    opened without blocking and, unless ``follow``, without following a link at its last component.
    OSError (an :class:`Unsafe` for a FIFO, device, directory or FUSE file) when it is not one."""
    flags = os.O_RDONLY | _NONBLOCK | _CLOEXEC | (0 if follow else _NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise Unsafe("is a symbolic link, which parinfo does not follow here", errno.ELOOP) from None
        raise
    return _checked_regular(fd, fuse)


def open_beneath(root: str | bytes, path: str | bytes, *, fuse: bool = False) -> int:
    """A read-only descriptor of the regular file ``path`` under the directory ``root`` (such as
    ``/proc/PID/root``, a link the kernel resolves to that process's root), reached one component at
    a time with no link followed and no ``..``: whatever another user made of the path, the open
    stays beneath ``root`` and never blocks."""
    parts = _parts(path)
    fd = _descend(root, parts[:-1])
    try:
        return open_file(parts[-1], dir_fd=fd, fuse=fuse)
    finally:
        os.close(fd)


def open_dir_beneath(root: str | bytes, path: str | bytes) -> int:
    """A descriptor of the directory ``path`` under the directory ``root``, reached as
    :func:`open_beneath` reaches a file: one component at a time, no link followed, no ``..`` (an
    absolute link in another process's root would otherwise lead into parinfo's)."""
    return _descend(root, _parts(path))


def open_in_root(root: str | bytes, path: str | bytes, *, fuse: bool = False) -> int:
    """A read-only descriptor of the regular file ``path`` as the process whose root directory is
    ``root`` (``/proc/PID/root``) reaches it: each link on the way is read and followed as that
    process would (an absolute one from ``root`` again, ``..`` never above ``root``), at most 40 of
    them, every directory opened without following a link or blocking, the file as :func:`open_file`
    opens it. For a file a container makes of links (Kubernetes' service-account volume: namespace ->
    ..data/namespace) that :func:`open_beneath` refuses; a link swapped in between its reading and
    the open fails the open, never leads out of ``root``."""
    todo = list(reversed(_parts(path)))
    stack = [os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)]
    links = 0
    try:
        while todo:
            part = todo.pop()
            if part == b"..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            try:
                target = os.readlink(part, dir_fd=stack[-1])
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # EINVAL: not a link
                    raise
            else:
                links += 1
                if links > _MAX_LINKS or len(todo) > _MAX_PARTS:
                    raise Unsafe(f"more than {_MAX_LINKS} links on the way", errno.ELOOP)
                if target.startswith(b"/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                todo.extend(reversed([p for p in target.split(b"/") if p and p != b"."]))
                continue
            if not todo:
                return open_file(part, dir_fd=stack[-1], fuse=fuse)
            stack.append(_descend_one(stack[-1], part))
        raise Unsafe("is not a path to a file", errno.EINVAL)
    finally:
        for fd in stack:
            os.close(fd)


def _parts(path: str | bytes) -> list[bytes]:
    parts = [p for p in os.fsencode(path).split(b"/") if p and p != b"."]
    if not parts or len(parts) > _MAX_PARTS:
        raise Unsafe("is not a path to a file", errno.EINVAL)
    if b".." in parts:
        raise Unsafe("holds '..', which parinfo does not follow here", errno.EINVAL)
    return parts


def _descend(root: str | bytes, parts: list[bytes]) -> int:
    """A descriptor of the directory ``root``/``parts``, each part opened without following a link."""
    fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        for part in parts:
            step = _descend_one(fd, part)
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def _descend_one(fd: int, part: bytes) -> int:
    """A descriptor of the directory ``part`` of the directory ``fd``, opened without following a link."""
    try:
        return os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Unsafe(f"{os.fsdecode(part)!r} on the way is not a directory (a link, or a file)",
                         errno.ENOTDIR) from None
        raise


def read_bounded(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``fd``, read to its end or the limit, whichever comes first."""
    chunks = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(1 << 16, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_file(path: str | bytes, limit: int, *, dir_fd: int | None = None, follow: bool = False) -> bytes:
    """At most ``limit`` bytes of the regular file ``path``, opened as :func:`open_file` does."""
    fd = open_file(path, dir_fd=dir_fd, follow=follow)
    try:
        return read_bounded(fd, limit)
    finally:
        os.close(fd)


def _others_may_write(st: os.stat_result) -> bool:
    """Whether a user other than parinfo's (and root) may add, remove or rename entries in this
    directory: it is another user's, writable by all, or writable by a group parinfo is not."""
    me = os.geteuid()
    if st.st_uid not in (0, me):
        return True
    if st.st_mode & stat.S_IWOTH:
        return True
    return bool(st.st_mode & stat.S_IWGRP) and st.st_gid not in (0, os.getegid())


def _step_refusal(shown: str, st: os.stat_result) -> Unsafe | None:
    """Why a directory on the way may let another user swap what lies below it, or None. A
    world-writable directory with the sticky bit (/tmp) is fine to pass through: nobody may rename
    there what is not theirs, and what lies below is checked in turn."""
    if not _others_may_write(st):
        return None
    if st.st_uid in (0, os.geteuid()) and st.st_mode & stat.S_ISVTX:
        return None
    return Unsafe(f"{shown} on the way is {_writer(st)}: another user could swap what lies below it")


def _writer(st: os.stat_result) -> str:
    if st.st_uid not in (0, os.geteuid()):
        return f"owned by uid {st.st_uid}"
    if st.st_mode & stat.S_IWOTH:
        return "writable by every user"
    return f"writable by group {st.st_gid}"


def writable_dir(path: str, *, make: bool = True, mode: int = 0o755, sticky: bool = False) -> int:
    """A descriptor of directory ``path``, made (with its missing parents, ``mode``) when ``make``,
    fit to create files in: every directory on the way is reached without following a link another
    user owns, none lets another user swap what lies below it, and the directory itself is writable
    by parinfo's user (and root) only, or, with ``sticky``, is also a sticky one of parinfo's user or
    root (/tmp: nobody may remove or rename there what is not theirs). :class:`Unsafe` says which
    part is not."""
    parts = [p for p in os.path.abspath(path).split("/") if p]
    fd = os.open("/", os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    here = ""
    links = 0
    try:
        while parts:
            part = parts.pop(0)
            shown = f"{here}/{part}"
            try:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not make:
                    raise
                try:
                    os.mkdir(part, mode, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile: checked below like any other
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                if st.st_uid not in (0, os.geteuid()):
                    raise Unsafe(f"{shown} is a link owned by uid {st.st_uid}: parinfo follows no other user's link")
                links += 1
                if links > _MAX_LINKS:
                    raise Unsafe(f"{shown}: too many links", errno.ELOOP)
                target = os.readlink(part, dir_fd=fd)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", os.O_RDONLY | _DIRECTORY | _CLOEXEC)
                    here = ""
                target_parts = [p for p in os.path.normpath(target).split("/") if p and p != "."]
                parts = target_parts + parts
                continue
            if part == "..":
                step = os.open("..", os.O_RDONLY | _DIRECTORY | _CLOEXEC, dir_fd=fd)
                here = here.rpartition("/")[0]
            else:
                try:
                    step = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise Unsafe(f"{shown} is not a directory", errno.ENOTDIR) from None
                    raise
                here = shown
            os.close(fd)
            fd = step
            st = os.fstat(fd)
            if parts:
                refusal = _step_refusal(here or "/", st)
                if refusal is not None:
                    raise refusal
        st = os.fstat(fd)
        if _others_may_write(st) and not (sticky and _step_refusal(here or "/", st) is None):
            raise Unsafe(f"{here or '/'} is {_writer(st)}: parinfo creates files only in a folder no other "
                         "user can write")
    except BaseException:
        os.close(fd)
        raise
    return fd


def create(dir_fd: int, name: str, mode: int = 0o644) -> int:
    """A write-only descriptor of a new, empty file ``name`` in the directory ``dir_fd`` (one that
    :func:`writable_dir` opened, or parinfo made), created with ``O_EXCL | O_NOFOLLOW``; an older
    entry of that name is removed first (a directory is an error)."""
    if not name or "/" in name or name in (".", ".."):
        raise Unsafe(f"{name!r} is not a file name", errno.EINVAL)
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode, dir_fd=dir_fd)


def create_at(path: str, mode: int = 0o644) -> int:
    """A write-only descriptor of a new file at ``path``, a path the user named for parinfo to write
    (a trace, a profile): its folder opened by :func:`writable_dir` (``sticky``: /tmp will do), the
    file made by :func:`create`, so an older file or link of that name is replaced, never written
    through."""
    folder, name = os.path.split(os.path.abspath(path))
    fd = writable_dir(folder, make=False, sticky=True)
    try:
        return create(fd, name, mode)
    finally:
        os.close(fd)
