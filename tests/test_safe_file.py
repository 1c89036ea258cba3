"""parinfo.safe_file: the one way to open, read or create at a path another user has a say in.

Each case is made on the real file system under tmp_path: FIFOs (an open that would block), links
(last component and on the way), devices, other users' directories (root only: chown), sticky
directories, and races a test can make deterministic (an entry swapped before the open).
"""
from __future__ import annotations

import errno
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from parinfo import safe_file
from parinfo.safe_file import Unsafe

ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to another user)")
NOBODY = 65534


def _in_time(fn, seconds: float = 5.0):
    """``fn()``'s result or exception, failing the test if it does not return within ``seconds``
    (a blocking open would hang the suite otherwise)."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the call blocked"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_regular_file_is_read_within_its_limit(tmp_path):
    f = tmp_path / "a"
    f.write_bytes(b"x" * 100_000)
    assert safe_file.read_file(str(f), 10) == b"x" * 10
    assert len(safe_file.read_file(str(f), 1 << 20)) == 100_000


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "libopenblas.so"
    os.mkfifo(fifo)
    with pytest.raises(Unsafe, match="is a FIFO, not a regular file"):
        _in_time(lambda: safe_file.read_file(str(fifo), 100))


def test_a_device_and_a_directory_are_refused(tmp_path):
    with pytest.raises(Unsafe, match="character device"):
        safe_file.read_file("/dev/zero", 100, follow=True)
    with pytest.raises(Unsafe, match="is a directory"):
        safe_file.read_file(str(tmp_path), 100)


def test_a_link_at_the_last_component_is_not_followed_unless_asked(tmp_path):
    (tmp_path / "real").write_bytes(b"ok")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(Unsafe, match="symbolic link") as caught:
        safe_file.read_file(str(tmp_path / "link"), 10)
    assert caught.value.errno == errno.ELOOP
    assert safe_file.read_file(str(tmp_path / "link"), 10, follow=True) == b"ok"


def test_open_beneath_stays_under_its_root_and_follows_no_link(tmp_path):
    root = tmp_path / "root"
    (root / "usr" / "lib").mkdir(parents=True)
    (root / "usr" / "lib" / "libx.so").write_bytes(b"elf")
    fd = safe_file.open_beneath(str(root), "/usr/lib/libx.so")
    assert os.read(fd, 10) == b"elf"
    os.close(fd)
    outside = tmp_path / "secret"
    outside.write_bytes(b"not yours")
    (root / "etc").symlink_to(tmp_path)  # an absolute link would leave the root if followed
    with pytest.raises(Unsafe, match="'etc' on the way is not a directory"):
        safe_file.open_beneath(str(root), "/etc/secret")
    (root / "usr" / "lib" / "liby.so").symlink_to(outside)
    with pytest.raises(Unsafe, match="symbolic link"):
        safe_file.open_beneath(str(root), "/usr/lib/liby.so")
    with pytest.raises(Unsafe, match=r"'\.\.'"):
        safe_file.open_beneath(str(root), "/usr/../../secret")


def test_open_beneath_never_blocks_on_a_fifo_on_the_way_or_at_the_end(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    os.mkfifo(root / "lib")
    with pytest.raises(Unsafe, match="on the way is not a directory"):
        _in_time(lambda: safe_file.open_beneath(str(root), "/lib/libopenblas.so"))
    os.mkfifo(root / "libopenblas.so")
    with pytest.raises(Unsafe, match="FIFO"):
        _in_time(lambda: safe_file.open_beneath(str(root), "/libopenblas.so"))


def test_open_beneath_through_a_process_root(tmp_path):
    """/proc/PID/root is a link the kernel resolves: followed as the root, nothing after it."""
    f = tmp_path / "lib.so"
    f.write_bytes(b"\x7fELF")
    fd = safe_file.open_beneath(f"/proc/{os.getpid()}/root", str(f))
    try:
        assert os.read(fd, 4) == b"\x7fELF"
    finally:
        os.close(fd)


def test_writable_dir_makes_what_is_missing_and_create_replaces_an_old_file(tmp_path):
    fd = safe_file.writable_dir(str(tmp_path / "a" / "b"), mode=0o700)
    try:
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o700
        out = safe_file.create(fd, "instance-0.log")
        os.write(out, b"one")
        os.close(out)
        out = safe_file.create(fd, "instance-0.log")  # a second run empties it
        os.close(out)
    finally:
        os.close(fd)
    assert (tmp_path / "a" / "b" / "instance-0.log").read_bytes() == b""


def test_create_never_writes_through_a_link_put_in_its_place(tmp_path):
    target = tmp_path / "passwd"
    target.write_bytes(b"root file")
    d = tmp_path / "logs"
    d.mkdir()
    (d / "instance-0.log").symlink_to(target)
    fd = safe_file.writable_dir(str(d))
    try:
        os.close(safe_file.create(fd, "instance-0.log"))
    finally:
        os.close(fd)
    assert target.read_bytes() == b"root file"
    assert not (d / "instance-0.log").is_symlink()
    with pytest.raises(Unsafe):
        safe_file.create(fd, "../x")


def test_a_directory_others_may_write_is_refused(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    with pytest.raises(Unsafe, match="writable by every user: parinfo creates files only in a folder"):
        safe_file.writable_dir(str(d))
    d.chmod(0o1777)  # sticky: fine to pass through, not to write in
    with pytest.raises(Unsafe, match="writable by every user"):
        safe_file.writable_dir(str(d))
    fd = safe_file.writable_dir(str(d / "mine"))
    os.close(fd)


@ROOT
def test_root_refuses_another_users_directory_and_links(tmp_path):
    tmp_path.chmod(0o755)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(Unsafe, match=f"owned by uid {NOBODY}"):
        safe_file.writable_dir(str(theirs))
    with pytest.raises(Unsafe, match=f"{theirs} on the way is owned by uid {NOBODY}"):
        safe_file.writable_dir(str(theirs / "sub"), make=False)
    etc = tmp_path / "etc"
    etc.mkdir()
    link = tmp_path / "logs"
    link.symlink_to(etc)
    os.chown(link, NOBODY, NOBODY, follow_symlinks=False)
    with pytest.raises(Unsafe, match=f"link owned by uid {NOBODY}"):
        safe_file.writable_dir(str(link))
    mine = tmp_path / "mine"
    mine.symlink_to(etc)  # root's own link is followed
    os.close(safe_file.writable_dir(str(mine)))


def test_a_swap_to_a_link_between_look_and_open_is_caught(tmp_path, monkeypatch):
    """A directory replaced by a link after it was looked at is opened with O_NOFOLLOW: refused."""
    d = tmp_path / "d"
    d.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    real_stat = os.stat

    def swapping(path, *a, **kw):
        st = real_stat(path, *a, **kw)
        if path == "d" and not (tmp_path / "d").is_symlink():
            os.rmdir(d)
            d.symlink_to(elsewhere)
        return st

    monkeypatch.setattr(os, "stat", swapping)
    with pytest.raises(Unsafe, match="is not a directory"):
        safe_file.writable_dir(str(d))


def test_kind_words():
    assert safe_file.kind(stat.S_IFIFO | 0o600) == "a FIFO"
    assert safe_file.kind(stat.S_IFREG | 0o600) == "a regular file"


def test_reading_stops_at_the_limit_on_an_endless_source(tmp_path):
    """The bound holds for a file that keeps growing while it is read."""
    f = tmp_path / "grow"
    f.write_bytes(b"")
    stop = time.monotonic() + 2
    writer = threading.Thread(target=lambda: [f.open("ab").write(b"y" * 4096) for _ in range(200)
                                              if time.monotonic() < stop], daemon=True)
    writer.start()
    data = safe_file.read_file(str(f), 8192)
    writer.join()
    assert len(data) <= 8192


def test_the_helper_is_used_from_a_path_object(tmp_path: Path):
    (tmp_path / "p").write_text("x")
    assert safe_file.read_file(os.fspath(tmp_path / "p"), 5) == b"x"
