"""Resolving profiles: the numbers and the why of each setting, defaults, clamping, instances,
affinity, extends, and in-memory profiles."""
from __future__ import annotations

import textwrap

import pytest
import yaml
from profile_machines import MACHINES, machine

from parinfo.errors import ProfileError, UsageError
from parinfo.profiles.loading import load_profile, resolve_profile
from parinfo.profiles.model import Profile
from parinfo.profiles.plan import Plan
from parinfo.records.convert import dump


@pytest.fixture
def write(tmp_path):
    def _write(text: str, name: str = "p.yaml"):
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path
    return _write


def test_why_shows_the_expression_and_its_numbers(write):
    p = write("""\
        version: 1
        intra_op: physical_cores // 2
        inter_op: min(2, numa_nodes)
        """)
    plan = resolve_profile(p, machine(28, smt=2))
    assert isinstance(plan, Plan)
    assert (plan.intra_op.value, plan.intra_op.why) == (14, "physical_cores // 2 = 28 // 2 = 14")
    assert plan.inter_op.why == "min(2, numa_nodes) = min(2, 1) = 1"
    assert plan.libraries["openmp"].why == "follows intra_op = 14"
    assert plan.env_why["OMP_NUM_THREADS"] == "libraries.openmp = 14"


def test_counts_below_one_are_raised_to_one_with_a_note(write):
    p = write("version: 1\nintra_op: physical_cores // 64\ninter_op: 1 - usable_cpus\n")
    plan = resolve_profile(p, MACHINES["2cpus"])
    assert plan.intra_op.value == 1 and plan.inter_op.value == 1
    assert plan.intra_op.why == "physical_cores // 64 = 2 // 64 = 0, raised to 1"
    assert "intra_op: physical_cores // 64 = 2 // 64 = 0 is below 1; raised to 1" in plan.notes
    assert any(n.startswith("inter_op: 1 - usable_cpus") for n in plan.notes)


def test_unset_counts_default_to_the_usable_cpus(write):
    plan = resolve_profile(write("version: 1\n"), MACHINES["16cores_smt"])
    assert plan.intra_op.value == 32 and plan.inter_op.value == 32
    assert plan.intra_op.why == "usable_cpus = 32 (default: the profile does not set intra_op)"
    assert plan.name == "p" and plan.description == ""


def test_huge_counts_depend_on_the_machine(write):
    p = write("version: 1\nintra_op: 100\n")
    assert resolve_profile(p, MACHINES["16cores_smt"]).intra_op.value == 100
    with pytest.raises(ProfileError, match=r"p\.yaml:2:11: 'intra_op' is 100 \(set in the profile\), more than 64"):
        resolve_profile(p, MACHINES["1cpu"])


def test_library_counts_and_their_variables(write):
    p = write("""\
        version: 1
        intra_op: 4
        libraries:
          blas: 1
          mkl: usable_cpus
          torch: 2
        env:
          MKL_DYNAMIC: false
          KMP_BLOCKTIME: 0
        """)
    plan = resolve_profile(p, MACHINES["16cores_smt"])
    env = plan.env
    assert env["OPENBLAS_NUM_THREADS"] == env["BLIS_NUM_THREADS"] == "1"
    assert env["MKL_NUM_THREADS"] == "32" and env["OMP_NUM_THREADS"] == "4"
    assert env["MKL_DYNAMIC"] == "FALSE" and env["KMP_BLOCKTIME"] == "0"
    assert plan.libraries["torch"].value == 2
    assert any("torch reads MKL_NUM_THREADS (32)" in n for n in plan.notes)
    assert not any("MKL_DYNAMIC=FALSE" in n for n in plan.notes), "MKL_DYNAMIC=FALSE lifts MKL's cap"
    assert "torch" not in " ".join(env)


def test_mkl_above_the_physical_cores_is_noted(write):
    plan = resolve_profile(write("version: 1\nintra_op: usable_cpus\n"), MACHINES["16cores_smt"])
    assert any("MKL uses at most the physical cores" in n for n in plan.notes)


