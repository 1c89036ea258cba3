"""`--instances N`: every instance gets the counts its profile means on that instance's own CPUs.

Ground truth is what the instance itself sees: its affinity (sched_getaffinity inside the child),
the profile resolved again inside the instance on its own machine facts, and `parinfo show --check`
run as the instance.
"""
from __future__ import annotations

import os
import sys

import pytest
from conftest import clean_env, run_cli
from profile_machines import MACHINES, machine
from test_launch_instances import by_instance

from parinfo.profiles.loading import resolve_profile, shipped_names

CPUS = sorted(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(len(CPUS) < 2, reason="needs two usable CPUs")

# Inside one instance: what it runs with, and what the profile means where it runs.
INSIDE = ("import json, os; from parinfo.profiles.loading import resolve_profile; "
          "p = resolve_profile(os.environ['PARINFO_PROFILE']); "
          "print(json.dumps({'cpus': sorted(os.sched_getaffinity(0)), "
          "'intra': int(os.environ['PARINFO_NUM_THREADS']), "
          "'inter': int(os.environ['PARINFO_NUM_INTEROP_THREADS']), "
          "'omp': int(os.environ['OMP_NUM_THREADS']), "
          "'want_intra': p.intra_op.value, 'want_inter': p.inter_op.value, "
          "'want_omp': int(p.env['OMP_NUM_THREADS'])}))")


@needs_two
@pytest.mark.parametrize("name", shipped_names())
def test_each_instance_runs_what_the_profile_means_on_its_own_cpus(name):
    proc = run_cli("apply", name, "--instances", "2", "--", sys.executable, "-c", INSIDE, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = by_instance(proc.stdout)
    assert set(rows) == {"[0]", "[1]"}
    for row in rows.values():
        assert len(row["cpus"]) == 1
        assert (row["intra"], row["inter"], row["omp"]) == (row["want_intra"], row["want_inter"], row["want_omp"])
        assert row["intra"] <= len(row["cpus"]) and row["inter"] <= len(row["cpus"])


@needs_two
@pytest.mark.parametrize("name", shipped_names())
def test_show_check_passes_in_every_instance(name):
    proc = run_cli("apply", name, "--instances", "2", "--", sys.executable, "-m", "parinfo", "show", "--check",
                   timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    findings = [line for line in proc.stdout.splitlines()
                if line[4:].lstrip().startswith(("warning ", "error "))]
    assert findings == []
    assert any(line.startswith("[0] ") for line in proc.stdout.splitlines())
    assert any(line.startswith("[1] ") for line in proc.stdout.splitlines())


@pytest.mark.parametrize("name", ["latency", "balanced", "throughput", "container"])
@pytest.mark.parametrize("shape", ["16cores_smt", "2numa_x28", "affinity_subset"])
def test_instance_counts_equal_the_profile_resolved_on_the_instance_alone(name, shape):
    facts = MACHINES[shape]
    plan = resolve_profile(name, facts, instances=2)
    for inst in plan.instances:
        # The instance's own machine: only its cores exist and all of them are usable.
        alone = machine(len(inst.cpus))
        want = resolve_profile(name, alone)
        assert (inst.intra_op, inst.inter_op) == (want.intra_op.value, want.inter_op.value)
        assert inst.env["OMP_NUM_THREADS"] == want.env["OMP_NUM_THREADS"]
        assert inst.intra_op <= len(inst.cpus) and inst.inter_op <= len(inst.cpus)


def test_latency_on_two_cpus_gives_each_instance_one_thread():
    plan = resolve_profile("latency", MACHINES["2cpus"], instances=2)
    assert [(i.cpus, i.intra_op, i.inter_op, i.env["OMP_NUM_THREADS"]) for i in plan.instances] == \
        [((0,), 1, 1, "1"), ((1,), 1, 1, "1")]
    plan = resolve_profile("balanced", MACHINES["2cpus"], instances=2)
    assert {(i.intra_op, i.inter_op) for i in plan.instances} == {(1, 1)}


def test_a_count_too_big_for_an_instance_is_noted(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nintra_op: logical_cpus * 2\ninter_op: 1\n")
    plan = resolve_profile(str(path), MACHINES["2cpus"], instances=2)
    assert {i.intra_op for i in plan.instances} == {2}
    assert "intra_op 2 is more than the 1 CPU of instances 0, 1: threads will share CPUs" in plan.notes


def test_too_many_instances_names_the_number_that_fits():
    from parinfo.machine.topology import machine_facts

    cores = machine_facts().usable_physical_cores
    n = cores + 1
    proc = run_cli("apply", "latency", "--instances", str(n), "--", "true", env=clean_env())
    assert proc.returncode == 2
    want = (f"parinfo: error: --instances: {n} instances need at least {n} usable physical cores; "
            f"{cores} {'is' if cores == 1 else 'are'} usable here (use --instances {cores} or fewer)")
    assert proc.stderr.strip().splitlines() == [want]
