"""A Python 3.14 interpreter (sys.remote_exec) with the pool libraries (ONNX Runtime, Polars, pyarrow,
DuckDB, tokenizers, OpenCV, numba, numpy), for ``show --pid --attach`` of a process that holds them.

A venv of tests/py314.py's interpreter, made once under PARINFO_TEST_CACHE (see tests/cache_dir.py)
as ``py314-pools`` and reused; its packages come from the index. ``python tests/py314_pools.py``
makes it ahead of time (CI does, in its pools step) and prints its python, or one line saying why it
cannot, with exit code 1.
"""
from __future__ import annotations

import fcntl
import subprocess
import sys

from cache_dir import cache
from py314 import suite_venv

#: What the target imports; the versions are the newest the index has for Python 3.14.
PACKAGES = ("onnxruntime", "polars", "pyarrow", "duckdb", "tokenizers", "opencv-python-headless", "numba",
            "numpy", "threadpoolctl")
_CHECK = "import onnxruntime, polars, pyarrow, duckdb, tokenizers, cv2, numba, numpy, sys; " \
         "sys.exit(0 if sys.version_info[:2] >= (3, 14) else 1)"


def venv_python() -> tuple[str | None, str]:
    """(its python, "") or (None, why not)."""
    folder = cache() / "py314-pools"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / "py314-pools.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        python = folder / "bin" / "python"
        if python.exists() and subprocess.run([str(python), "-c", _CHECK], capture_output=True,
                                              timeout=300).returncode == 0:
            return str(python), ""
        made, why = suite_venv(folder)
        if made is None:
            return None, why
        try:
            done = subprocess.run([made, "-m", "pip", "install", "-q", "--disable-pip-version-check", *PACKAGES],
                                  capture_output=True, text=True, timeout=1200)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"no Python 3.14 with the pool libraries: {exc}"
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
            return None, f"no Python 3.14 with the pool libraries: {tail}"
        return made, ""


if __name__ == "__main__":
    made, why = venv_python()
    print(made or why)
    sys.exit(0 if made else 1)
