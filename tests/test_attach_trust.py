"""Attach against a hostile target's user: the places it chose for the channel, races on the
channel, hostile answers, many attaches at once. Real 3.14 processes (tests/py314.py) run as user
nobody, in their own user and mount namespaces where the kernel allows (skipped, with why, where a
capability is missing); parinfo runs as root, as it often does.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, clean_env

from parinfo.process.attach import channel as chan

NOBODY = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]
# A busy target: its main thread runs Python code all the time.
BUSY = "import time\nwhile True:\n    sum(range(1000))\n"
# The places a target in its own namespaces may mount over its /dev/shm and /tmp.
ROOTS_OWN = ("/etc", "/usr/lib", "/root")


def _needs_root(python: str) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv")
    done = subprocess.run([*NOBODY, python, "-c", "pass"], capture_output=True, cwd="/")
    if done.returncode != 0:
        pytest.skip("user nobody cannot run the 3.14 interpreter")


def _parinfo(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parinfo", *args], capture_output=True, text=True, timeout=timeout,
                          env=clean_env(PYTHONPATH=str(REPO)), cwd=str(REPO))


def _channels(*dirs: str) -> set[str]:
    return {str(p) for d in dirs for p in Path(d).glob(chan.PREFIX + "*")}


def _start(cmd: list[str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)
    if proc.poll() is not None:
        err = proc.stderr.read().decode(errors="replace")[-300:] if proc.stderr else ""
        pytest.skip(f"the namespaced target did not start (user namespaces off?): {err}")
    return proc


def _end(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()


def _one_line_or_json(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    if done.returncode == 0:
        json.loads(done.stdout)
    else:
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("over", ["/dev/shm", "/dev/shm and /tmp"])
@pytest.mark.parametrize("mounted", ROOTS_OWN)
def test_root_makes_nothing_where_the_targets_user_could_not(py314_python: str, mounted: str, over: str) -> None:
    """nobody's target, in its own user and mount namespaces, bind-mounts a directory of root's over
    its /dev/shm (and /tmp): root's attach makes nothing there; it goes through /tmp, which nobody
    may write, or refuses in one line; nothing is left anywhere."""
    _needs_root(py314_python)
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    if not os.path.isdir(mounted):
        pytest.skip(f"no {mounted} here")
    binds = " && ".join(f"mount --bind {mounted} {d}" for d in over.split(" and "))
    watched = (mounted, "/dev/shm", "/tmp")
    before = _channels(*watched)
    target = _start([*NOBODY, "unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                     f"{binds} && exec {py314_python} -c '{BUSY}'"])
    try:
        done = _parinfo("show", "--pid", str(target.pid), "--attach", "--json", "--timeout", "5")
    finally:
        _end(target)
    _one_line_or_json(done)
    if over == "/dev/shm":
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode == 2
        assert "no place the process's own user could write" in done.stderr
    assert _channels(*watched) == before


RACER = r'''
import os, sys, time
bases, stop = sys.argv[1:-1], time.monotonic() + float(sys.argv[-1])
n = 0
while time.monotonic() < stop:
    for base in bases:
        for name in os.listdir(base):
            if not name.startswith("parinfo-attach-") or name.startswith("parinfo-attach-racer"):
                continue
            inner = os.path.join(base, name)
            for entry in ("s.py", "r", "x"):
                for make in (lambda p: open(p, "x").close(), lambda p: os.symlink("/etc/passwd", p),
                             lambda p: os.mkfifo(p), lambda p: os.rename(inner, inner + "-moved")):
                    try:
                        make(os.path.join(inner, entry))
                    except OSError:
                        pass
        n += 1
        junk = os.path.join(base, "parinfo-attach-racer%d" % n)
        for make in (lambda p: open(p, "x").close(), lambda p: os.symlink("/etc", p), lambda p: os.mkfifo(p)):
            try:
                make(junk + "-" + str(id(make)))
            except OSError:
                pass
'''


def test_races_on_the_channel_give_refusals_not_tracebacks_and_leave_nothing(py314_python: str) -> None:
    """nobody races files, links and FIFOs into the bases and into every attach folder it sees while
    root attaches to nobody's busy process again and again: each attach answers or refuses in one
    line, and no channel of root's is left."""
    _needs_root(py314_python)
    before = _channels("/dev/shm", "/tmp")
    target = _start([*NOBODY, py314_python, "-c", BUSY])
    racer = subprocess.Popen([*NOBODY, sys.executable, "-c", RACER, "/dev/shm", "/tmp", "60"], cwd="/")
    try:
        results = [_parinfo("show", "--pid", str(target.pid), "--attach", "--json", "--timeout", "5")
                   for _ in range(6)]
    finally:
        _end(racer)
        _end(target)
        for junk in _channels("/dev/shm", "/tmp") - before:
            if os.lstat(junk).st_uid != 0:
                subprocess.run(["rm", "-rf", junk], check=False)
    for done in results:
        _one_line_or_json(done)
    assert sum(d.returncode == 0 for d in results) >= 1, [d.stderr for d in results]
    assert {p for p in _channels("/dev/shm", "/tmp") - before if os.lstat(p).st_uid == 0} == set()
