"""Shared test helpers: run Python in a fresh subprocess, skip torch tests when torch is absent."""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_NUMPY = importlib.util.find_spec("numpy") is not None
HAVE_RAY = importlib.util.find_spec("ray") is not None


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="torch is not installed")
    skip_ray = pytest.mark.skip(reason="ray is not installed")
    wheels = "wheels" in (config.getoption("markexpr", "") or "") or bool(os.environ.get("PARINFO_TEST_WHEELS"))
    skip_wheels = pytest.mark.skip(reason="fetches an old wheel: runs once, where selected (-m wheels)")
    for item in items:
        if "wheels" in item.keywords and not wheels:
            item.add_marker(skip_wheels)
        if "torch" in item.keywords and not HAVE_TORCH:
            item.add_marker(skip)
        if "ray" in item.keywords and not HAVE_RAY:
            item.add_marker(skip_ray)
        for mark in item.iter_markers("pools"):  # @pytest.mark.pools("onnxruntime", ...): the modules it needs
            missing = [name for name in mark.args if importlib.util.find_spec(name) is None]
            if missing:
                item.add_marker(pytest.mark.skip(reason=f"{', '.join(missing)} not installed (pip install '.[pools]')"))


# A `with` statement whose __enter__ trips SIGUSR1 from C without checking for signals (libc's raise()
# through ctypes), and whose body makes a call (where an interpreter checks for signals): it prints
# "exited" when __exit__ ran, "skipped" when the handler's exception left the statement without it.
_WITH_PROBE = """
import ctypes, functools, signal
class Interrupt(Exception):
    pass
def handler(*_):
    raise Interrupt
signal.signal(signal.SIGUSR1, handler)
exited = []
class Held:
    __enter__ = staticmethod(functools.partial(ctypes.CDLL(None)["raise"], int(signal.SIGUSR1)))
    def __exit__(self, *exc):
        exited.append(True)
try:
    with Held():
        len(())
except Interrupt:
    pass
print("exited" if exited else "skipped")
"""


