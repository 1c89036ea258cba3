"""A profile's ``wait_policy`` sets how every runtime's idle threads wait at once: the settings come
from the registry's ``idle_wait`` of each runtime, say why, give way to a variable written under
``env``, and reach a program `parinfo apply` launches (read back there)."""
from __future__ import annotations

import json
import sys

import pytest
from conftest import clean_env, run_cli

from parinfo.errors import ProfileError
from parinfo.profiles.loading import resolve_profile

PASSIVE = {"OMP_WAIT_POLICY": "passive", "OPENBLAS_THREAD_TIMEOUT": "4"}


def _waits(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in ("OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT")}


def test_passive_sets_every_runtimes_sleep_setting_and_says_why():
    plan = resolve_profile({"version": 1, "name": "w", "wait_policy": "passive"})
    assert _waits(plan.env) == PASSIVE
    assert plan.env_why["OMP_WAIT_POLICY"] == plan.env_why["OPENBLAS_THREAD_TIMEOUT"] == "wait_policy: passive"


def test_active_and_default_and_env_written_wins():
    assert _waits(resolve_profile({"version": 1, "wait_policy": "active"}).env) == {"OMP_WAIT_POLICY": "active"}
    assert _waits(resolve_profile({"version": 1, "wait_policy": "default"}).env) == {}
    assert _waits(resolve_profile({"version": 1}).env) == {}
    plan = resolve_profile({"version": 1, "wait_policy": "passive", "env": {"OMP_WAIT_POLICY": "active"}})
    assert _waits(plan.env) == {"OMP_WAIT_POLICY": "active", "OPENBLAS_THREAD_TIMEOUT": "4"}
    assert plan.env_why["OMP_WAIT_POLICY"].startswith("set in the profile")


def test_a_word_it_does_not_know_is_one_line_naming_the_words():
    with pytest.raises(ProfileError) as info:
        resolve_profile({"version": 1, "wait_policy": "spin"})
    text = str(info.value)
    assert "\n" not in text and "wait_policy" in text and "passive" in text and "active" in text


def test_apply_container_launches_the_program_with_every_runtime_sleeping():
    code = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('OMP_WAIT_POLICY', " \
           "'OPENBLAS_THREAD_TIMEOUT')}))"
    proc = run_cli("apply", "container", "--", sys.executable, "-c", code, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == PASSIVE
