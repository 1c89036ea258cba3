"""Where the test interpreters made once (tests/py314.py, tests/new_numpy.py) are kept.

PARINFO_TEST_CACHE when set; for root, /var/cache/parinfo-tests (mode 0755), because the tests run
targets as another user (nobody) with those interpreters, and root's home is 0700 on a fresh
machine: an interpreter under it cannot reach its own libc for that user; else
~/.cache/parinfo-tests.
"""
from __future__ import annotations

import os
from pathlib import Path


def cache() -> Path:
    given = os.environ.get("PARINFO_TEST_CACHE")
    if given:
        return Path(given)
    if os.geteuid() == 0:
        folder = Path("/var/cache/parinfo-tests")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o755)
        except OSError:
            pass
        return folder
    return Path.home() / ".cache" / "parinfo-tests"
