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

from parinfo.machine.procfs import Proc
from parinfo.outside.attach import channel as chan

pytestmark = pytest.mark.once  # real servers, processes or cgroups: .ci/run runs these on its first Python only

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


# A hostile target: an audit hook that, when parinfo's script comes, answers parinfo's FIFO itself
# (its user owns that FIFO and can read the script) with an answer of its choosing, then refuses
# the script. ANSWER is the answer's text, with TOKEN and PID to fill in.
HOSTILE = r'''
import ast, os, sys
ANSWER = {answer!r}
def hook(event, args):
    if event != "cpython.remote_debugger_script" or args[0] == os.devnull:
        return
    text = open(args[0]).read()
    data = ast.literal_eval(ast.parse(text).body[-1].value.args[0])
    fd = os.open(data["fifo"], os.O_WRONLY | os.O_NONBLOCK)
    text = ANSWER.replace("TOKEN", data["token"]).replace("PID", str(os.getpid()))
    text = text.replace("HUGE", str(10 ** 18)).replace("DIGITS", "9" * 6000)  # not in the command line
    os.write(fd, text.replace("DEEP", "[" * 100000 + "]" * 100000).encode())
    os.close(fd)
    raise RuntimeError("answered by the target itself")
sys.addaudithook(hook)
import numpy
while True:
    sum(range(1000))
'''

_BASE = ('{"token": "TOKEN", "pid": PID, "python": {"version": "3.14.0", "version_info": [3, 14, 0]}, '
         '"environ": {"OMP_NUM_THREADS": "1e999"}, "modules": ["parinfo", "numexpr"], ')
HOSTILE_ANSWERS = {
    "attribute-like keys": _BASE + '"threads": [1, []], "pools": [], "errors": {}, "python_libs": [{"name": '
    '"numexpr", "file": "/x/numexpr.py", "count": 2, "facts": {"__class__": 1, "a.__dict__": 2, "__dict__": 3, '
    '"ncores.__class__": 4, "ncores": 1e999}}], "parinfo": null}',
    "huge and negative counts": _BASE + '"threads": [-5, [[1e999, "x", true]]], "pools": [{"path": "PATH", '
    '"count": HUGE}], "errors": {}, "python_libs": [{"name": "numexpr", "count": -3}], '
    '"parinfo": {"version": "9", "runtime_loaded": true, "state": {"info": {"intra_op": {"count": '
    'HUGE, "source": {"kind": "explicit", "detail": "x", "text": "x"}}, "inter_op": {"count": -3}, '
    '"pool_ceiling": 1e999, "pool_threads": -1, "follow": {"interval_s": 1e999, "usable_cpus": 1e999}}}}}',
    "1e999 everywhere": _BASE + '"threads": [1e999, []], "pools": [{"path": "PATH", "count": 1e999}], '
    '"errors": {"x": 1e999}, "python_libs": [], "parinfo": {"version": 1e999, "runtime_loaded": true, '
    '"state": {"info": {"intra_op": {"count": 1e999}, "follow": {"interval_s": -1e999}}}}, "torch": '
    '{"intra_op": 1e999, "inter_op": -1e999}}',
    "a fake torch": _BASE.replace('"numexpr"', '"torch"') + '"threads": [1, []], "pools": [], "errors": {}, '
    '"python_libs": [], "parinfo": null, "torch": {"version": "9", "intra_op": HUGE, "inter_op": -3, '
    '"parallel_info": "at::get_num_threads() : HUGE\\nat::get_num_interop_threads() : -3\\n'
    'omp_get_max_threads() : DIGITS\\nhardware_concurrency() : HUGE\\n"}}',
    "deep nesting": _BASE + '"threads": DEEP, "pools": [], "errors": {}, '
    '"python_libs": [], "parinfo": null}',
}


