"""A fractional CPU quota: parinfo's rounding (a choice: floor, ceil, nearest) and every runtime's
(Go, the JDK, .NET, loky, Rust, GNU nproc), on fake cgroup trees and under real v1 cgroups, where the
runtimes that are installed (loky, nproc, java, rustc) answer for themselves."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import real_cgroup
from conftest import clean_env, run_cli
from fake_trees import FakeMachine

from parinfo.diagnostics.model import Report
from parinfo.diagnostics.process_rules import diagnose
from parinfo.errors import ProfileError, UsageError
from parinfo.machine.rounding import RUNTIMES, round_quota
from parinfo.machine.topology import MachineFacts, machine_facts
from parinfo.profiles.loading import resolve_profile
from parinfo.records.convert import dump, load
from parinfo.records.source import SourceKind, profile, variable

ROUNDING_ROWS = ("go", "jdk", "dotnet", "loky", "rust", "nproc")  # the new rows: tests/test_runtime_readings.py


def _rounding(f: MachineFacts) -> dict[str, int]:
    return {k: f.usable_by_rule[k] for k in ROUNDING_ROWS}


def _v2(tmp_path, cpus: int, cpu_max: dict[str, str], path: str = "/job") -> str:
    return FakeMachine(tmp_path).cpus(cpus).cgroup_v2(path, cpu_max=cpu_max).build()


# -- the rules, on fake trees -------------------------------------------------------------------

def test_one_and_a_half_cpus_on_a_v2_host(tmp_path):
    f = machine_facts(_v2(tmp_path, 4, {"/job": "150000 100000"}), environ={})
    assert f.quota == 1.5 and f.usable_cpus == 1
    assert f.quota_rounding == "floor" and f.quota_rounding_source.kind is SourceKind.PARINFO_DEFAULT
    assert "floor(cgroup quota)" in f.usable_rule
    # loky reads /sys/fs/cgroup/cpu.max only: the job's cgroup is below it, so loky sees no limit.
    assert _rounding(f) == {"go": 2, "jdk": 2, "dotnet": 2, "loky": 4, "rust": 1, "nproc": 2}


def test_one_and_a_half_cpus_in_a_container(tmp_path):
    # The container's own cgroup is mounted at /sys/fs/cgroup: loky's fixed path finds the quota.
    root = FakeMachine(tmp_path).cpus(4).cgroup_v2("/pod", cpu_max={"/pod": "150000 100000"},
                                                   mount_root="/pod").build()
    f = machine_facts(root, environ={})
    assert f.quota == 1.5
    assert _rounding(f) == {"go": 2, "jdk": 2, "dotnet": 2, "loky": 2, "rust": 1, "nproc": 2}


def test_go_reads_its_own_cgroup_only_rust_and_nproc_the_ancestors(tmp_path):
    root = _v2(tmp_path, 8, {"/a": "250000 100000", "/a/b": "max 100000"}, path="/a/b")
    f = machine_facts(root, environ={})
    assert f.quota == 2.5 and f.usable_cpus == 2
    assert f.usable_by_rule["go"] == 8  # no limit on the leaf
    assert (f.usable_by_rule["jdk"], f.usable_by_rule["rust"], f.usable_by_rule["nproc"]) == (3, 2, 3)


def test_v1_quota_is_ignored_by_nproc(tmp_path):
    root = FakeMachine(tmp_path).cpus(4).cgroup_v1("/job", quota={"/job": (150000, 100000)}).build()
    f = machine_facts(root, environ={})
    assert f.quota == 1.5 and f.usable_cpus == 1
    assert _rounding(f) == {"go": 2, "jdk": 2, "dotnet": 2, "loky": 4, "rust": 1, "nproc": 4}


def test_half_a_cpu(tmp_path):
    f = machine_facts(_v2(tmp_path, 4, {"/job": "50000 100000"}), environ={})
    assert f.usable_cpus == 1
    assert _rounding(f) == {"go": 2, "jdk": 1, "dotnet": 1, "loky": 4, "rust": 1, "nproc": 1}


def test_go_never_goes_above_the_cpus(tmp_path):
    root = FakeMachine(tmp_path).cpus(4).cgroup_v2("/job", cpu_max={"/job": "50000 100000"}).affinity([0]).build()
    assert machine_facts(root, environ={}).usable_by_rule["go"] == 1


def test_no_quota_every_rule_gives_the_cpus(tmp_path):
    root = FakeMachine(tmp_path).cpus(4).cgroup_v2("/job").affinity([1, 2, 3]).build()
    f = machine_facts(root, environ={})
    assert set(_rounding(f).values()) == {3} and f.usable_cpus == 3
    assert (f.usable_by_rule["onnxruntime"], f.usable_by_rule["duckdb"]) == (4, 4)  # they ignore affinity


@pytest.mark.parametrize(("quota", "floor", "ceil", "nearest"),
                         [(1.5, 1, 2, 2), (1.4, 1, 2, 1), (0.3, 1, 1, 1), (2.0, 2, 2, 2), (2.51, 2, 3, 3)])
def test_round_quota(quota, floor, ceil, nearest):
    assert [round_quota(quota, r) for r in ("floor", "ceil", "nearest")] == [floor, ceil, nearest]


# -- the choice ---------------------------------------------------------------------------------

def test_rounding_from_the_variable(tmp_path):
    root = _v2(tmp_path, 4, {"/job": "150000 100000"})
    f = machine_facts(root, environ={"PARINFO_QUOTA_ROUNDING": "ceil"})
    assert f.usable_cpus == 2 and f.quota_rounding == "ceil"
    assert f.quota_rounding_source == variable("PARINFO_QUOTA_ROUNDING", "ceil")
    assert "ceil(cgroup quota)" in f.usable_rule and f.invalid == {}
    assert machine_facts(root, environ={"PARINFO_QUOTA_ROUNDING": " Nearest "}).usable_cpus == 2


@pytest.mark.parametrize("bad", ["bogus", "", "2", "floor,ceil", "\x1b[31m"])
def test_bad_rounding_variable_is_invalid_and_floor_stays(tmp_path, bad):
    f = machine_facts(_v2(tmp_path, 4, {"/job": "150000 100000"}), environ={"PARINFO_QUOTA_ROUNDING": bad})
    assert f.usable_cpus == 1 and f.quota_rounding == "floor" and f.quota_rounding_source.text == "default"
    assert "is not one of floor, ceil, nearest" in f.invalid["PARINFO_QUOTA_ROUNDING"]


def test_argument_wins_over_the_variable(tmp_path):
    root = _v2(tmp_path, 4, {"/job": "150000 100000"})
    f = machine_facts(root, environ={"PARINFO_QUOTA_ROUNDING": "floor"}, quota_rounding="ceil",
                      rounding_source=profile("p", "quota_rounding"))
    assert (f.usable_cpus, f.quota_rounding_source.kind, f.quota_rounding_source.text) == (
        2, SourceKind.PROFILE, "profile p (quota_rounding)")
    with pytest.raises(UsageError, match="floor, ceil, nearest"):
        machine_facts(root, environ={}, quota_rounding="up")


def test_rounded_and_the_round_trip(tmp_path):
    f = machine_facts(FakeMachine(tmp_path).cpus(4, smt=2).cgroup_v2("/j", cpu_max={"/j": "250000 100000"}).build(),
                      environ={})
    assert (f.usable_cpus, f.usable_physical_cores) == (2, 2)
    g = f.rounded("ceil", profile("x"))
    assert (g.usable_cpus, g.usable_physical_cores, str(g.quota_rounding_source)) == (3, 2, "profile x")
    back = load(MachineFacts, json.loads(json.dumps(dump(g))), strict=True)
    assert back == g
    d = dump(g)
    del d["usable_cpus"]
    assert load(MachineFacts, d, strict=True).usable_cpus == 3  # worked out again with the report's rounding


def test_profile_quota_rounding(tmp_path):
    f = machine_facts(_v2(tmp_path, 4, {"/job": "150000 100000"}), environ={})
    base = {"version": 1, "name": "p", "intra_op": "usable_cpus"}
    assert resolve_profile(base, f).intra_op.value == 1
    plan = resolve_profile({**base, "quota_rounding": "ceil"}, f)
    assert plan.intra_op.value == 2
    assert plan.env["PARINFO_QUOTA_ROUNDING"] == "ceil"  # a launched program counts the same way
    assert "PARINFO_QUOTA_ROUNDING" not in resolve_profile(base, f).env


def test_profile_quota_rounding_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nquota_rounding: upward\n")
    with pytest.raises(ProfileError) as err:
        resolve_profile(str(bad))
    assert "bad.yaml:2:" in str(err.value) and "floor, ceil, nearest" in str(err.value)
    with pytest.raises(ProfileError, match="did you mean 'ceil'"):
        resolve_profile({"version": 1, "quota_rounding": "Ceil"})
    with pytest.raises(ProfileError, match=r"must be one of floor, ceil, nearest, not a decimal number"):
        resolve_profile({"version": 1, "quota_rounding": 1.5})


# -- the finding --------------------------------------------------------------------------------

def _report(facts: MachineFacts, settings: list[dict]) -> Report:
    return Report.from_dict({"machine": dump(facts), "settings": settings})


def _row(library: str, count: int, source: str) -> dict:
    return {"library": library, "count": count, "source": source}


def test_fractional_quota_finding_names_every_rule_and_the_counts(tmp_path):
    f = machine_facts(_v2(tmp_path, 4, {"/job": "150000 100000"}), environ={})
    found = [x for x in diagnose(_report(f, [_row("parinfo intra-op", 1, "default: usable physical cores"),
                                             _row("openblas", 4, "default: 4 CPUs in affinity")]))
             if x.id == "fractional-quota"]
    assert len(found) == 1 and found[0].severity == "info"
    msg = found[0].message
    assert "1.5 CPUs: parinfo counts 1 usable CPU (floor, default)" in msg
    assert "Go 2, the JDK 2, .NET 2, loky 4, Rust 1, GNU nproc 2" in msg
    assert "1 for parinfo intra-op; 4 for openblas" in msg
    assert "floor never throttles" in found[0].why and "ceil uses it" in found[0].why
    assert "PARINFO_QUOTA_ROUNDING=ceil" in found[0].fix


def test_fractional_quota_finding_under_ceil_offers_floor(tmp_path):
    f = machine_facts(_v2(tmp_path, 4, {"/job": "150000 100000"}), environ={"PARINFO_QUOTA_ROUNDING": "ceil"})
    (found,) = [x for x in diagnose(_report(f, [])) if x.id == "fractional-quota"]
    assert "(ceil, env PARINFO_QUOTA_ROUNDING=ceil)" in found.message and "PARINFO_QUOTA_ROUNDING=floor" in found.fix


def test_fractional_quota_below_one_cpu_counts_no_negative_cpu_and_one_thread(tmp_path):
    f = machine_facts(_v2(tmp_path, 2, {"/job": "50000 100000"}), environ={})
    (found,) = [x for x in diagnose(_report(f, [])) if x.id == "fractional-quota"]
    assert "-0.5" not in found.why and "1 busy threads" not in found.why
    assert "every rounding gives 1 thread" in found.why and "1 busy thread spends the 0.5-CPU quota" in found.why
    assert "at least 1 CPU" in found.fix and "=ceil" not in found.fix


def test_fractional_quota_plurals_above_one_cpu(tmp_path):
    f = machine_facts(_v2(tmp_path, 4, {"/job": "150000 100000"}), environ={})
    (found,) = [x for x in diagnose(_report(f, [])) if x.id == "fractional-quota"]
    assert "1 busy thread uses 1 of the 1.5 CPUs each period and leaves 0.5 CPU unused" in found.why
    assert "2 busy threads spend the quota" in found.why


@pytest.mark.parametrize(("cpu_max", "affinity"), [("200000 100000", None), ("250000 100000", [0, 1])])
def test_no_fractional_finding_when_rounding_cannot_matter(tmp_path, cpu_max, affinity):
    m = FakeMachine(tmp_path).cpus(4).cgroup_v2("/job", cpu_max={"/job": cpu_max})
    if affinity:
        m = m.affinity(affinity)
    f = machine_facts(m.build(), environ={})
    assert not [x for x in diagnose(_report(f, [])) if x.id == "fractional-quota"]


def test_invalid_rounding_variable_finding(tmp_path):
    f = machine_facts(_v2(tmp_path, 4, {"/job": "150000 100000"}), environ={"PARINFO_QUOTA_ROUNDING": "up"})
    (found,) = [x for x in diagnose(_report(f, [])) if x.id == "invalid-variable"]
    assert found.message == ("PARINFO_QUOTA_ROUNDING is invalid: 'up' is not one of floor, ceil, nearest; "
                             "used floor")
    assert found.fix == "unset PARINFO_QUOTA_ROUNDING or set it to one of floor, ceil, nearest"


# -- real processes -----------------------------------------------------------------------------

def test_show_json_prints_usable_by_rule():
    out = run_cli("show", "--json")
    assert out.returncode == 0, out.stderr
    m = json.loads(out.stdout)["machine"]
    assert list(m["usable_by_rule"]) == list(RUNTIMES)
    assert all(isinstance(v, int) and v >= 1 for v in m["usable_by_rule"].values())
    assert m["quota_rounding"] == "floor" and m["invalid"] == {}


def test_show_with_a_bad_rounding_variable_is_one_line_not_a_traceback():
    out = run_cli("show", env=clean_env(PARINFO_QUOTA_ROUNDING="upwards"))
    assert out.returncode == 0 and "Traceback" not in out.stderr
    assert "invalid: PARINFO_QUOTA_ROUNDING: 'upwards' is not one of floor, ceil, nearest; used floor" in out.stdout
    assert "invalid-variable: PARINFO_QUOTA_ROUNDING is invalid" in out.stdout


@pytest.fixture(params=[1.5, 0.5], ids=["1.5", "0.5"])
def v1_quota(request):
    """A real v1 cgroup with a CPU quota; skipped where one cannot be made."""
    with real_cgroup.quota_cgroup(request.param) as made:
        if isinstance(made, str) or made[1] != "v1":
            pytest.skip(f"cannot make a v1 cgroup: {made if isinstance(made, str) else 'the hierarchy is v2'}")
        yield made[0], request.param


def _in(cg: Path, cmd: list[str], **kw) -> subprocess.CompletedProcess:
    def enter() -> None:
        (cg / "cgroup.procs").write_text(str(os.getpid()))

    return subprocess.run(cmd, env=kw.pop("env", clean_env()), capture_output=True, text=True,
                          timeout=kw.pop("timeout", 120), preexec_fn=enter, **kw)


@pytest.mark.timeout(300)
def test_every_installed_runtime_agrees_with_its_rule(v1_quota, tmp_path):
    cg, cpus = v1_quota
    out = _in(cg, [sys.executable, "-m", "parinfo", "show", "--json"])
    assert out.returncode == 0, out.stderr
    m = json.loads(out.stdout)["machine"]
    assert m["quota"] == cpus and m["usable_cpus"] == 1
    rules = m["usable_by_rule"]
    checked = []

    loky = _in(cg, [sys.executable, "-c", "from joblib.externals.loky import cpu_count; print(cpu_count())"])
    if loky.returncode == 0:
        assert int(loky.stdout) == rules["loky"]
        checked.append("loky")
    nproc = shutil.which("nproc")
    if nproc:
        env = {k: v for k, v in clean_env().items() if not k.startswith("OMP_")}
        assert int(_in(cg, [nproc], env=env).stdout) == rules["nproc"]
        checked.append("nproc")
    java = shutil.which("java")
    if java:
        src = tmp_path / "Cpus.java"
        src.write_text("public class Cpus { public static void main(String[] a) { "
                       "System.out.println(Runtime.getRuntime().availableProcessors()); } }\n")
        got = _in(cg, [java, str(src)])
        if got.returncode == 0:
            assert int(got.stdout) == rules["jdk"]
            checked.append("jdk")
    rustc = shutil.which("rustc")
    if rustc:
        (tmp_path / "cpus.rs").write_text(
            'fn main() { println!("{}", std::thread::available_parallelism().unwrap()); }\n')
        built = subprocess.run([rustc, "-O", "-o", str(tmp_path / "cpus"), str(tmp_path / "cpus.rs")],
                               capture_output=True, text=True, timeout=120)
        if built.returncode == 0:
            assert int(_in(cg, [str(tmp_path / "cpus")]).stdout) == rules["rust"]
            checked.append("rust")
    print("checked against", checked)
    if not checked:
        pytest.skip("no runtime installed to check against (loky, nproc, java, rustc)")
    if cpus == 1.5:
        assert rules["rust"] == 1 and rules["jdk"] == min(2, len(os.sched_getaffinity(0)))


@pytest.mark.timeout(120)
def test_show_under_a_real_fractional_quota(v1_quota):
    cg, cpus = v1_quota
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    out = _in(cg, [sys.executable, "-m", "parinfo", "show", "--json"])
    why = {f["id"]: f["why"] for f in json.loads(out.stdout)["findings"]}.get("fractional-quota", "")
    out = _in(cg, [sys.executable, "-m", "parinfo", "show"])
    assert out.returncode == 0, out.stderr
    assert "-0.5" not in why and "1 busy threads" not in why
    if cpus == 0.5:
        assert "fractional-quota: the cgroup CPU quota is 0.5 CPUs" in out.stdout
        assert "1 busy thread spends the 0.5-CPU quota in 50% of each period" in why
        return
    assert "quota rounding     floor (default)" in out.stdout
    assert "by runtime         go 2, jdk 2, dotnet 2, loky 2, rust 1, nproc 2" in out.stdout
    assert "fractional-quota: the cgroup CPU quota is 1.5 CPUs: parinfo counts 1 usable CPU" in out.stdout
    ceil = _in(cg, [sys.executable, "-m", "parinfo", "show", "--json"],
               env=clean_env(PARINFO_QUOTA_ROUNDING="ceil"))
    m = json.loads(ceil.stdout)["machine"]
    assert m["usable_cpus"] == 2 and m["quota_rounding_source"]["text"] == "env PARINFO_QUOTA_ROUNDING=ceil"


def test_the_rounding_table_gives_each_librarys_own_count_under_the_quota():
    import dataclasses

    from profile_machines import machine

    from parinfo.diagnostics.sections import library_defaults

    m = machine(4, quota=1.5)
    said = dict(item.split(" ") for item in library_defaults(m).split(", "))
    # rayon (Polars, tokenizers) rounds down, DuckDB up; ONNX Runtime, Arrow, numba ignore the quota
    assert (said["polars"], said["tokenizers"], said["duckdb"]) == ("1", "1", "2")
    assert (said["onnxruntime"], said["pyarrow"], said["numba"]) == ("4", "4", "4")
    assert "xgboost" not in said and "lightgbm" not in said  # their count is their OpenMP runtime's
    # OpenCV reads a quota only at the cgroup mount's root
    from parinfo.records.source import file

    root = dataclasses.replace(m, quota_source=file("/sys/fs/cgroup/cpu.max"))
    assert dict(i.split(" ") for i in library_defaults(root).split(", "))["opencv"] == "1"
    assert said["opencv"] == "4"
