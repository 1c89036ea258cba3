"""Where the Intel and LLVM OpenMP runtimes lie on this machine, for the OpenMP-pair tests.

Intel libiomp comes from the ``intel-openmp`` wheel (``pip install intel-openmp``: libiomp5.so in the
environment's lib folder), LLVM libomp from Debian's ``libomp-dev`` (/usr/lib/llvm-*/lib/libomp.so).
PARINFO_TEST_LIBIOMP / PARINFO_TEST_LIBOMP name other files. Tests skip when either is missing.
"""
from __future__ import annotations

import glob
import os

PATHS: dict[str, str | None] = {}


def _first(candidates: list[str]) -> str | None:
    return next((p for p in candidates if os.path.isfile(p)), None)


def libiomp() -> str | None:
    """The path of an Intel libiomp5.so, or None: where ``openmp: intel`` finds it (a venv's base
    environment included)."""
    env = os.environ.get("PARINFO_TEST_LIBIOMP")
    if env:
        return _first([env])
    from parinfo.process import preload

    return preload.locate_runtime(preload.openmp_runtime("intel")).path


def libomp() -> str | None:
    """The path of an LLVM libomp.so, or None."""
    env = os.environ.get("PARINFO_TEST_LIBOMP")
    return _first([env] if env else sorted(glob.glob("/usr/lib/llvm-*/lib/libomp.so"), reverse=True))


def loader(order: tuple[str, ...]) -> str:
    """Python lines that load the runtimes named in ``order`` ("iomp", "omp") with RTLD_GLOBAL, calling
    nothing in them."""
    paths = {"iomp": libiomp(), "omp": libomp()}
    lines = ["import ctypes"]
    for name in order:
        lines.append(f"ctypes.CDLL({paths[name]!r}, ctypes.RTLD_GLOBAL)")
    return "\n".join(lines) + "\n"


#: Python lines printing whether any Intel-style OpenMP runtime initialised in this process: both
#: libiomp and libomp register themselves in /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid> on their first
#: call, which is the step that aborts (OMP Error #15) or hangs when the other one already did.
REGISTERED = (
    "import glob, os\n"
    "print('REGISTERED', bool(glob.glob(f'/dev/shm/__KMP_REGISTERED_LIB_{os.getpid()}_*')))\n"
)