def test_explicit_affinity_is_checked_against_the_allowed_cpus(write):
    facts = MACHINES["affinity_subset"]
    plan = resolve_profile(write("version: 1\naffinity: [0, '16-17']\nintra_op: 3\n"), facts)
    assert plan.affinity == (0, 16, 17)
    with pytest.raises(ProfileError, match=r"p\.yaml:2:12: affinity CPU 4-5 is outside the CPUs this process may "
                                           r"use \(0-3,16-17\)"):
        resolve_profile(write("version: 1\naffinity: '2-5'\n"), facts)


def test_compact_and_spread_affinity_on_two_numa_nodes(write):
    facts = MACHINES["2numa_x28"]
    compact = resolve_profile(write("version: 1\nintra_op: 4\ninter_op: 1\naffinity: compact\n"), facts)
    assert compact.affinity == (0, 1, 2, 3)
    spread = resolve_profile(write("version: 1\nintra_op: 4\ninter_op: 1\naffinity: spread\n"), facts)
    assert spread.affinity == (0, 1, 28, 29)
    assert spread.affinity_why.startswith("spread: 4 CPUs")
    many = resolve_profile(write("version: 1\nintra_op: 60\ninter_op: 1\naffinity: compact\n"), facts)
    # node 0's cores, then their siblings, then node 1
    assert many.affinity == (*range(0, 32), *range(56, 84))


def test_affinity_none_inherits(write):
    plan = resolve_profile(write("version: 1\naffinity: none\n"), MACHINES["2cpus"])
    assert plan.affinity is None and plan.affinity_why == "not set: inherited (0-1)"


def test_instances_count_and_cores_per_instance(write):
    facts = MACHINES["16cores_smt"]
    plan = resolve_profile(write("version: 1\ninstances: 3\nintra_op: cores_per_instance\n"), facts)
    assert [i.cpus for i in plan.instances] == [tuple(range(0, 5)), tuple(range(5, 10)), tuple(range(10, 15))]
    assert any("1 usable physical core left idle" in n for n in plan.notes)
    plan = resolve_profile(write("version: 1\ninstances: {cores_per_instance: 4}\n"
                                 "intra_op: cores_per_instance\ninter_op: instances\n"), facts)
    assert len(plan.instances) == 4 and {i.intra_op for i in plan.instances} == {4}
    assert {i.inter_op for i in plan.instances} == {4}
    assert plan.affinity is None and plan.affinity_why.startswith("per instance: 4 instances")


def test_instances_override_and_its_errors(write):
    facts = MACHINES["2cpus"]
    p = write("version: 1\nintra_op: cores_per_instance\n")
    plan = resolve_profile(p, facts, instances=2)
    assert [i.cpus for i in plan.instances] == [(0,), (1,)]
    with pytest.raises(UsageError, match=r"--instances: 3 instances need at least 3 usable physical cores"):
        resolve_profile(p, facts, instances=3)
    with pytest.raises(UsageError, match="must be a whole number of 1 or more"):
        resolve_profile(p, facts, instances=0)


def test_instances_on_uneven_nodes_get_their_own_counts(write):
    facts = machine(8, numa=2, affinity=[0, 1, 2, 4, 5, 6, 7])
    plan = resolve_profile(write("version: 1\ninstances: {per_numa_node: true}\nintra_op: cores_per_instance\n"),
                           facts)
    assert [(i.cpus, i.intra_op) for i in plan.instances] == [((0, 1, 2), 3), ((4, 5, 6, 7), 4)]
    assert plan.instances[1].env["PARINFO_NUM_THREADS"] == "4"
    assert any("counts are per instance" in n for n in plan.notes)


def test_instances_with_an_explicit_cpu_list_split_that_list(write):
    plan = resolve_profile(write("version: 1\naffinity: 4-7\ninstances: 2\n"), MACHINES["16cores_smt"])
    assert [i.cpus for i in plan.instances] == [(4, 5), (6, 7)]


