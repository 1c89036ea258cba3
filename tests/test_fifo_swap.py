"""A process of another user that maps a file named like OpenBLAS and swaps its path for a FIFO
(issue 36): the readers of another process (the count in force, `show --pid`, `host --once`,
`host --serve`) open that path only through parinfo.safe_file, so none of them blocks; each read
finishes within its bound with "unknown (why)" where the file could not be opened."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import clean_env, run_cli, start_target, stop_target
from prometheus_server import scrape, serve, stop

from parinfo.machine.procfs import Proc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux")

AS_NOBODY = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]
NOBODY = 65534
#: Seconds one read of the swapping process may take (a blocked open would take forever).
BOUND = 30

# Maps its copy of an ELF file named libopenblas.so for a few ms, unmaps it and puts a FIFO in its
# place for a few ms, over and over, in a thread; prints its pid's readiness, then waits on stdin.
SWAPPER = """
import json, mmap, os, sys, threading, time
folder = sys.argv[1]
lib, aside = os.path.join(folder, "libopenblas.so"), os.path.join(folder, "aside")
with open(sys.argv[2], "rb") as src, open(lib, "wb") as dst:
    dst.write(src.read())
done = threading.Event()
def swap():
    while not done.is_set():
        with open(lib, "rb") as fh:
            kept = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
        time.sleep(0.004)
        kept.close()
        os.rename(lib, aside)
        os.mkfifo(lib)
        time.sleep(0.004)
        os.unlink(lib)
        os.rename(aside, lib)
threading.Thread(target=swap, daemon=True).start()
print(json.dumps({"ready": True}), flush=True)
sys.stdin.readline()
done.set()
"""


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder of the user nobody's (or this user's, when not root), inside one every user may enter."""
    outer = Path(tempfile.mkdtemp(prefix="parinfo-fifo-"))
    outer.chmod(0o755)
    inner = outer / "lib"
    inner.mkdir()
    if os.geteuid() == 0:
        os.chown(inner, NOBODY, -1)
    try:
        yield inner
    finally:
        shutil.rmtree(outer, ignore_errors=True)


def _prefix() -> list[str] | None:
    return AS_NOBODY if os.geteuid() == 0 and shutil.which("setpriv") else None


@pytest.fixture
def swapper(folder) -> Iterator[subprocess.Popen]:
    """The swapping process (nobody's when root runs the tests)."""
    proc, _ = start_target(SWAPPER, str(folder), "/bin/true", env=clean_env(HOME="/tmp"), prefix=_prefix())
    try:
        yield proc
    finally:
        stop_target(proc)


def _no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), done.stdout + done.stderr


def test_the_fallback_open_refuses_a_fifo_or_a_link_without_blocking(folder):
    """No mapping at START-END (map_files fails, as after an munmap), so the path under the
    process's root is tried: a FIFO, a link to a real file, and a link on the way are each refused."""
    if os.geteuid() == 0:
        os.chown(folder, 0, -1)
    os.mkfifo(folder / "libopenblas.so")
    real = folder / "real.so"
    shutil.copyfile("/bin/true", real)
    (folder / "libopenblas_link.so").symlink_to(real)
    (folder / "dir").symlink_to(folder)
    proc = Proc(os.getpid())
    for name, why in [("libopenblas.so", "is a FIFO, not a regular file"),
                      ("libopenblas_link.so", "symbolic link"),
                      ("dir/real.so", "on the way is not a directory")]:
        started = time.monotonic()
        fd, reason = proc.open_mapping(0x1000, 0x2000, str(folder / name), 0, False)
        assert fd is None and why in reason, (name, reason)
        assert time.monotonic() - started < 5
    fd, reason = proc.open_mapping(0x1000, 0x2000, str(real), real.stat().st_ino, False)
    assert fd is not None and stat.S_ISREG(os.fstat(fd).st_mode)
    os.close(fd)
    fd, reason = proc.open_mapping(0x1000, 0x2000, str(real), real.stat().st_ino + 1, False)
    assert fd is None and "replaced after the process loaded it" in reason


def test_show_pid_and_host_once_finish_against_a_fifo_swapping_process(swapper):
    for _ in range(3):
        started = time.monotonic()
        done = run_cli("show", "--pid", str(swapper.pid), timeout=BOUND)
        assert time.monotonic() - started < BOUND
        _no_traceback(done)
    user = ["--user", "nobody"] if os.geteuid() == 0 else []
    for _ in range(3):
        done = run_cli("host", "--once", "--interval", "0.2", *user, timeout=BOUND)
        _no_traceback(done)


@pytest.mark.skipif(__import__("importlib").util.find_spec("prometheus_client") is None,
                    reason="needs prometheus_client")
def test_host_serve_answers_every_scrape_while_and_after_a_process_swaps_fifos(swapper):
    user = ["--user", "nobody"] if os.geteuid() == 0 else []
    server, port = serve("host", *user)
    try:
        for _ in range(8):
            started = time.monotonic()
            assert "parinfo" in scrape(port)  # urllib's timeout (10 s) bounds each scrape
            assert time.monotonic() - started < 10
        stop_target(swapper)
        for _ in range(3):
            assert "parinfo" in scrape(port)
    finally:
        _, err = stop(server)
    assert "Traceback" not in err, err
