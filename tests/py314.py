"""A Python 3.14 interpreter (sys.remote_exec) with numpy, threadpoolctl, numexpr, scikit-learn and
parinfo's dependencies, for the attach tests: Debian sid's python3.14 binary packages unpacked next to
sid's own libc6, never installed into the system.

Made once under PARINFO_TEST_CACHE (default: tests/cache_dir.py, /var/cache/parinfo-tests for root,
where the user nobody can run it)/py314 and reused:

1. ``apt-get update`` and ``apt-get download`` with a private configuration (sid's source list, lists
   and package cache in that folder; the machine's own sources, lists and status are not touched);
2. ``dpkg -x`` of each package into ``root/`` (no install, no maintainer scripts);
3. ``patchelf``: the interpreter's ELF interpreter is sid's ld.so in ``root/`` and its rpath sid's
   library folder, so it runs with the libc it was built for (patchelf is installed with apt-get when
   missing and this runs as root);
4. a venv from it (``--without-pip``: Debian strips ensurepip's wheels), pip installed from sid's pip
   wheel, then numpy, threadpoolctl, numexpr, scikit-learn and parinfo's dependencies with that pip.

``python tests/py314.py`` makes it ahead of time (CI does) and prints the venv's python, or one line
saying why it cannot, with exit code 1. PARINFO_TEST_PY314 names an interpreter to use instead.

``python tests/py314.py --venv DIR`` also makes DIR a bare venv of that interpreter with pip (made
once, kept while it works), where CI installs parinfo as the README says and runs the whole suite on
3.14; it prints DIR's python. DIR belongs to one clone: an editable install in a venv shared by
several clones would point their tests at another clone's code.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

SUITE = "sid"
MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
VERSION = "3.14"
# The interpreter, its standard library, and the libraries its extension modules and numpy's wheel link.
PACKAGES = (f"python{VERSION}", f"python{VERSION}-minimal", f"libpython{VERSION}-minimal",
            f"libpython{VERSION}-stdlib", "python3-pip-whl", "libc6", "libgcc-s1", "libstdc++6", "zlib1g",
            "libexpat1", "libssl3t64", "libffi8", "libbz2-1.0", "liblzma5", "libzstd1", "libsqlite3-0",
            "libuuid1", "libncursesw6", "libtinfo6", "libreadline8t64", "libdb5.3t64")
# numpy's OpenBLAS, scikit-learn's OpenMP runtime (libgomp), numexpr's Python-module pool.
WANTED = ("numpy", "threadpoolctl", "numexpr", "scikit-learn")
_CHECK = ("import sys, numpy, threadpoolctl, numexpr, sklearn, psutil, yaml, typer; "
          "sys.exit(0 if sys.version_info[:2] >= (3, 14) and hasattr(sys, 'remote_exec') else 1)")
# Debian's multiarch triplet and dynamic loader per architecture.
_ARCH = {"amd64": ("x86_64-linux-gnu", "ld-linux-x86-64.so.2"), "arm64": ("aarch64-linux-gnu", "ld-linux-aarch64.so.1")}


class Unavailable(Exception):
    """Why the interpreter cannot be made here (one line)."""


def _cache() -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cache_dir import cache

    return cache()


def _run(cmd: list[str], what: str, cwd: Path | None = None, timeout: float = 900) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{what}: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise Unavailable(f"{what}: {tail[0]}")
    return done.stdout


def _apt_options(apt: Path) -> list[str]:
    """apt-get options that read and write only the private folder ``apt``."""
    return ["-o", f"Dir::Etc::SourceList={apt / 'sources.list'}", "-o", f"Dir::Etc::SourceParts={apt / 'sources.d'}",
            "-o", f"Dir::Etc::Preferences={apt / 'preferences'}", "-o", f"Dir::Etc::PreferencesParts={apt / 'prefs.d'}",
            "-o", f"Dir::State::Lists={apt / 'lists'}", "-o", f"Dir::Cache={apt / 'cache'}",
            "-o", "Dir::State::status=/dev/null", "-o", "Acquire::Languages=none", "-q"]


def _download(folder: Path, arch: str) -> list[Path]:
    """sid's packages, downloaded into ``folder/debs`` with a private apt configuration."""
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        raise Unavailable("no apt-get or dpkg here: Debian's python3.14 packages cannot be fetched")
    if not os.path.exists(KEYRING):
        raise Unavailable(f"no {KEYRING}: Debian's package signatures cannot be checked")
    apt = folder / "apt"
    for sub in ("sources.d", "prefs.d", "lists/partial", "cache/archives/partial"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb [arch={arch} signed-by={KEYRING}] {MIRROR} {SUITE} main\n")
    options = _apt_options(apt)
    _run(["apt-get", *options, "update"], f"apt-get update ({SUITE})")
    debs = folder / "debs"
    shutil.rmtree(debs, ignore_errors=True)
    debs.mkdir()
    _run(["apt-get", *options, "download", *[f"{p}:{arch}" if p != "python3-pip-whl" else p for p in PACKAGES]],
         f"apt-get download ({SUITE})", cwd=debs)
    return sorted(debs.glob("*.deb"))


def _patchelf() -> str:
    found = shutil.which("patchelf")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-qq", "patchelf"], capture_output=True, env=env, timeout=600)
        found = shutil.which("patchelf")
    if found is None:
        raise Unavailable("no patchelf (apt-get install patchelf, as root)")
    return found


def _unpack(folder: Path, debs: list[Path], arch: str) -> Path:
    """The packages unpacked into ``folder/root``; the interpreter patched to run on sid's libc."""
    triplet, loader = _ARCH[arch]
    root = folder / "root"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    for deb in debs:
        _run(["dpkg", "-x", str(deb), str(root)], f"dpkg -x {deb.name}")
    python = root / "usr" / "bin" / f"python{VERSION}"
    libs = root / "usr" / "lib" / triplet
    if not python.exists() or not (libs / loader).exists():
        raise Unavailable(f"the unpacked packages hold no {python.name} or {loader}")
    _run([_patchelf(), "--set-interpreter", str(libs / loader), "--force-rpath", "--set-rpath", str(libs),
          str(python)], "patchelf")
    return python


def _requirements() -> list[str]:
    """parinfo's own dependencies (pyproject.toml), so that parinfo runs from the source tree there."""
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    return [*WANTED, *[d for d in project["dependencies"] if not d.startswith(WANTED)]]


def _make(folder: Path) -> Path:
    arch = _run(["dpkg", "--print-architecture"], "dpkg --print-architecture").strip()
    if arch not in _ARCH:
        raise Unavailable(f"architecture {arch}: only {', '.join(_ARCH)} are prepared")
    base = _unpack(folder, _download(folder, arch), arch)
    venv = folder / "venv"
    _run([str(base), "-m", "venv", "--clear", "--without-pip", str(venv)], "venv --without-pip")
    python = venv / "bin" / "python"
    wheels = sorted((folder / "root" / "usr" / "share" / "python-wheels").glob("pip-*.whl"))
    if not wheels:
        raise Unavailable("python3-pip-whl holds no pip wheel")
    _run([str(python), f"{wheels[-1]}/pip", "install", "-q", "--no-index", "--disable-pip-version-check",
          str(wheels[-1])], "pip from its wheel")
    _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *_requirements()],
         f"pip install {' '.join(WANTED)}")
    return python


