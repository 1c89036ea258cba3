"""Every fix's numbers satisfy the finding's own rule, on many machine shapes (fake facts).

A fix is read as a user would: the counts it prints are put in force and the rules run again; the
finding must be gone. Fixes that point at `parinfo apply` name the variable, or `--force` when a
variable the user set would be kept.
"""
from __future__ import annotations

import itertools
import re

import pytest

from parinfo.diagnostics.model import Report
from parinfo.diagnostics.process_rules import diagnose

SHAPES = [(usable, quota) for usable in (1, 2, 3, 4, 6, 8, 12, 16, 24, 64, 96)
          for quota in (None, usable + 0.5)]


def sections(usable: int, quota: float | None, logical: int | None = None) -> dict:
    logical = logical or usable * 2
    return {
        "machine": {"usable_cpus": usable, "usable_physical_cores": max(1, usable // 2), "smt": True,
                    "quota": quota, "affinity": list(range(logical if quota else usable)),
                    "logical_cpus": logical},
        "runtime": {}, "pools": [], "frameworks": {"torch": None}, "settings": [], "environment": [],
    }


def _by_id(s: dict, fid: str):
    return [f for f in diagnose(Report.from_dict(s)) if f.id == fid]


@pytest.mark.parametrize("usable, quota", SHAPES)
def test_oversubscribed_interop_fix_fits(usable, quota):
    for inter, intra in itertools.product((2, 3, 4, 8, 32, 128, 200), (2, 3, 4, 16, 64, 256)):
        s = sections(usable, quota)
        s["frameworks"]["torch"] = {"inter_op": inter, "intra_op": intra, "interop_started": True}
        found = _by_id(s, "oversubscribed-interop")
        if inter * intra <= usable:
            assert not found
            continue
        fix = found[0].fix
        new_inter = int(re.search(r"set_num_interop_threads\((\d+)\)", fix).group(1))
        new_intra = int(re.search(r"set_num_threads\((\d+)\)", fix).group(1))
        assert new_inter * new_intra <= usable, fix
        s["frameworks"]["torch"].update(inter_op=new_inter, intra_op=new_intra)
        assert not _by_id(s, "oversubscribed-interop"), fix


@pytest.mark.parametrize("usable, quota", SHAPES)
@pytest.mark.parametrize("variable", [None, "OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_count_above_usable_fix_fits_and_names_the_variable(usable, quota, variable):
    s = sections(usable, quota)
    count = usable * 3
    env = {variable: str(count)} if variable else {}
    s["environment"] = [{"name": k, "value": v, "valid": True} for k, v in env.items()]
    source = ({"kind": "variable", "detail": f"{variable}={count}", "text": f"env {variable}={count}"} if variable
              else {"kind": "library default", "detail": "", "text": "default"})
    s["settings"] = [{"library": "libgomp", "count": count, "source": source, "variable": variable,
                      "precedence": ["OMP_NUM_THREADS"]}]
    fid = "count-above-quota" if quota is not None else "count-above-usable"
    found = _by_id(s, fid)
    assert len(found) == 1
    fix = found[0].fix
    m = re.search(r"set ([A-Z_]+)=(\d+)", fix)
    assert m, fix
    if variable:
        assert m.group(1) == variable  # the variable that decides the count, not another one
        if quota is not None:
            assert "--force" in fix  # apply keeps the user's variable without it
    s["settings"][0]["count"] = int(m.group(2))
    assert not _by_id(s, fid), fix


@pytest.mark.parametrize("usable", [2, 4, 8, 16, 64])
def test_count_above_physical_fix_fits(usable):
    s = sections(usable, None)
    s["settings"] = [{"library": "openblas", "count": usable,
                      "source": {"kind": "library default", "detail": "", "text": "default"}}]
    found = _by_id(s, "count-above-physical-cores")
    assert found
    n = int(re.search(r"try (\d+) threads?", found[0].fix).group(1))
    s["settings"][0]["count"] = n
    assert not _by_id(s, "count-above-physical-cores")
