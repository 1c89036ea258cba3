"""The README's examples stay true: its set-up commands, its profile, its runtime snippet."""
from __future__ import annotations

import re

import yaml

from conftest import REPO, run_py

README = (REPO / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_readme_has_exactly_the_two_setup_commands():
    setup = README.split("## Set up", 1)[1].split("## ", 1)[0]
    commands = [b.strip() for b in re.findall(r"```console\n(.*?)```", setup, flags=re.S)]
    assert commands == ['pip install . && parinfo show', 'pip install -e ".[test]" && pytest']


def test_readme_profile_example_is_valid_on_this_machine():
    from parinfo.profiles.language import resolve_profile

    (doc,) = [b for b in blocks("yaml") if b.startswith("version: 1")]
    plan = resolve_profile(yaml.safe_load(doc))
    assert plan.inter_op.value == 2 and plan.libraries["blas"].value == 1
    assert plan.env["OMP_WAIT_POLICY"] == "passive"


def test_readme_runtime_snippet_runs(tmp_path):
    (code,) = [b for b in blocks("python") if "parallel_for" in b]
    code = code.replace('"parallel.json"', repr(str(tmp_path / "parallel.json")))
    run_py(code + "\nassert abs(out - __import__('numpy').sin(x)).max() == 0\n", timeout=120)
    assert (tmp_path / "parallel.json").stat().st_size > 0
