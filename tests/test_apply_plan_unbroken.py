"""`parinfo apply PROFILE` prints the plan without breaking a value: a long variable value
(OMP_PLACES, jemalloc's MALLOC_CONF) and a long path each stay whole on one line, however narrow the
output (80 columns when not a terminal); reasons wrap only at spaces."""
from __future__ import annotations

import pytest
from conftest import run_cli

from parinfo.process import preload as pre

PLACES = ",".join(f"{{{i % 2}}}" for i in range(30))  # {0},{1},... : 119 characters, no space
CONF = "oversize_threshold:1,background_thread:true,metadata_thp:auto,dirty_decay_ms:10000,muzzy_decay_ms:10000"


def deep(tmp_path):
    d = tmp_path / "a-rather-long-directory-name-for-profiles" / "and-another-one-below-it-as-well"
    d.mkdir(parents=True)
    return d / "serve.yaml"


def plan_text(path) -> str:
    proc = run_cli("apply", str(path))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_long_value_and_a_long_path_are_each_on_one_line(tmp_path):
    path = deep(tmp_path)
    path.write_text(f'version: 1\nname: serve\nenv:\n  OMP_PLACES: "{PLACES}"\n  OMP_WAIT_POLICY: passive\n')
    lines = plan_text(path).splitlines()
    (row,) = [line for line in lines if line.startswith("OMP_PLACES")]
    assert PLACES in row, row
    (wait,) = [i for i, line in enumerate(lines) if line.startswith("OMP_WAIT_POLICY")]
    # its reason names the profile's file and line: the path is whole, on the row or the next line
    assert any(f"{path}:5" in line for line in lines[wait:wait + 3]), lines[wait:wait + 3]


def test_jemallocs_settings_string_is_whole(tmp_path):
    rec = pre.allocator("jemalloc")
    found = pre.locate_allocator(rec).path
    if found is None:
        pytest.skip(f"jemalloc is not installed here ({rec.install})")
    path = deep(tmp_path)
    path.write_text(f'version: 1\nname: serve\nallocator: {{name: jemalloc, conf: "{CONF}"}}\n')
    lines = plan_text(path).splitlines()
    (row,) = [line for line in lines if line.startswith("MALLOC_CONF")]
    assert CONF in row, row
    (row,) = [line for line in lines if line.startswith("allocator ")]
    assert found in row, row


def test_a_short_plan_still_fits_80_columns():
    lines = plan_text("latency").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("setting"))
    end = next(i for i, line in enumerate(lines) if line.startswith(("note:", "nothing applied")))
    assert max(len(line.rstrip()) for line in lines[start:end]) <= 80