def _strict_json(text: str) -> dict:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _hostile(py314: str, kind: str) -> subprocess.Popen[bytes]:
    answer = HOSTILE_ANSWERS[kind]
    libs = subprocess.run([py314, "-c", "import numpy, threadpoolctl; print(threadpoolctl.threadpool_info()[0]"
                           "['filepath'])"], capture_output=True, text=True).stdout.strip()
    return _start([*NOBODY, py314, "-c", HOSTILE.format(answer=answer.replace("PATH", libs))])


@pytest.mark.parametrize("kind", list(HOSTILE_ANSWERS))
def test_a_hostile_answer_gives_unknowns_never_a_traceback_and_valid_json(py314_python: str, kind: str) -> None:
    """The target answers itself: attribute-like keys set nothing, counts out of 1..MAX_COUNT and
    numbers that are not finite are unknown, the JSON printed is valid; too deep an answer is
    refused in one line."""
    _needs_root(py314_python)
    target = _hostile(py314_python, kind)
    try:
        done = _parinfo("show", "--pid", str(target.pid), "--attach", "--json", "--timeout", "5")
        checked = _parinfo("show", "--pid", str(target.pid), "--attach", "--check", "--timeout", "5")
    finally:
        _end(target)
    _one_line_or_json(done)
    assert "Traceback" not in checked.stderr and checked.returncode in (0, 1, 2), checked.stderr
    if kind == "deep nesting":
        assert done.returncode == 2 and "cannot be read" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    report = _strict_json(done.stdout)
    assert "Infinity" not in done.stdout
    if kind == "a fake torch":
        torch = report["frameworks"]["torch"]
        assert [torch[k] for k in ("intra_op", "inter_op", "omp_max_threads", "hardware_concurrency")] == [None] * 4
    else:
        assert "1000000000000000000" not in done.stdout
    counts = [r["count"] for r in report["settings"]] + [p["num_threads"] for p in report["pools"]]
    assert all(c is None or 1 <= c <= 1 << 16 for c in counts), counts
    runtime = report["runtime"]
    for key in ("intra_op", "inter_op"):
        assert (runtime.get(key) or {}).get("count") is None
    shown = [line for line in checked.stdout.splitlines() if "parallel" not in line]  # torch's text aside
    assert not any("1000000000000000000" in line for line in shown)


def test_host_attach_reports_every_other_process_beside_a_hostile_one(py314_python: str) -> None:
    """``host --attach`` (scoped to nobody's processes): a target whose answer is hostile is one row
    among the others, each of which is still read inside."""
    _needs_root(py314_python)
    hostile = _hostile(py314_python, "attribute-like keys")
    plain = _start([*NOBODY, py314_python, "-c", "import numpy\n" + BUSY])
    try:
        done = _parinfo("host", "--once", "--attach", "--json", "--user", "nobody", "--timeout", "5",
                        "--interval", "0.1")
    finally:
        _end(hostile)
        _end(plain)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    host = _strict_json(done.stdout)
    rows = {p["pid"]: p for p in host["processes"]}
    assert {hostile.pid, plain.pid} <= set(rows), host["notes"]
    assert rows[plain.pid]["pools"] and all(p["attached"] for p in rows[plain.pid]["pools"]), host["notes"]


