"""Attach (``show --pid PID --attach``): real Python 3.14 processes read from inside through
sys.remote_exec, from parinfo on this interpreter and on 3.14, checked against each target's own
``parinfo.inspect()``; what the target holds is unchanged; every refusal is one line and exit 2 in
bounded time; the channel is private. Targets need the 3.14 interpreter of tests/py314.py (skipped
cleanly without it); the parser, the script's encoder, that the script imports nothing and the channel
are checked on any Python.
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, clean_env

from parinfo.outside.attach import channel as chan, in_target, script_data
from parinfo.outside.attach.result import MAX_COUNT, BadAnswer, parse

# A target: PREP, then "ready", then commands on stdin, each answered by one JSON line: "state"
# (its modules, environment and Python threads), "report" (its own parinfo.inspect()). Its main
# thread waits in select() with a short timeout (it runs Python code every 20 ms), or with WAIT_IN_C
# in readline() (a call into C that returns only when a line comes).
TARGET = r'''
import json, os, select, sys, threading
{prep}
print("ready", flush=True)

def state():
    return {{"modules": sorted(sys.modules), "environ": dict(os.environ),
             "threads": sorted(t.name for t in threading.enumerate())}}

while True:
    if {wait_in_c}:
        line = sys.stdin.readline()
    else:
        if not select.select([sys.stdin], [], [], 0.02)[0]:
            continue
        line = sys.stdin.readline()
    if not line:
        break
    if line.strip() == "state":
        print(json.dumps(state()), flush=True)
    elif line.strip() == "events":
        print(json.dumps(globals().get("audit", [])), flush=True)
    elif line.strip() == "report":
        import parinfo
        print(json.dumps(parinfo.inspect().to_dict(), default=str), flush=True)
'''

NUMPY_LIMITED = '''
import numpy
from threadpoolctl import threadpool_limits
threadpool_limits(1)
os.environ["OMP_NUM_THREADS"] = "3"
stop = threading.Event()
for name in ("ingest-worker", "score-worker-1"):
    threading.Thread(target=stop.wait, name=name, daemon=True).start()
'''

# numpy's and scipy's OpenBLAS, scikit-learn's libgomp limited in the main thread, numexpr set at run time
THREE_POOLS = '''
import numpy, scipy.linalg, numexpr
from sklearn.utils._openmp_helpers import _openmp_effective_n_threads
from threadpoolctl import threadpool_limits
threadpool_limits(1, user_api="openmp")
numexpr.set_num_threads(1)
'''

PARINFO_RUNTIME = NUMPY_LIMITED + '''
import parinfo
parinfo.set_num_threads(1)
'''


class Target:
    """A 3.14 process running TARGET; ``ask`` sends a command and returns its JSON answer."""

    def __init__(self, python: str, prep: str = "", *, wait_in_c: bool = False, args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        code = TARGET.format(prep=prep, wait_in_c=wait_in_c)
        self.proc = subprocess.Popen([python, *args, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     env=env or clean_env(PYTHONPATH=str(REPO)))
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if line.strip() != "ready":
            self.proc.kill()
            pytest.fail(f"the target did not start: {self.proc.communicate()[1][-2000:]}")
        self.pid = self.proc.pid

    def ask(self, command: str) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def stop(self) -> str:
        """End it; its standard error."""
        try:
            _, err = self.proc.communicate(input="", timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err


def _parinfo(python: str, *args: str, timeout: float = 60, user: str | None = None) -> subprocess.CompletedProcess:
    as_user = ["setpriv", "--reuid", user, "--regid", "nogroup", "--clear-groups"] if user else []
    return subprocess.run([*as_user, python, "-m", "parinfo", *args], capture_output=True, text=True, timeout=timeout,
                          env=clean_env(PYTHONPATH=str(REPO)), cwd=str(REPO))


def _attached(python: str, pid: int, *extra: str) -> dict:
    done = _parinfo(python, "show", "--pid", str(pid), "--attach", "--json", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _settings(report: dict, own_pools: bool) -> dict:
    return {(r["library"], r.get("filepath")): (r["count"], r["source"]) for r in report["settings"]
            if own_pools or not r["library"].startswith("parinfo ")}


def _pools(report: dict) -> dict:
    return {(p["library"], p["filepath"]): (p["num_threads"], p["threading_layer"], p["version"], p["architecture"])
            for p in report["pools"]}


def _parinfo_on(which: str, py314: str) -> str:
    return sys.executable if which == "parinfo on this Python" else py314


SIDES = ["parinfo on this Python", "parinfo on 3.14"]


@pytest.mark.parametrize("side", SIDES)
def test_counts_agree_with_the_targets_own_inspect(py314_python: str, side: str) -> None:
    """numpy limited to 1 after import, a variable changed after launch, named threads: every count
    and source of the attached report is the target's own; nothing in the target changed."""
    target = Target(py314_python, NUMPY_LIMITED)
    try:
        before = target.ask("state")
        attached = _attached(_parinfo_on(side, py314_python), target.pid)
        after = target.ask("state")
        own = target.ask("report")
    finally:
        err = target.stop()
    assert before == after
    assert err == ""
    assert "parinfo" not in before["modules"]
    assert _settings(attached, own_pools=False) == _settings(own, own_pools=False)
    assert ("openblas", own["pools"][0]["filepath"]) in _settings(attached, own_pools=False)
    assert [r["count"] for r in attached["settings"] if r["library"] == "openblas"] == [1]
    assert _pools(attached) == _pools(own)
    assert attached["environment"] == own["environment"]
    assert attached["backend"]["python"] == own["backend"]["python"]
    assert attached["outer"] == own["outer"]
    assert "unknown" in attached["runtime"]  # parinfo is not imported there: no runtime to read
    names = {t.get("python_name") for t in attached["threads"]["threads"]}
    assert {"MainThread", "ingest-worker", "score-worker-1"} <= names
    assert attached["process"]["python"] == own["process"]["python"]


