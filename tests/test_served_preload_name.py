"""LD_PRELOAD written as a bare file name (as people write it) names the same allocator as its full
path: the loader searches for a bare name the way it searches for a needed library, and `parinfo
show` in a real process says the user's LD_PRELOAD chose it either way. Skips without Debian's
libjemalloc2 (apt-get install libjemalloc2)."""
from __future__ import annotations

import json
import os

import pytest
from conftest import clean_env, run_cli

from parinfo.process import preload as pre


def _jemalloc() -> str:
    rec = pre.allocator("jemalloc")
    path = pre.locate_allocator(rec).path
    if path is None:
        pytest.skip(f"jemalloc is not installed here ({rec.install})")
    return os.path.realpath(path)


@pytest.mark.parametrize("written", ["bare name", "full path"])
def test_ld_preload_of_jemalloc_by_name_or_path_is_the_users_choice(written):
    lib = _jemalloc()
    entry = os.path.basename(lib) if written == "bare name" else lib
    proc = run_cli("show", "--json", env=clean_env(LD_PRELOAD=entry))
    assert proc.returncode == 0, proc.stderr
    served = json.loads(proc.stdout)["backend"]["allocator"]
    assert served["name"] == "jemalloc" and os.path.realpath(served["path"]) == lib
    assert served["source"]["kind"] == "variable" and served["source"]["text"] == "env LD_PRELOAD", served["source"]
    text = run_cli("show", env=clean_env(LD_PRELOAD=entry)).stdout
    assert "jemalloc (env LD_PRELOAD)" in text and "nothing preloaded it" not in text
