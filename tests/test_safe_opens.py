"""Issue 36: the readers and writers moved to parinfo.safe_file meet a FIFO, a link or another
user's folder where they expect a file, and neither block nor write through it."""
from __future__ import annotations

import os
import types
from pathlib import Path

import pytest

from parinfo import safe_file
from parinfo.process import preload, shipped
from parinfo.runtime.tracing import Profile, Recorders

ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to another user)")


@pytest.mark.timeout(30)
def test_the_pytest_plugin_skips_a_fifo_named_like_a_test_file(tmp_path):
    from parinfo.pytest_plugin import _session_imports

    os.mkfifo(tmp_path / "test_fifo.py")
    (tmp_path / "test_real.py").write_text("import numpy\n")
    config = types.SimpleNamespace(args=[str(tmp_path)], rootpath=tmp_path)
    assert _session_imports(config) == {"numpy"}  # type: ignore[arg-type]


@pytest.mark.timeout(30)
def test_ld_so_conf_and_dist_info_fifos_are_skipped(tmp_path):
    os.mkfifo(tmp_path / "ld.so.conf")
    assert preload._ld_so_conf(str(tmp_path / "ld.so.conf"), set()) == []
    info = tmp_path / "mylib-1.0.dist-info"
    info.mkdir()
    os.mkfifo(info / "top_level.txt")
    os.mkfifo(info / "RECORD")
    assert shipped._ships(str(tmp_path), "mylib.libs", "other") is False


def test_create_at_replaces_a_link_or_fifo_and_takes_a_sticky_folder(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep")
    link = tmp_path / "out.json"
    link.symlink_to(target)
    fd = safe_file.create_at(str(link))
    os.write(fd, b"new")
    os.close(fd)
    assert target.read_text() == "keep" and not link.is_symlink() and link.read_text() == "new"
    os.mkfifo(tmp_path / "fifo.json")
    os.close(safe_file.create_at(str(tmp_path / "fifo.json")))
    assert (tmp_path / "fifo.json").is_file()
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    os.close(safe_file.create_at(str(sticky / "a")))
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(safe_file.Unsafe, match="writable by every user"):
        safe_file.create_at(str(open_dir / "a"))


@ROOT
def test_a_trace_is_not_written_into_another_users_folder(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    tracer = Profile(Recorders())
    with tracer:
        pass
    with pytest.raises(safe_file.Unsafe, match="owned by uid 65534"):
        tracer.export_chrome_trace(theirs / "trace.json")
    assert not (theirs / "trace.json").exists()
    tracer.export_chrome_trace(tmp_path / "trace.json")
    assert Path(tmp_path / "trace.json").read_text().startswith("{")