def test_one_process_that_breaks_its_read_is_one_row_not_the_end_of_the_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever one process's attach raises, the scan goes on: that process is read from outside and
    the notes say why its attach failed; ``show --children --attach`` likewise; ``show --attach``
    and ``watch --attach`` get one line."""
    from parinfo.diagnostics import attached
    from parinfo.host.scanner import Scanner
    from parinfo.outside.attach import AttachError

    def broken(*args: object, **kwargs: object) -> None:
        raise TypeError("attribute name must be string")

    monkeypatch.setattr(attached, "read_inside", broken)
    scanner = Scanner(user=os.geteuid(), attach=1.0)
    child = subprocess.Popen([sys.executable, "-c", "import numpy, time; print('up', flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        report = scanner.scan()
        tree = attached.read_tree([Proc.of(child.pid)], 1.0)
        with pytest.raises(AttachError, match="could not be made into a report"):
            attached.read_process(Proc.of(child.pid), 1.0)  # show --attach, watch --attach: one line
    finally:
        child.kill()
        child.wait()
    assert child.pid in {p.pid for p in report.processes}
    assert any(f"pid {child.pid}'s answer could not be made into a report (TypeError" in n for n in report.notes)
    assert [(r.pid, r.attached) for r in tree.reads] == [(child.pid, False)]
    assert "could not be made into a report" in tree.reads[0].how


def test_json_out_is_valid_whatever_a_value_holds_and_floats_read_are_finite() -> None:
    from parinfo.outside.attach.result import parse
    from parinfo.records.convert import dumps, load
    from parinfo.runtime.snapshot import RuntimeSection

    text = dumps({"a": [float("inf"), -float("inf"), float("nan"), 1.5], "b": {"c": float("inf")}}, indent=2)
    assert _strict_json(text) == {"a": [None, None, None, 1.5], "b": {"c": None}}
    section = load(RuntimeSection, {"follow": {"interval_s": float("inf"), "usable_cpus": 10 ** 18},
                                    "intra_op": {"count": 0}, "pool_threads": -1, "pool_ceiling": 4}, strict=False)
    assert section.follow is not None and section.follow.interval_s is None and section.follow.usable_cpus is None
    assert section.intra_op is not None and section.intra_op.count is None
    assert (section.pool_threads, section.pool_ceiling) == (None, 4)
    answer = parse(b' {"token": "t", "pid": 7, "python": {"version": "3.14.0"}, "threads": [1e999, []], "pools": '
                   b'[{"path": "/x", "count": 1e999}], "environ": {}, "modules": [], "python_libs": [], "errors": {}}',
                   "t", 7)
    assert answer.python_threads is None and answer.pools["/x"].count is None


def test_twenty_attaches_at_once_take_turns_and_each_answers(py314_python: str) -> None:
    """20 ``show --attach --json`` started at once against one busy target: sys.remote_exec keeps one
    pending script per thread, so they take turns; each gives the target's report, or refuses in one
    line naming the attach still pending; all within bounded time."""
    target = subprocess.Popen([py314_python, "-c", "import numpy\n" + BUSY], cwd="/")
    time.sleep(1.0)
    began = time.monotonic()
    try:
        runs = [subprocess.Popen([sys.executable, "-m", "parinfo", "show", "--pid", str(target.pid), "--attach",
                                  "--json", "--timeout", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=clean_env(PYTHONPATH=str(REPO)), cwd=str(REPO)) for _ in range(20)]
        results = [(run.communicate(timeout=180), run.returncode) for run in runs]
    finally:
        _end(target)
    took = time.monotonic() - began
    for (out, err), code in results:
        assert "Traceback" not in err, err
        if code == 0:
            assert _strict_json(out)["process"]["pid"] == target.pid
        else:
            assert code == 2 and len(err.strip().splitlines()) == 1, err
            assert "another attach to this process is pending" in err, err
    assert sum(code == 0 for _, code in results) >= 18, [err for (_, err), _ in results]
    assert took < 150


def test_the_reason_for_no_answer_is_the_one_observed(py314_python: str) -> None:
    """A target that exits, one that starts another program, one whose audit hook refuses the script,
    one whose script is slow (a getter that sleeps): each no-answer line says what happened there."""
    up = "print('up', flush=True)\n"
    exits = subprocess.Popen([py314_python, "-c", "import sys, time\nsys.addaudithook(lambda e, a: e.startswith("
                              "'cpython.remote_debugger') and a[0] != '/dev/null' and __import__('os')._exit(0))\n"
                              + up + "while True: sum(range(1000))"], cwd="/", stdout=subprocess.PIPE, text=True)
    execs = subprocess.Popen([py314_python, "-c", "import os, sys\nsys.addaudithook(lambda e, a: e.startswith("
                              "'cpython.remote_debugger') and a[0] != '/dev/null' and os.execv('/bin/sleep', "
                              "['sleep', '30']))\n" + up + "while True: sum(range(1000))"], cwd="/",
                             stdout=subprocess.PIPE, text=True)
    refuses = subprocess.Popen([py314_python, "-c", "import sys\ndef no(e, a):\n    if e.startswith("
                                "'cpython.remote_debugger'): raise RuntimeError('no')\nsys.addaudithook(no)\n"
                                + up + "while True: sum(range(1000))"], cwd="/", stderr=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, text=True)
    slow = subprocess.Popen([py314_python, "-c", "import sys, time, types\nslow = types.ModuleType('numexpr')\n"
                             "slow.get_num_threads = lambda: time.sleep(60) or 1\nsys.modules['numexpr'] = slow\n"
                             + up + "while True: sum(range(1000))"], cwd="/", stdout=subprocess.PIPE, text=True)
    cases = (("exits", exits), ("execs", execs), ("refuses", refuses), ("slow", slow))
    try:
        for _, p in cases:  # each target runs its loop before it is attached to, however busy the machine
            assert p.stdout is not None and p.stdout.readline() == "up\n"
        # A timeout long enough for a busy machine to run the script; the slow getter outlasts it.
        done = {name: _parinfo("show", "--pid", str(p.pid), "--attach", "--timeout", "8") for name, p in cases}
    finally:
        for _, p in cases:
            _end(p)
    for name, words in (("exits", "exited"), ("execs", "started another program (exec)"),
                        ("refuses", "an audit hook in it refused the script"),
                        ("slow", "began the attach script but did not finish its answer within 8 s")):
        result = done[name]
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert words in result.stderr, (name, result.stderr)


def test_an_attach_whose_turn_never_comes_names_the_pending_attach(py314_python: str) -> None:
    """Another attach holds the process's turn past the deadline: one line naming it, in bounded time."""
    import fcntl

    target = subprocess.Popen([py314_python, "-c", BUSY], cwd="/")
    time.sleep(0.5)
    fd = os.open(f"/proc/{target.pid}/mem", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        began = time.monotonic()
        done = _parinfo("show", "--pid", str(target.pid), "--attach", "--timeout", "1")
        took = time.monotonic() - began
    finally:
        os.close(fd)
        _end(target)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "another attach to this process is pending" in done.stderr
    assert took < 8


def test_host_serve_attach_answers_every_scrape_beside_a_hostile_process(py314_python: str) -> None:
    """``host --serve --attach``: with a hostile target among nobody's processes, every scrape is
    answered (HTTP 200) and still holds the other process's series."""
    import socket
    import urllib.request

    _needs_root(py314_python)
    pytest.importorskip("prometheus_client")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    hostile = _hostile(py314_python, "attribute-like keys")
    plain = _start([*NOBODY, py314_python, "-c", "import numpy\n" + BUSY])
    server = subprocess.Popen([sys.executable, "-m", "parinfo", "host", "--serve", f"127.0.0.1:{port}", "--attach",
                               "--user", "nobody", "--timeout", "5"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=clean_env(PYTHONPATH=str(REPO)), cwd=str(REPO))
    try:
        bodies = []
        deadline = time.monotonic() + 60
        while len(bodies) < 2 and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
                    assert reply.status == 200
                    bodies.append(reply.read().decode())
            except urllib.error.HTTPError as exc:
                pytest.fail(f"a scrape failed: HTTP {exc.code}")
            except OSError:
                time.sleep(0.2)  # not listening yet
    finally:
        server.terminate()
        err = server.communicate(timeout=30)[1].decode(errors="replace")
        _end(hostile)
        _end(plain)
    assert len(bodies) == 2, err
    assert "Traceback" not in err, err
    assert all(f'pid="{plain.pid}"' in body for body in bodies), bodies[-1][:2000]