def test_extends_merges_child_over_parent(write):
    write("""\
        version: 1
        name: base
        description: the base
        intra_op: 2
        inter_op: 3
        libraries: {blas: 1, mkl: 2}
        env: {OMP_WAIT_POLICY: passive}
        """, "base.yaml")
    child = write("""\
        version: 1
        extends: ./base.yaml
        intra_op: 4
        libraries: {mkl: 3}
        """, "child.yaml")
    prof = load_profile(child)
    assert isinstance(prof, Profile)
    assert prof.name == "child" and prof.description == "the base"
    assert prof.libraries == {"blas": 1, "mkl": 3}
    assert prof.extends is None and "extends" not in prof.document()
    assert prof.chain == (str(child), str(child.parent / "base.yaml"))
    plan = resolve_profile(prof, MACHINES["16cores_smt"])
    assert (plan.intra_op.value, plan.inter_op.value) == (4, 3)
    assert plan.env["OMP_WAIT_POLICY"] == "passive"
    assert plan.libraries["blas"].value == 1 and plan.libraries["numexpr"].value == 4


def test_extends_a_shipped_profile_by_name(write):
    p = write("version: 1\nextends: latency\nname: my-latency\ninter_op: 2\n")
    plan = resolve_profile(p, MACHINES["16cores_smt"])
    assert (plan.name, plan.intra_op.value, plan.inter_op.value) == ("my-latency", 16, 2)


def test_errors_in_an_extended_profile_point_at_that_file(write):
    write("version: 1\nintra_op: 1000\n", "base.yaml")
    child = write("version: 1\nextends: base.yaml\n", "child.yaml")
    with pytest.raises(ProfileError, match=r"base\.yaml:2:11: 'intra_op' is 1000"):
        resolve_profile(child, MACHINES["2cpus"])


def test_in_memory_profiles_are_validated_too():
    plan = resolve_profile({"version": 1, "intra_op": "usable_cpus // 2", "name": "mem"}, MACHINES["16cores_smt"])
    assert plan.intra_op.value == 16 and plan.name == "mem"
    with pytest.raises(ProfileError, match=r"^<profile>: unknown key 'intra' \(did you mean 'intra_op'\?\)$"):
        resolve_profile({"version": 1, "intra": 2}, MACHINES["2cpus"])
    with pytest.raises(ProfileError, match="a profile is a name, a path or a dict"):
        resolve_profile(3, MACHINES["2cpus"])


def test_plan_to_dict_round_trips_to_json():
    import json

    plan = resolve_profile("multi-instance", MACHINES["2numa_x28"])
    d = json.loads(json.dumps(dump(plan)))
    assert d["intra_op"] == {"value": 28, "why": "cores_per_instance = 28"}
    assert len(d["instances"]) == 2


def test_resolving_this_machine_needs_no_facts():
    plan = resolve_profile("latency")
    assert plan.intra_op.value >= 1


def test_expression_valid_on_some_machines_is_checked_per_machine(tmp_path):
    # Division by (physical_cores - 1) is fine on 16 cores and zero on one: only the latter fails.
    p = tmp_path / "per-machine.yaml"
    p.write_text("version: 1\nintra_op: usable_cpus // (physical_cores - 1)\n")
    plan = resolve_profile(p, MACHINES["16cores_smt"])
    assert plan.intra_op.value == 2
    assert plan.intra_op.why == "usable_cpus // (physical_cores - 1) = 32 // (16 - 1) = 2"
    with pytest.raises(ProfileError) as info:
        resolve_profile(p, MACHINES["1cpu"])
    line = str(info.value)
    assert line == (f"{p}:2:23: 'intra_op': usable_cpus // (physical_cores - 1) = 1 // (1 - 1) on this machine: "
                    f"division by zero at column 13 (wrap the divisor in max(1, ...) so that it is at least 1 "
                    f"on every machine)")


@pytest.mark.parametrize("text", [
    "allocator: auto\nopenmp: gnu\nmemory: interleave\ninstances: {count: 2, cpus: logical_cpus, cross_numa: true}\n",
    "allocator: {name: jemalloc, conf: 'background_thread:true'}\nopenmp: default\nmemory: local\n",
    "allocator: {name: tcmalloc}\ninstances: {cores_per_instance: 1, nodes: [0]}\naffinity: compact\n",
])
def test_a_checked_profile_checks_again_to_itself(text):
    # What a fleet sends its workers is the checked form: it must pass the same check unchanged.
    from parinfo.profiles.loading import validate_profile

    doc = yaml.safe_load("version: 1\nname: again\nintra_op: 1\ninter_op: 1\n" + text)
    first = validate_profile(doc, "<profile>")
    once = first.document()
    again = validate_profile(once, "<profile>")
    assert again == first and again.document() == once