def _works(python: str | Path) -> bool:
    try:
        return subprocess.run([str(python), "-c", _CHECK], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def venv_python() -> tuple[str | None, str]:
    """(a Python 3.14 interpreter with WANTED, "") or (None, why not, in one line)."""
    given = os.environ.get("PARINFO_TEST_PY314")
    if given:
        return (given, "") if _works(given) else (None, f"PARINFO_TEST_PY314={given} is not a Python 3.14 "
                                                         f"with {', '.join(WANTED)} and parinfo's dependencies")
    folder = _cache() / "py314"
    python = folder / "venv" / "bin" / "python"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder.parent / ".lock-py314", "w") as lock:  # one maker at a time (xdist workers, CI)
            fcntl.flock(lock, fcntl.LOCK_EX)
            if python.exists() and _works(python):
                return str(python), ""
            made = _make(folder)
            if not _works(made):
                raise Unavailable(f"{made} was made but does not import {', '.join(WANTED)}")
            return str(made), ""
    except Unavailable as exc:
        return None, f"no Python 3.14: {exc}"
    except OSError as exc:
        return None, f"no Python 3.14: {exc.strerror or exc}"


def _pip_wheel() -> Path | None:
    """Debian's pip wheel unpacked next to the interpreter (Debian strips ensurepip's wheels)."""
    wheels = sorted((_cache() / "py314" / "root" / "usr" / "share" / "python-wheels").glob("pip-*.whl"))
    return wheels[-1] if wheels else None


def suite_venv(folder: Path) -> tuple[str | None, str]:
    """(the python of ``folder``, a venv of the 3.14 interpreter with pip, "") or (None, why not)."""
    base, why = venv_python()
    if base is None:
        return None, why
    python = folder / "bin" / "python"
    pip_ok = "import sys, pip; sys.exit(0 if sys.version_info[:2] >= (3, 14) else 1)"
    try:
        if python.exists() and subprocess.run([str(python), "-c", pip_ok], capture_output=True,
                                              timeout=120).returncode == 0:
            return str(python), ""
        _run([base, "-m", "venv", "--clear", "--without-pip", str(folder)], f"venv --without-pip {folder}")
        if subprocess.run([str(python), "-m", "ensurepip", "-q"], capture_output=True, timeout=600).returncode != 0:
            wheel = _pip_wheel()
            if wheel is None:
                raise Unavailable("no ensurepip and no pip wheel for the 3.14 venv")
            _run([str(python), f"{wheel}/pip", "install", "-q", "--no-index", "--disable-pip-version-check",
                  str(wheel)], "pip from its wheel")
    except Unavailable as exc:
        return None, f"no Python 3.14 venv for the suite: {exc}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"no Python 3.14 venv for the suite: {exc}"
    return str(python), ""


if __name__ == "__main__":
    if sys.argv[1:2] == ["--venv"] and len(sys.argv) == 3:
        made, why = suite_venv(Path(sys.argv[2]).resolve())
    else:
        made, why = venv_python()
    print(made or why)
    sys.exit(0 if made else 1)
