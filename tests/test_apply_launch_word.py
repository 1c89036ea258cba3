"""The command parinfo suggests for launching a profile works as printed: in-process apply() of a
profile with several instances (which a running process cannot be) names a profile read from a file
by that file's path, shell-quoted, and a shipped one by its name; running the suggested command
without a program shows the plan (exit 0)."""
from __future__ import annotations

import os
import re
import shlex

import pytest
from conftest import run_cli

import parinfo
from parinfo.errors import ApplyError
from parinfo.profiles.loading import resolve_profile

TWO = "version: 1\nname: serve\ninstances: {count: 2, cpus: logical_cpus}\n"
needs_two = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two instances need two usable CPUs")


def suggested(profile) -> list[str]:
    """The words of the launch command apply() suggests when it refuses ``profile``."""
    with pytest.raises(ApplyError) as err:
        parinfo.apply(profile)
    found = re.search(r"launch them with: (parinfo apply .+ -- COMMAND)\)$", str(err.value))
    assert found, str(err.value)
    words = shlex.split(found.group(1))
    assert words[:2] == ["parinfo", "apply"] and words[-2:] == ["--", "COMMAND"], words
    return words[2:-2]


def shows_the_plan(words: list[str], cwd: str | None = None) -> str:
    proc = run_cli("apply", *words) if cwd is None else _run_in(cwd, words)
    assert proc.returncode == 0, proc.stderr
    assert "nothing applied: this is the plan" in " ".join(proc.stdout.split())
    return proc.stdout


def _run_in(cwd: str, words: list[str]):
    here = os.getcwd()
    os.chdir(cwd)
    try:
        return run_cli("apply", *words)
    finally:
        os.chdir(here)


@needs_two
def test_a_profile_file_is_named_by_its_path_quoted(tmp_path):
    path = tmp_path / "my serve's.yaml"  # a space and a quote: the word must be quoted to work
    path.write_text(TWO)
    words = suggested(str(path))
    assert words == [str(path)]
    assert "profile serve" in shows_the_plan(words)


@needs_two
def test_a_relative_file_name_is_named_as_given(tmp_path, monkeypatch):
    (tmp_path / "serve.yaml").write_text(TWO)
    monkeypatch.chdir(tmp_path)
    words = suggested("serve.yaml")
    assert words == ["serve.yaml"]
    shows_the_plan(words, str(tmp_path))


@needs_two
def test_a_shipped_profile_is_named_by_its_name():
    plan = resolve_profile("multi-instance", instances=2)
    assert suggested(plan) == ["multi-instance"]


@needs_two
def test_a_profile_given_as_data_says_to_write_it_to_a_file():
    with pytest.raises(ApplyError, match=r"parinfo apply FILE -- COMMAND, with the profile written to FILE"):
        parinfo.apply({"version": 1, "name": "serve", "instances": {"count": 2, "cpus": "logical_cpus"}})


def test_export_names_the_profile_file(tmp_path):
    path = tmp_path / "my serve.yaml"
    path.write_text("version: 1\nname: serve\nintra_op: 1\n")
    proc = run_cli("apply", str(path), "--export")
    assert proc.returncode == 0, proc.stderr
    assert f"parinfo apply {shlex.quote(str(path))} -- COMMAND" in proc.stdout
    assert "parinfo apply serve " not in proc.stdout