@pytest.mark.parametrize("side", SIDES)
def test_openmp_and_python_module_pools_agree_with_the_targets_own_inspect(py314_python: str, side: str) -> None:
    """Two OpenBLAS copies, libgomp limited in the main thread (where the script runs), numexpr set at
    run time: the attached counts and sources are the target's own."""
    target = Target(py314_python, THREE_POOLS)
    try:
        before = target.ask("state")
        attached = _attached(_parinfo_on(side, py314_python), target.pid)
        after = target.ask("state")
        own = target.ask("report")
    finally:
        err = target.stop()
    assert before == after
    assert err == ""
    assert _settings(attached, own_pools=False) == _settings(own, own_pools=False)
    assert _pools(attached) == _pools(own)
    counts = {r["library"]: r["count"] for r in attached["settings"]}
    assert counts["libgomp"] == 1 and counts["numexpr"] == 1
    assert sorted(p["library"] for p in attached["pools"]) == ["libgomp", "openblas", "openblas"]


# A library getter that raises: OpenCV's cv2.getNumThreads() raises cv2.error when OPENCV_FOR_THREADS_NUM
# is no count. The 3.14 interpreter here has no opencv wheel, so where cv2 does not import a stand-in
# module named cv2 raises as it does; numexpr beside it is set at run time.
RAISING_GETTER = '''
import numexpr, types
numexpr.set_num_threads(1)
try:
    import cv2
except ImportError:
    cv2 = types.ModuleType("cv2")
    class error(Exception):
        pass
    def getNumThreads():
        raise error("OpenCV(5.0) parallel.cpp: OPENCV_FOR_THREADS_NUM is not a number")
    cv2.error, cv2.getNumThreads, cv2.__file__ = error, getNumThreads, "/nowhere/site-packages/cv2/__init__.py"
    sys.modules["cv2"] = cv2
'''


@pytest.mark.parametrize("variable", ["x", None])
def test_a_getter_that_raises_leaves_the_other_libraries_read(py314_python: str, variable: str | None) -> None:
    """cv2.getNumThreads() raises inside the target: OpenCV's count is "unknown (why)" (the variable
    it refuses, or else what its getter raised) and numexpr's count beside it is still read."""
    extra = {"OPENCV_FOR_THREADS_NUM": variable} if variable is not None else {}
    target = Target(py314_python, RAISING_GETTER, env=clean_env(PYTHONPATH=str(REPO), **extra))
    try:
        attached = _attached(sys.executable, target.pid)
    finally:
        err = target.stop()
    assert err == ""
    rows = {r["library"]: r for r in attached["settings"]}
    assert rows["numexpr"]["count"] == 1
    assert rows["opencv"]["count"] is None
    text = rows["opencv"]["source"]["text"]
    if variable is not None:
        assert text.startswith("unknown (OPENCV_FOR_THREADS_NUM='x' is not a plain count"), text
    else:
        assert text.startswith("unknown (cv2.getNumThreads() raised error: "), text
    assert not any("python_libs" in part for part in attached["process"].get("unreadable") or {})


# An onnxruntime that reads its variables (1.29 on) in the target, one that does not (1.28) in parinfo's
# own process: stand-in modules (no onnxruntime wheel for the 3.14 interpreter here).
ORT_IN_TARGET = '''
import types
ort = types.ModuleType("onnxruntime")
ort.__version__, ort.__file__ = "1.32.0", "/nowhere/site-packages/onnxruntime/__init__.py"
sys.modules["onnxruntime"] = ort
'''
OLD_ORT_IN_PARINFO = ("import sys, types; ort = types.ModuleType('onnxruntime'); ort.__version__ = '1.28.0'; "
                      "sys.modules['onnxruntime'] = ort; from parinfo.cli import main; "
                      "sys.argv = ['parinfo', 'show', '--pid', sys.argv[1], '--attach', '--json']; main()")


