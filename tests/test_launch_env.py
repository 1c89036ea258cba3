"""The launched process's environment: plan variables, the user's own values, the hook's instructions."""
from __future__ import annotations

import os

from parinfo.launch.child import HOOK_DIR, HOOK_VAR, child_environ
from parinfo.profiles.plan import InstancePlan, Plan, Setting


def make_plan(intra: int = 1, inter: int = 1, *, torch: int | None = None, instances: int = 0,
              affinity: tuple[int, ...] | None = None) -> Plan:
    env = {"PARINFO_NUM_THREADS": str(intra), "PARINFO_NUM_INTEROP_THREADS": str(inter),
           "OMP_NUM_THREADS": str(intra), "MKL_NUM_THREADS": str(intra)}
    libs = {"torch": Setting("torch", torch, "given")} if torch is not None else {}
    insts = tuple(InstancePlan(i, (i,), i + 1, 1, {"OMP_NUM_THREADS": str(i + 1)}) for i in range(instances))
    return Plan("p", "d", "hand", Setting("intra_op", intra, "given"), Setting("inter_op", inter, "given"),
                libs, env, {}, affinity, "given", insts)


def test_plan_variables_and_profile_name_are_set():
    child = child_environ(make_plan(2, 3), {"PATH": "/bin"})
    assert child.env["OMP_NUM_THREADS"] == "2"
    assert child.env["PARINFO_NUM_INTEROP_THREADS"] == "3"
    assert child.env["PARINFO_PROFILE"] == "p"
    assert child.env["PATH"] == "/bin"
    assert child.kept == () and child.overridden == ()
    assert child.torch_intra == 2 and child.torch_inter == 3


def test_user_value_is_kept_without_force_and_said_once():
    child = child_environ(make_plan(2), {"OMP_NUM_THREADS": "7"})
    assert child.env["OMP_NUM_THREADS"] == "7"
    assert child.kept == (("OMP_NUM_THREADS", "7", "2"),)
    (line,) = child.messages("p")
    assert line.startswith("parinfo: keeping OMP_NUM_THREADS='7'") and "--force" in line


def test_user_value_equal_to_plan_is_not_reported():
    child = child_environ(make_plan(2), {"OMP_NUM_THREADS": "2"})
    assert child.kept == () and child.messages("p") == []


def test_force_overrides_and_says_so():
    child = child_environ(make_plan(2), {"OMP_NUM_THREADS": "7"}, force=True)
    assert child.env["OMP_NUM_THREADS"] == "2"
    assert child.overridden == (("OMP_NUM_THREADS", "7", "2"),)
    assert "overriding OMP_NUM_THREADS='7'" in child.messages("p")[0]


def test_invalid_user_value_is_kept_and_called_invalid():
    child = child_environ(make_plan(2), {"OMP_NUM_THREADS": "abc"})
    assert "invalid" in child.messages("p")[0]


def test_torch_follows_the_users_own_variable():
    assert child_environ(make_plan(2), {"MKL_NUM_THREADS": "5"}).torch_intra is None
    assert child_environ(make_plan(2), {"MKL_NUM_THREADS": "5"}, force=True).torch_intra == 2
    assert child_environ(make_plan(2, torch=1), {}).torch_intra == 1


def test_hook_is_first_on_pythonpath_once_and_user_paths_stay():
    base = {"PYTHONPATH": os.pathsep.join([HOOK_DIR, "/a", "/b"])}
    env = child_environ(make_plan(), base).env
    assert env["PYTHONPATH"].split(os.pathsep) == [HOOK_DIR, "/a", "/b"]
    assert os.path.isfile(os.path.join(HOOK_DIR, "sitecustomize.py"))


def test_hook_instructions_name_counts_and_watched_variables():
    env = child_environ(make_plan(2, 3), {"OMP_NUM_THREADS": "7"}).env
    fields = dict(f.split("=", 1) for f in env[HOOK_VAR].split()[1:])
    assert env[HOOK_VAR].split()[0] == "1"
    assert fields["intra"] == "-"  # torch is left to the user's OMP_NUM_THREADS
    assert fields["inter"] == "3"
    watched = fields["watch"].split(",")
    assert "MKL_NUM_THREADS" in watched and "OMP_NUM_THREADS" not in watched  # the user's own is not ours


def test_instance_environment_has_its_counts_index_and_cpus():
    plan = make_plan(4, 2, instances=2)
    child = child_environ(plan, {}, instance=plan.instances[1], instances=2)
    assert child.env["PARINFO_INSTANCE"] == "1" and child.env["PARINFO_INSTANCES"] == "2"
    assert child.env["PARINFO_NUM_THREADS"] == "2" and child.env["OMP_NUM_THREADS"] == "2"
    assert child.env["MKL_NUM_THREADS"] == "4"  # from the plan: the instance did not override it
    assert child.cpus == (1,)
    assert child.torch_intra == 2 and child.torch_inter == 1


def test_empty_pythonpath_entries_keep_their_meaning():
    env = child_environ(make_plan(), {"PYTHONPATH": os.pathsep.join(["/a", "", "/b"])}).env
    assert env["PYTHONPATH"].split(os.pathsep) == [HOOK_DIR, "/a", "", "/b"]
    assert child_environ(make_plan(), {"PYTHONPATH": ""}).env["PYTHONPATH"] == HOOK_DIR


def test_values_set_by_an_enclosing_launch_are_not_the_users():
    outer = child_environ(make_plan(2), {}).env
    inner = child_environ(make_plan(1), outer)
    assert inner.kept == () and inner.env["OMP_NUM_THREADS"] == "1"
    assert inner.torch_intra == 1
    assert inner.env["PYTHONPATH"] == HOOK_DIR


def test_a_users_value_under_an_enclosing_launch_is_still_kept():
    outer = child_environ(make_plan(2), {"OMP_NUM_THREADS": "7"}).env
    inner = child_environ(make_plan(1), outer)
    assert inner.kept == (("OMP_NUM_THREADS", "7", "1"),)
