"""Which thread runtimes a package would bring into a process, read from the files it ships,
without importing it: what the pytest plugin's header predicts a test session's imports load.

A top-level module's folder is found with ``importlib.util.find_spec`` (it imports nothing for a
top-level name); its runtimes are the shared objects inside it (two levels down: torch/lib) and in
the ``<distribution>.libs`` folder beside it (auditwheel's vendored copies: numpy.libs,
scikit_learn.libs), told apart by the registry's file prefixes.
"""
from __future__ import annotations

import importlib.util
import os
import re

import parinfo.safe_file as safe_file
from parinfo.process import libraries as reg

_MAX_ENTRIES = 20000  # a package tree larger than this is read no further
_MAX_RECORD = 1 << 23  # bytes of a dist-info file read at most
_NAME = re.compile(r"[-_.]+")


def _package_dir(module: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    return locations[0] if locations else None


def _runtimes_in(folder: str, depth: int, budget: list[int]) -> dict[str, str]:
    found: dict[str, str] = {}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return found
    for entry in entries:
        budget[0] -= 1
        if budget[0] < 0:
            break
        name = entry.name.lower()
        if ".so" in name and entry.is_file():
            rec = reg.by_prefix(name)
            if rec is not None and rec.kind is reg.LibraryKind.NATIVE:
                found.setdefault(rec.name, entry.path)
        elif depth > 0 and entry.is_dir(follow_symlinks=False) and not name.startswith(("__pycache__", "test")):
            for lib, path in _runtimes_in(entry.path, depth - 1, budget).items():
                found.setdefault(lib, path)
    return found


def _ships(site: str, libs_dir: str, module: str) -> bool:
    """Whether the distribution a ``<name>.libs`` folder belongs to installs top-level ``module``:
    its name, its top_level.txt, or a path of its RECORD under ``module/``."""
    stem = _NAME.sub("_", libs_dir[: -len(".libs")]).lower()
    if stem == module.lower():
        return True
    try:
        infos = [e for e in os.listdir(site) if e.endswith(".dist-info")
                 and _NAME.sub("_", e.split("-", 1)[0]).lower() == stem]
    except OSError:
        return False
    for info in infos:
        for name, probe in (("top_level.txt", f"\n{module}\n"), ("RECORD", f"\n{module}/")):
            try:
                raw = safe_file.read_file(os.path.join(site, info, name), _MAX_RECORD, follow=True)
            except OSError:
                continue
            if probe in "\n" + raw.decode("utf-8", "replace"):
                return True
    return False


def shipped_runtimes(module: str) -> dict[str, str]:
    """{library: a file} for the thread runtimes that top-level ``module``'s package ships; {} for
    a module it cannot find or that ships none. Nothing is imported."""
    folder = _package_dir(module)
    if folder is None:
        return {}
    budget = [_MAX_ENTRIES]
    found = _runtimes_in(folder, 2, budget)
    site = os.path.dirname(folder)
    try:
        vendored = [e for e in os.listdir(site) if e.endswith(".libs")]
    except OSError:
        vendored = []
    for libs in vendored:
        if _ships(site, libs, module):
            for lib, path in _runtimes_in(os.path.join(site, libs), 0, budget).items():
                found.setdefault(lib, path)
    return found