def test_the_targets_onnxruntime_version_decides_which_variables_it_reads(py314_python: str) -> None:
    """ORT_INTRA_OP_NUM_THREADS=x makes each new session raise in onnxruntime 1.32 (the target's), and is
    not read by 1.28 (the one parinfo's own process imported): the report follows the target's."""
    target = Target(py314_python, ORT_IN_TARGET, env=clean_env(PYTHONPATH=str(REPO), ORT_INTRA_OP_NUM_THREADS="x"))
    try:
        done = subprocess.run([sys.executable, "-c", OLD_ORT_IN_PARINFO, str(target.pid)], capture_output=True,
                              text=True, timeout=60, env=clean_env(PYTHONPATH=str(REPO)), cwd=str(REPO))
    finally:
        target.stop()
    assert done.returncode == 0, done.stderr
    rows = {r["library"]: r for r in json.loads(done.stdout)["settings"]}
    assert rows["onnxruntime"]["source"]["text"].startswith(
        "unknown (ORT_INTRA_OP_NUM_THREADS='x' is not a plain count"), rows["onnxruntime"]


@pytest.mark.parametrize("side", SIDES)
def test_parinfos_runtime_in_the_target_is_read_as_it_reports_itself(py314_python: str, side: str) -> None:
    """A target that runs parinfo's runtime (set_num_threads(1), pushed into OpenBLAS): its own
    pools' rows and the pushed count's source read as its own report has them."""
    target = Target(py314_python, PARINFO_RUNTIME)
    try:
        before = target.ask("state")
        attached = _attached(_parinfo_on(side, py314_python), target.pid)
        after = target.ask("state")
        own = target.ask("report")
    finally:
        err = target.stop()
    assert before == after
    assert err == ""
    assert _settings(attached, own_pools=True) == _settings(own, own_pools=True)
    assert {"parinfo intra-op", "parinfo inter-op"} <= {r["library"] for r in attached["settings"]}
    for key in ("intra_op", "inter_op", "backend", "pool_ceiling"):
        assert attached["runtime"][key] == own["runtime"][key]
    assert attached["environment"] == own["environment"]


def _attach_dirs() -> set[str]:
    return {str(p) for base in chan.BASES for p in Path(base).glob(chan.PREFIX + "*")}


def test_a_main_thread_in_a_long_c_call_times_out_and_the_late_run_leaves_nothing(py314_python: str) -> None:
    """The main thread blocks in readline(): one line, exit 2, within the timeout and a little; when
    it wakes later, the withdrawn request runs nothing: modules, environment, threads and stderr
    are as they were, and no channel is left."""
    target = Target(py314_python, NUMPY_LIMITED, wait_in_c=True)
    try:
        before = target.ask("state")
        dirs = _attach_dirs()
        began = time.monotonic()
        done = _parinfo(sys.executable, "show", "--pid", str(target.pid), "--attach", "--timeout", "1")
        took = time.monotonic() - began
        assert done.returncode == 2
        assert done.stdout == ""
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "did not run the attach script within 1 s" in done.stderr
        assert took < 6
        after = target.ask("state")  # wakes the main thread: the pending request runs now
        time.sleep(0.2)
        again = target.ask("state")
    finally:
        err = target.stop()
    assert before == after == again
    assert err == ""
    assert _attach_dirs() <= dirs


AUDITED = '''
audit = []
sys.addaudithook(lambda event, args: audit.append([event, *map(str, args)]) if "remote_debugger" in event else None)
'''


def test_the_target_audits_each_script_as_cpython_documents(py314_python: str) -> None:
    """The target's audit hooks see the script run (CPython's remote_debugger_script event, with its
    path in the private folder), and a withdrawn request as /dev/null."""
    target = Target(py314_python, AUDITED)
    try:
        _attached(sys.executable, target.pid)
        events = target.ask("events")
    finally:
        target.stop()
    assert len(events) == 1, events
    event, path = events[0]
    assert event.endswith("remote_debugger_script")
    assert path.startswith(tuple(f"{base}/{chan.PREFIX}" for base in chan.BASES))
    assert path.endswith(f"/{chan.SCRIPT}")
    waiting = Target(py314_python, AUDITED, wait_in_c=True)
    try:
        done = _parinfo(sys.executable, "show", "--pid", str(waiting.pid), "--attach", "--timeout", "0.5")
        events = waiting.ask("events")  # wakes it: the pending request runs, as /dev/null
    finally:
        waiting.stop()
    assert done.returncode == 2
    assert [e[1] for e in events] == [os.devnull]