@functools.cache
def with_statement_gap() -> str | None:
    """Why a Ctrl-C can leave a ``with lock:`` holding its lock on this interpreter, or None: CPython
    3.14 up to the fix of gh-148874 runs a signal handler as ``__enter__`` returns, before the
    statement's own exception handler is set up, so a KeyboardInterrupt raised there skips
    ``__exit__`` (any ``with lock:``, the runtime's and the standard library's). Tests of the
    runtime's guarantees under Ctrl-C cannot hold there and skip with this reason."""
    try:
        done = subprocess.run([sys.executable, "-c", _WITH_PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.stdout.strip() != "skipped":
        return None
    return (f"Python {sys.version.split()[0]} raises a signal handler's exception between __enter__ and the body "
            "of a with statement, skipping __exit__ (CPython gh-148874): a Ctrl-C can leave any `with lock:` "
            "holding its lock, so the runtime's Ctrl-C guarantees cannot hold on this interpreter")


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment without thread variables, plus ``extra``."""
    from parinfo.process.variables import THREAD_VARS

    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env.update(extra)
    return env


def run_py(code: str, *, env: dict[str, str] | None = None, prefix: list[str] | None = None,
           timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python -c code`` in a fresh process (optionally behind ``prefix``, e.g. taskset)."""
    cmd = [*(prefix or []), sys.executable, "-c", code]
    proc = subprocess.run(cmd, env=env if env is not None else clean_env(), capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def run_json(code: str, **kw) -> object:
    """Run code that prints one JSON document as its last line; return it parsed."""
    out = run_py(code, **kw).stdout.strip().splitlines()
    return json.loads(out[-1])


def words(value: Any) -> Any:
    """``value`` (JSON data) with each source object replaced by its words: for tests that check
    what a person reads; the kinds are checked where the test is about who decided."""
    if isinstance(value, dict):
        if set(value) in ({"kind", "detail", "text"}, {"kind", "detail", "text", "when"}):
            return value["text"]
        return {k: words(v) for k, v in value.items()}
    if isinstance(value, list):
        return [words(v) for v in value]
    return value


def run_cli(*args: str, env: dict[str, str] | None = None, prefix: list[str] | None = None,
            timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m parinfo ARGS`` in a fresh process; never raises on a non-zero exit."""
    cmd = [*(prefix or []), sys.executable, "-m", "parinfo", *args]
    return subprocess.run(cmd, env=env if env is not None else clean_env(), capture_output=True,
                          text=True, timeout=timeout, input=input)


def start_target(code: str, *args: str, env: dict[str, str] | None = None,
                 prefix: list[str] | None = None, python: str | None = None) -> tuple[subprocess.Popen, Any]:
    """Start ``python -c code ARGS`` (behind ``prefix``; ``python`` or this interpreter) that prints
    one JSON line of its own ground truth, then waits on stdin; return the process and that JSON."""
    proc = subprocess.Popen([*(prefix or []), python or sys.executable, "-c", code, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env or clean_env())
    line = proc.stdout.readline() if proc.stdout else ""
    if not line:
        proc.kill()
        proc.wait(timeout=10)
        pytest.fail(f"the target printed nothing (rc {proc.returncode})")
    return proc, json.loads(line)


def stop_target(proc: subprocess.Popen) -> None:
    """End a target started by :func:`start_target`: close its stdin, kill it if it lingers."""
    try:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def numpy25_python() -> str:
    """A Python 3.12+ interpreter with numpy>=2.5 and threadpoolctl (a venv made once under a cache
    folder, see tests/new_numpy.py); skipped, with why, where none can be had."""
    from new_numpy import venv_python

    python, why = venv_python()
    if python is None:
        pytest.skip(why)
    return python


@pytest.fixture(scope="session")
def py314_python() -> str:
    """A Python 3.14 interpreter (sys.remote_exec) with numpy, threadpoolctl and parinfo's dependencies
    (Debian sid's packages unpacked under a cache folder, see tests/py314.py); skipped, with why,
    where none can be had."""
    from py314 import venv_python

    python, why = venv_python()
    if python is None:
        pytest.skip(why)
    return python


@pytest.fixture(scope="session")
def py314_pools_python() -> str:
    """A Python 3.14 interpreter with the pool libraries (ONNX Runtime, Polars, pyarrow, DuckDB,
    tokenizers, OpenCV, numba; see tests/py314_pools.py); skipped, with why, where none can be had."""
    from py314_pools import venv_python

    python, why = venv_python()
    if python is None:
        pytest.skip(why)
    return python


@pytest.fixture(scope="session")
def older_python() -> str:
    """A CPython older than 3.14 (no sys.remote_exec) that imports numpy, for targets attach must
    refuse: this interpreter where it is older, else one found on this machine (python3.13 to
    python3.10 on PATH or under ~/.pyenv, then the numpy venv of tests/new_numpy.py); skipped, with
    why, where none can be had."""
    if sys.version_info[:2] < (3, 14):
        return sys.executable
    import glob
    import shutil

    check = "import sys, numpy; sys.exit(0 if sys.version_info[:2] < (3, 14) else 1)"

    def works(python: str | None) -> bool:
        return bool(python) and subprocess.run([python, "-c", check], capture_output=True, timeout=60).returncode == 0

    found = [shutil.which(f"python3.{minor}") for minor in (13, 12, 11, 10)]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[0-3]*/bin/python")), reverse=True)
    for python in found:
        if python and works(python):
            return python
    from new_numpy import venv_python

    made = venv_python()[0]
    if made and works(made):
        return made
    pytest.skip("no CPython older than 3.14 with numpy here: a target attach must refuse cannot be started")


@pytest.fixture
def quota_cgroup():
    """A fresh cgroup with a 0.5-CPU quota (its path), removed afterwards; skipped where none can be made."""
    from real_cgroup import quota_cgroup as make

    with make(0.5) as made:
        if isinstance(made, str):
            pytest.skip(f"cannot make a cgroup with a quota here: {made}")
        yield str(made[0])


class Targets:
    """Processes started inside one cgroup; each prints one line when ready and ends at stdin's end."""

    def __init__(self, cgroup: str) -> None:
        self.cgroup, self.procs = cgroup, []

    def start(self, code: str, *, env: dict[str, str] | None = None, prefix: list[str] | None = None,
              user: str | None = None) -> tuple[subprocess.Popen, str]:
        procs = os.path.join(self.cgroup, "cgroup.procs")
        as_user = ["setpriv", "--reuid", user, "--regid", "nogroup", "--clear-groups"] if user else []
        cmd = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *as_user, *(prefix or []),
               sys.executable, "-c", code]
        proc = subprocess.Popen(cmd, env=env or clean_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        self.procs.append(proc)
        line = proc.stdout.readline().strip()
        assert line, f"target {proc.pid} ended before it was ready"
        return proc, line

    def stop(self) -> None:
        for proc in self.procs:
            try:
                proc.stdin.close()
                proc.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
