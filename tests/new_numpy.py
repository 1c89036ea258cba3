"""A Python 3.12+ interpreter with numpy>=2.5 and threadpoolctl, for tests of the current numpy
(OpenBLAS 0.3.34 keeps its count in a local symbol; numpy 2.5 needs Python 3.12+).

The interpreter is PARINFO_TEST_PY312 when set, else the one running the tests when it is 3.12+ with
numpy>=2.5 (the suite on 3.14), else the first python3.12/3.13/3.14 found on PATH or under
~/.pyenv/versions; a venv is made from it once under PARINFO_TEST_CACHE (default: tests/cache_dir.py)
and reused. ``python tests/new_numpy.py`` makes it ahead of time (CI does).
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

NUMPY = "numpy>=2.5"
_CHECK = "import numpy, threadpoolctl, sys; v = tuple(int(x) for x in numpy.__version__.split('.')[:2]); " \
         "sys.exit(0 if v >= (2, 5) else 1)"


def _version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = out.stdout.split()
    return (int(parts[0]), int(parts[1])) if out.returncode == 0 and len(parts) == 2 else None


def interpreter() -> str | None:
    """A Python 3.12+ interpreter, or None."""
    given = os.environ.get("PARINFO_TEST_PY312")
    candidates = [given] if given else []
    candidates += [found for name in ("python3.12", "python3.13", "python3.14") if (found := shutil.which(name))]
    candidates += sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.1[2-9]*/bin/python"))
    for python in candidates:
        version = _version(python)
        if version is not None and version >= (3, 12):
            return python
    return None


def venv_python() -> tuple[str | None, str]:
    """(the venv's python, "") once it has numpy>=2.5 and threadpoolctl, else (None, why not). The
    interpreter running the tests is that python itself when it has them (the suite on 3.14)."""
    if not os.environ.get("PARINFO_TEST_PY312") and sys.version_info[:2] >= (3, 12) and \
            subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, timeout=60).returncode == 0:
        return sys.executable, ""
    base = interpreter()
    if base is None:
        return None, "no Python 3.12+ interpreter (set PARINFO_TEST_PY312, or put python3.12+ on PATH)"
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cache_dir import cache as cache_folder

    cache = cache_folder()
    version = _version(base)
    folder = cache / f"numpy25-py{version[0]}.{version[1]}" if version else cache / "numpy25"
    python = folder / "bin" / "python"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:  # one maker at a time (xdist workers, concurrent runs)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and subprocess.run([python, "-c", _CHECK], capture_output=True, timeout=60).returncode == 0:
            return str(python), ""
        steps = [[base, "-m", "venv", "--clear", str(folder)],
                 [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", NUMPY, "threadpoolctl"]]
        for step in steps:
            try:
                done = subprocess.run(step, capture_output=True, text=True, timeout=600)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return None, f"cannot make the numpy 2.5 venv: {exc}"
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                return None, f"cannot make the numpy 2.5 venv ({' '.join(step[:3])}): {tail[0]}"
    return str(python), ""


if __name__ == "__main__":
    made, why = venv_python()
    print(made or why)
    sys.exit(0 if made else 1)