def _nobody_can_run(python: str) -> str | None:
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        return "needs root and setpriv"
    done = subprocess.run(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", python, "-c",
                           "import parinfo"], capture_output=True, env=clean_env(PYTHONPATH=str(REPO)), cwd="/")
    return None if done.returncode == 0 else "user nobody cannot run this interpreter (chmod o+x /root?)"


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def _refusal(kind: str, py314: str, older: str) -> tuple[list[str], subprocess.Popen | None, str | None]:
    """(parinfo's arguments, a process to end afterwards, the user to run parinfo as) for ``kind``."""
    loop = "import time\nwhile True: time.sleep(0.02)"
    if kind == "older Python":
        proc = subprocess.Popen([older, "-c", loop])
    elif kind == "PYTHON_DISABLE_REMOTE_DEBUG":
        proc = subprocess.Popen([py314, "-c", loop], env=clean_env(PYTHON_DISABLE_REMOTE_DEBUG="1"))
    elif kind == "-X disable-remote-debug":
        proc = subprocess.Popen([py314, "-X", "disable-remote-debug", "-c", loop])
    elif kind == "not Python":
        proc = subprocess.Popen(["sleep", "60"])
    elif kind == "not permitted":
        proc = subprocess.Popen([py314, "-c", loop])
    elif kind == "zombie":
        proc = subprocess.Popen(["true"])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _state(proc.pid) != "Z":
            time.sleep(0.02)
        return ["--pid", str(proc.pid)], proc, None
    elif kind == "kernel thread":
        return ["--pid", "2"], None, None
    else:  # exited
        proc = subprocess.Popen(["true"])
        proc.wait()
        return ["--pid", str(proc.pid)], None, None
    time.sleep(0.3)
    return ["--pid", str(proc.pid)], proc, "nobody" if kind == "not permitted" else None


REFUSALS = {
    "older Python": "attach needs Python 3.14 or newer",
    "PYTHON_DISABLE_REMOTE_DEBUG": "remote debugging turned off",
    "-X disable-remote-debug": "remote debugging turned off",
    "not Python": "not a Python interpreter",
    "not permitted": "permission: another user's process",
    "zombie": "is a zombie",
    "kernel thread": "is a kernel thread",
    "exited": "no process with pid",
}


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("kind", list(REFUSALS))
def test_each_refusal_is_one_line_and_exit_2_in_bounded_time(py314_python: str, kind: str, side: str,
                                                             request: pytest.FixtureRequest) -> None:
    python = _parinfo_on(side, py314_python)
    if kind == "not permitted" and (why := _nobody_can_run(python)):
        pytest.skip(why)
    older = request.getfixturevalue("older_python") if kind == "older Python" else ""
    args, proc, user = _refusal(kind, py314_python, older)
    try:
        began = time.monotonic()
        done = _parinfo(python, "show", *args, "--attach", "--timeout", "3", user=user)
        took = time.monotonic() - began
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    assert done.returncode == 2, done.stdout[-500:] + done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert REFUSALS[kind] in lines[0]
    assert took < 8


ADVERSARY = r'''
import json, os, sys
folder = sys.argv[1]
mine = os.path.join(os.path.dirname(folder), "parinfo-test-nobody-%d" % os.getpid())
open(mine, "w").close()
found = {}
def attempt(name, fn):
    try:
        fn()
        found[name] = "done"
    except OSError as exc:
        found[name] = type(exc).__name__
attempt("list the folder", lambda: os.listdir(folder))
attempt("read the script", lambda: open(os.path.join(folder, sys.argv[2])).read())
attempt("open the FIFO", lambda: os.close(os.open(os.path.join(folder, sys.argv[3]), os.O_WRONLY | os.O_NONBLOCK)))
attempt("replace the script", lambda: os.replace(mine, os.path.join(folder, sys.argv[2])))
attempt("add a file", lambda: open(os.path.join(folder, "extra"), "x").close())
attempt("move the folder", lambda: os.rename(folder, folder + "-moved"))
attempt("remove the folder", lambda: os.rmdir(folder))
os.unlink(mine)
print(json.dumps(found))
'''


def test_another_user_can_neither_read_nor_replace_the_channel(py314_python: str) -> None:
    """While an attach waits (the target's main thread is in readline), user nobody tries the
    channel: every attempt is refused; then the target wakes and the attach completes."""
    if why := _nobody_can_run(sys.executable):
        pytest.skip(why)
    target = Target(py314_python, NUMPY_LIMITED, wait_in_c=True)
    dirs = _attach_dirs()
    attach = subprocess.Popen([sys.executable, "-m", "parinfo", "show", "--pid", str(target.pid), "--attach",
                               "--timeout", "20", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=clean_env(PYTHONPATH=str(REPO)), cwd=str(REPO))
    try:
        deadline = time.monotonic() + 10
        while not (new := _attach_dirs() - dirs) and time.monotonic() < deadline:
            time.sleep(0.01)
        while new and os.stat(next(iter(new))).st_mode & 0o777 != 0o711 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert new, "no channel appeared"
        folder = new.pop()
        st = os.stat(folder)
        assert (st.st_mode & 0o777, st.st_uid) == (0o711, os.geteuid())
        tried = subprocess.run(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups",
                                sys.executable, "-c", ADVERSARY, folder, chan.SCRIPT, chan.FIFO],
                               capture_output=True, text=True, timeout=30, cwd="/")
        assert tried.returncode == 0, tried.stderr
        assert set(json.loads(tried.stdout).values()) == {"PermissionError"}, tried.stdout
        after = target.ask("state")  # the main thread returns to Python: the script runs now
        out, err = attach.communicate(timeout=30)
    finally:
        attach.kill()
        target.stop()
    assert attach.returncode == 0, err
    assert json.loads(out)["process"]["pid"] == target.pid
    assert "parinfo" not in after["modules"]
    assert not os.path.exists(folder)


def test_root_attaches_to_another_users_process_through_a_channel_that_user_owns(py314_python: str) -> None:
    """Root reads nobody's process: the script and FIFO are handed to nobody, whose process reads
    them; parinfo's Python, not nobody's, makes the call."""
    if why := _nobody_can_run(py314_python):
        pytest.skip(why)
    proc = subprocess.Popen(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", py314_python,
                             "-c", "import numpy, time\nwhile True: time.sleep(0.02)"], cwd="/")
    try:
        time.sleep(1.0)
        report = _attached(sys.executable, proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert [r["count"] for r in report["settings"] if r["library"] == "openblas"] == [2] or \
        [r["library"] for r in report["settings"]] == ["openblas"]


# -- the parts checked on any Python -----------------------------------------------------------------

def _answer(**fields: object) -> bytes:
    base = {"token": "t", "pid": 7, "python": {"version": "3.14.0", "version_info": [3, 14, 0]}, "environ": {},
            "modules": [], "threads": [1, []], "pools": [], "torch": None, "python_libs": [], "parinfo": None,
            "errors": {}}
    base.update(fields)
    return json.dumps(base).encode()


def test_the_answer_is_believed_only_as_data_within_bounds() -> None:
    ok = parse(_answer(pools=[{"path": "/x/libopenblas.so", "count": 3, "version": "0.3"},
                              {"path": "/y/libgomp.so", "count": MAX_COUNT + 1},
                              {"path": "/z/libomp.so", "count": 0},
                              {"path": "/w/libmkl_rt.so", "count": True}],
                       environ={"OMP_NUM_THREADS": "2", "X": 3, "L": "v" * 100_000}), "t", 7)
    assert ok.pools["/x/libopenblas.so"].count == 3
    assert [ok.pools[p].count for p in ("/y/libgomp.so", "/z/libomp.so", "/w/libmkl_rt.so")] == [None, None, None]
    assert ok.environ["OMP_NUM_THREADS"] == "2" and "X" not in ok.environ and len(ok.environ["L"]) == 1 << 16
    for raw, why in ((b"not json", "not JSON"), (_answer(token="other"), "token"), (_answer(pid=8), "pid 8"),
                     (b'{"token": "t", "pid": NaN}', "NaN"), (_answer(too_big=5_000_000), "more than")):
        with pytest.raises(BadAnswer, match=why):
            parse(raw, "t", 7)


def test_the_scripts_json_is_exact_for_any_text() -> None:
    texts = ["plain", 'quote " and \\ backslash', "\x1b[31mred\n\t\x00", "é 漢 \U0001f600", "\udcff lone surrogate",
             "\u202e bidi"]
    value = {"t": texts, "n": [0, -1, 2**40, 1.5, float("nan"), True, None], "nested": {"k": {"k": [1]}}}
    out: list[str] = []
    in_target._encode(value, out, 0)
    text = "".join(out)
    assert text.isascii()
    back = json.loads(text)
    assert back["t"] == texts and back["nested"] == value["nested"]
    assert back["n"] == [0, -1, 2**40, 1.5, None, True, None]


def test_the_scripts_data_is_a_plain_literal_taken_from_the_registry() -> None:
    from parinfo.process import libraries as reg

    data = script_data("/tmp/x/r", "tok", 65536, [("/a/libscipy_openblas64_-x.so", "openblas")], False, (2, 2))
    assert ast.literal_eval(repr(data)) == data
    assert data["native"]["openblas"]["count"] == reg.library("openblas").native.count == "openblas_get_num_threads"
    assert data["native"]["libgomp"]["count"] == "omp_get_max_threads"
    assert "OMP_NUM_THREADS" in data["env_names"]


# Run by each interpreter on the script's file, with its DATA: that its code holds import instructions
# only under its `if TYPE_CHECKING:` guard, that defining it imports nothing, and that main(DATA)
# imports only its sys (the `__import__` it is given refuses any other module) and answers in full.
IMPORTS_NOTHING = r'''
import ast, builtins, ctypes, dis, os, sys, threading, types
path, data = sys.argv[1], ast.literal_eval(sys.argv[2])
code = compile(open(path, encoding="utf-8").read(), "<parinfo attach>", "exec")

def codes(c):
    yield c
    for const in c.co_consts:
        if isinstance(const, types.CodeType):
            yield from codes(const)

top = list(dis.get_instructions(code))
at = next(i for i, ins in enumerate(top) if ins.opname == "LOAD_NAME" and ins.argval == "TYPE_CHECKING")
guard = next(ins for ins in top[at:] if "JUMP" in ins.opname)
assert "IF_FALSE" in guard.opname, guard
imports = [(c.co_name, ins.offset) for c in codes(code) for ins in dis.get_instructions(c)
           if ins.opname in ("IMPORT_NAME", "IMPORT_FROM")]
assert imports and all(name == "<module>" and guard.offset < offset < guard.argval for name, offset in imports), imports

asked = []

def refuse(name, *args, **kwargs):
    asked.append(name)
    if name != "sys":
        raise ImportError("the script imports " + name)
    return sys

namespace = {"__builtins__": dict(vars(builtins), __import__=refuse)}
exec(code, namespace)
assert asked == [] and namespace["TYPE_CHECKING"] is False, asked
reader = os.open(data["fifo"], os.O_RDONLY | os.O_NONBLOCK)
namespace["main"](data)
assert asked == ["sys"], asked
sys.stdout.buffer.write(os.read(reader, 1 << 20))
'''


@pytest.mark.parametrize("side", ["this Python", "3.14"])
def test_the_script_imports_nothing_outside_its_type_checking_guard(request: pytest.FixtureRequest, tmp_path: Path,
                                                                     side: str) -> None:
    """Its type hints name typing's and the standard library's types, imported for type checkers only:
    the script, compiled by this interpreter or from source by 3.14 (lazy annotations), imports nothing
    when defined or run, and its answer is whole."""
    python = sys.executable if side == "this Python" else request.getfixturevalue("py314_python")
    fifo = tmp_path / "r"
    os.mkfifo(fifo)
    data = script_data(str(fifo), "tok", 1 << 20, [], False, (2, 2))
    done = subprocess.run([python, "-c", IMPORTS_NOTHING, in_target.__file__, repr(data)], capture_output=True,
                          timeout=60, env=clean_env())
    assert done.returncode == 0, done.stderr.decode()
    answer = parse(done.stdout, "tok", None)
    assert answer.errors == {}
    assert answer.python.version_info[:2] == ((3, 14) if side == "3.14" else tuple(sys.version_info[:2]))
    assert answer.threads is not None and answer.python_threads == len(answer.threads) == 1


def test_the_channel_is_private_bounded_and_removed() -> None:
    from parinfo.machine.procfs import Proc

    with chan.Channel(Proc(os.getpid()), os.geteuid(), os.getegid()) as ch:
        folder = ch.folder
        assert os.stat(folder).st_mode & 0o777 == 0o700  # closed until both entries are in place
        path = ch.write_script("main({})\n")
        assert path == f"{folder}/{chan.SCRIPT}" and ch.fifo == f"{folder}/{chan.FIFO}"
        assert os.stat(folder).st_mode & 0o777 == 0o711
        assert os.stat(path).st_mode & 0o777 == 0o400
        assert os.stat(ch.fifo).st_mode & 0o777 == 0o600
        assert sorted(os.listdir(folder)) == sorted([chan.SCRIPT, chan.FIFO])
        with pytest.raises(chan.ChannelError, match="one script per channel"):
            ch.write_script("again")
        assert ch.receive(time.monotonic() + 0.2) is None  # nobody wrote: the deadline passes
        fd = os.open(ch.fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b'{"answer": 1}')
        os.close(fd)
        assert ch.receive(time.monotonic() + 2) == b'{"answer": 1}'
        fd = os.open(ch.fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"x" * (ch.cap + 10) if ch.cap < 1 << 16 else b"x" * ch.cap)
        os.close(fd)
        assert len(ch.receive(time.monotonic() + 2) or b"") <= ch.cap + 1
    assert not os.path.exists(folder)
    with pytest.raises(FileNotFoundError):  # a late script finds nothing to write into
        os.open(f"{folder}/{chan.FIFO}", os.O_WRONLY | os.O_NONBLOCK)


def test_attach_refuses_option_mixes_and_this_process() -> None:
    import parinfo

    for kwargs, words in (({"attach": True}, "another process"), ({"pid": os.getpid(), "attach": True},
                                                                    "another process"),
                          ({"pid": 1, "timeout": 2}, "attach only"),
                          ({"pid": 1, "attach": True, "torch": True}, "do not apply"),
                          ({"pid": 1, "attach": True, "timeout": "abc"}, "timeout")):
        with pytest.raises(parinfo.UsageError, match=words):
            parinfo.inspect(**kwargs)
    for kwargs, words in (({"attach": True}, "another process"), ({"pid": os.getpid(), "attach": True},
                                                                    "another process"),
                          ({"pid": 1, "timeout": 2}, "attach only"),
                          ({"pid": 1, "attach": True, "timeout": "abc"}, "timeout")):
        with pytest.raises(parinfo.UsageError, match=words):
            next(parinfo.watch(**kwargs))
    for args, words in ((["show", "--attach"], "--attach needs --pid"),
                        (["show", "--pid", "1", "--timeout", "2"], "--attach only"),
                        (["show", "--pid", "1", "--attach", "--children", "--format", "torch"], "sums a tree"),
                        (["show", "--pid", "1", "--attach", "--timeout", "0"], "--timeout"),
                        (["watch", "--attach"], "--attach needs --pid"),
                        (["watch", "--pid", "1", "--timeout", "2"], "--attach only"),
                        (["watch", "--pid", "1", "--attach", "--serve", "127.0.0.1:1"], "pick one"),
                        (["watch", "--pid", "1", "--attach", "--timeout", "0"], "--timeout")):
        done = subprocess.run([sys.executable, "-m", "parinfo", *args], capture_output=True, text=True,
                              env=clean_env(), cwd=str(REPO))
        assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, \
            done.stderr


def test_host_attach_reads_314_processes_inside_marked_and_bounded(py314_python: str, older_python: str) -> None:
    """``host --attach``: a 3.14 numpy process's counts are read inside, marked attached, with the
    sources of its own report; an older Python's one and a 3.14 one asleep in C keep their counts read from
    memory, the notes say why, and the scan's attaches stay within their budget."""
    limited = Target(py314_python, NUMPY_LIMITED)
    older = subprocess.Popen([older_python, "-c", "import numpy, time; print('up', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    asleep = subprocess.Popen([py314_python, "-c", "import numpy, time; print('up', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        for proc in (older, asleep):
            assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        began = time.monotonic()
        done = _parinfo(sys.executable, "host", "--once", "--attach", "--timeout", "1.5", "--json",
                        "--interval", "0.1")
        took = time.monotonic() - began
        own = limited.ask("report")
    finally:
        for proc in (older, asleep):
            proc.kill()
            proc.wait()
        limited.stop()
    assert done.returncode == 0, done.stderr
    host = json.loads(done.stdout)
    rows = {p["pid"]: p for p in host["processes"]}
    inside = rows[limited.pid]["pools"]
    assert inside and all(p["attached"] and p["in_force"] for p in inside)
    assert {(p["library"], p["path"]): (p["count"], p["source"]) for p in inside} == _settings(own, own_pools=False)
    for proc in (older, asleep):
        assert all(not p["attached"] and p["in_force"] for p in rows[proc.pid]["pools"])
    notes = "\n".join(host["notes"])
    assert f"pid {older.pid} runs Python 3.1" in notes and "attach needs Python 3.14" in notes
    assert f"pid {asleep.pid} did not run the attach script" in notes
    assert took < 1.5 + 6


@pytest.mark.torch
def test_the_script_reads_torch_as_the_report_does_and_imports_nothing() -> None:
    """In a process with torch (this Python's): the script's torch reading, which walks only what is
    imported, gives the facts parinfo's own report reads, and loads no module."""
    code = (
        "import json, sys, torch\n"
        "torch.set_num_threads(1)\n"
        "from parinfo.outside.attach import in_target, script_data\n"
        "from parinfo.process.torch_config import torch_facts\n"
        "data = script_data('/nowhere/r', 't', 1 << 16, [], False, (2, 2))\n"
        "before = set(sys.modules)\n"
        "read = in_target._torch(sys.modules, data)\n"
        "loaded = sorted(set(sys.modules) - before)\n"
        "from parinfo.records.convert import dump\n"
        "print(json.dumps([read, dump(torch_facts(torch)), loaded]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=clean_env())
    assert done.returncode == 0, done.stderr
    read, expected, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert read == expected
    assert read["intra_op"] == 1 and read["parallel_info"]
    assert loaded == []


# -- --attach where --pid is accepted: watch, and show --children ------------------------------------

def _inside_counts(process: dict) -> dict:
    return {(c["library"], c["filepath"]): (c["count"], c["source"]) for c in process["counts"]}


def test_watch_attach_reads_each_samples_counts_inside(py314_python: str) -> None:
    """``watch --pid P --attach``: every sample carries the target's counts in force read inside it,
    marked attached, with the sources of its own report; the target is unchanged; as text, the
    sample says attached and lists them."""
    target = Target(py314_python, NUMPY_LIMITED)
    try:
        before = target.ask("state")
        watching = subprocess.Popen([sys.executable, "-m", "parinfo", "watch", "--pid", str(target.pid), "--attach",
                                     "--json", "--interval", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=clean_env(PYTHONPATH=str(REPO)), cwd=str(REPO))
        try:
            assert watching.stdout is not None
            samples = [json.loads(watching.stdout.readline()) for _ in range(2)]
        finally:
            watching.kill()
            watching.communicate()
        text = _parinfo(sys.executable, "watch", "--pid", str(target.pid), "--attach", "--once", "--interval", "0.1")
        after = target.ask("state")
        own = target.ask("report")
    finally:
        err = target.stop()
    assert before == after
    assert err == ""
    expected = _settings(own, own_pools=False)
    for sample in samples:
        [process] = sample["inside"]
        assert process["pid"] == target.pid and process["attached"] is True
        assert "sys.remote_exec" in process["how"]
        assert _inside_counts(process) == expected
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert any(f"pid {target.pid}: attached (sys.remote_exec" in line for line in lines), text.stdout
    assert any("openblas" in line and "set at run time" in line for line in lines), text.stdout


def test_watch_attach_refusals_are_one_line_and_a_late_failure_only_marks_its_sample(py314_python: str,
                                                                                     older_python: str) -> None:
    """An older Python, or a main thread that runs no Python code within --timeout, refuses ``watch
    --attach`` before any sample: one line, exit 2, in bounded time. Once watching, an attach that
    fails leaves that sample's counts unread and says why; the target runs nothing of it later."""
    older = subprocess.Popen([older_python, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    waiting = Target(py314_python, NUMPY_LIMITED, wait_in_c=True)
    try:
        assert older.stdout is not None and older.stdout.readline() == "up\n"
        for pid, words in ((older.pid, "attach needs Python 3.14"), (waiting.pid, "did not run the attach script")):
            began = time.monotonic()
            done = _parinfo(sys.executable, "watch", "--pid", str(pid), "--attach", "--timeout", "1", "--once")
            assert time.monotonic() - began < 8
            assert done.returncode == 2 and done.stdout == ""
            assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, done.stderr
        before = waiting.ask("state")  # wakes it: the withdrawn request runs nothing
        from parinfo.watching.sample import Sampler

        [late] = Sampler(waiting.pid, attach=0.5).inside()
        after = waiting.ask("state")
    finally:
        older.kill()
        older.wait()
        err = waiting.stop()
    assert (late.attached, late.counts) == (False, ())
    assert "did not run the attach script within 0.5 s" in late.how
    assert before == after
    assert err == ""


TREE = '''
import atexit, subprocess
loop = "import numpy, time\\nprint('up', flush=True)\\n"
kids = [subprocess.Popen([sys.executable, "-c", loop + "from threadpoolctl import threadpool_limits\\n"
                          "threadpool_limits(1)\\nwhile True: time.sleep(0.02)"], stdout=subprocess.PIPE, text=True),
        subprocess.Popen([{older!r}, "-c", loop + "time.sleep(60)"], stdout=subprocess.PIPE, text=True),
        subprocess.Popen([sys.executable, "-c", loop + "time.sleep(60)"], stdout=subprocess.PIPE, text=True)]
atexit.register(lambda: [k.kill() for k in kids])
for k in kids:
    k.stdout.readline()
''' + NUMPY_LIMITED


def test_show_children_attach_reads_each_314_process_inside_within_the_total_time(py314_python: str,
                                                                                  older_python: str) -> None:
    """``show --pid P --children --attach``: a 3.14 parent (OpenBLAS limited to 1) and a 3.14 child
    (the same) are read inside, with their own reports' sources; an older Python's child keeps its
    count read from memory and says why; a 3.14 child asleep in C is refused within the total time; each
    process says how it was read; nothing in the parent changed."""
    root = Target(py314_python, TREE.format(older=older_python))
    try:
        before = root.ask("state")
        began = time.monotonic()
        done = _parinfo(sys.executable, "show", "--pid", str(root.pid), "--children", "--attach", "--timeout", "1.5",
                        "--json")
        took = time.monotonic() - began
        text = _parinfo(sys.executable, "show", "--pid", str(root.pid), "--children", "--attach", "--timeout", "1.5")
        after = root.ask("state")
        own = root.ask("report")
    finally:
        err = root.stop()
    assert before == after
    assert err == ""
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    reads = report["process"]["tree_reads"]
    assert reads[0]["pid"] == root.pid and len(reads) == 4
    limited, older, asleep = reads[1:]
    assert [r["attached"] for r in reads] == [True, True, False, False], reads
    assert "attach needs Python 3.14" in older["how"]
    assert "did not run the attach script" in asleep["how"] or "was spent" in asleep["how"]
    rows = {}
    for p in report["pools"]:
        rows.setdefault(p["pid"], []).append(p)
    assert {(p["library"], p["filepath"]): (p["num_threads"], p["count_source"]) for p in rows[root.pid]} == \
        _settings(own, own_pools=False)
    assert [(p["num_threads"], p["count_source"]["kind"]) for p in rows[limited["pid"]]] == [(1, "run-time call")]
    older_sources = [p["count_source"] for p in rows[older["pid"]]]
    assert [s["kind"] for s in older_sources] == ["read from memory"], older_sources
    assert took < 1.5 + 8
    assert text.returncode == 0, text.stderr
    assert f"pid {root.pid}: read inside (sys.remote_exec" in text.stdout
    assert f"pid {older['pid']}: read from outside; not attached: pid {older['pid']} runs Python" in text.stdout
