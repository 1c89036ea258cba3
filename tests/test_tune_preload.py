"""`parinfo tune` runs each trial as `parinfo apply` launches a program: a torch command gets both its
counts from the start-up hook, which reads them back; and `--allocator` / `--openmp` measure preloaded
libraries at the best counts in real processes, writing the winner only when it wins beyond the noise."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import yaml
from conftest import clean_env, run_cli

from parinfo.errors import UsageError
from parinfo.process import preload as pre
from parinfo.tuning import choices
from parinfo.tuning.options import TuneOptions, resolve
from parinfo.tuning.search import Point, Stats

FAST = ("--repeats", "2", "--min-time", "0", "--warmup", "0", "--no-noise-check")

# A command that reads its own torch counts (after the hook set them) and logs them with its pid.
TORCH_CMD = textwrap.dedent("""
    import os, sys
    import torch
    inter, intra = torch.get_num_interop_threads(), torch.get_num_threads()
    print("inter-op", inter, "intra-op", intra)
    with open(sys.argv[1], "a") as fh:
        fh.write(f"{os.environ['PARINFO_NUM_INTEROP_THREADS']} {os.environ['PARINFO_NUM_THREADS']} {inter} {intra}\\n")
    if len(sys.argv) > 2:
        torch.set_num_threads(int(sys.argv[2]))  # the program changes its count: not in force at exit
""")

# A process that logs whether jemalloc is mapped in it, beside its LD_PRELOAD; sleeps less with it.
MAPS = textwrap.dedent("""
    import os, sys, time
    mapped = any("libjemalloc" in line for line in open("/proc/self/maps"))
    with open(os.environ["TRIAL_LOG"], "a") as fh:
        fh.write(f"{int(mapped)} {os.environ.get('LD_PRELOAD', '')}\\n")
    PAUSE = float(os.environ.get("TRIAL_PAUSE", "0")) if mapped else 0.1

    def work():
        time.sleep(PAUSE)

    if __name__ == "__main__":
        work()
""")


def jemalloc() -> str:
    found = pre.locate_allocator(pre.allocator("jemalloc")).path
    if found is None:
        pytest.skip("jemalloc is not installed here (apt-get install libjemalloc2)")
    return found


def cli_json(*args: str, env: dict[str, str] | None = None, timeout: float = 170) -> dict:
    proc = run_cli("tune", "--json", *args, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# -- counts of a command: set by the start-up hook, read back ------------------------------------------

@pytest.mark.torch
@pytest.mark.timeout(200)
def test_a_torch_command_runs_with_both_counts_and_each_trial_reads_them_back(tmp_path):
    (tmp_path / "counts.py").write_text(TORCH_CMD)
    log = tmp_path / "log.txt"
    out = cli_json("--max", "2", "--max-inter", "2", "--exhaustive", "--no-confirm", *FAST, "--",
                   sys.executable, str(tmp_path / "counts.py"), str(log))
    assert out["axis"] == "inter-op x intra-op threads"
    assert {(p["inter_op"], p["intra_op"]) for p in out["points"]} == {(1, 1), (1, 2), (2, 1), (2, 2)}
    for p in out["points"]:  # the hook's read-back at exit
        assert p["in_force"]["torch"] == {"intra_op": p["intra_op"], "inter_op": p["inter_op"]}
    runs = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
    assert len(runs) == 4 * 3  # one warm-up and two repeats per pair
    for asked_inter, asked_intra, inter, intra in runs:  # what torch itself said inside the command
        assert (inter, intra) == (asked_inter, asked_intra)
    assert out["notes"] == []


@pytest.mark.torch
@pytest.mark.timeout(120)
def test_a_command_that_changes_its_count_is_named_in_a_note(tmp_path):
    (tmp_path / "counts.py").write_text(TORCH_CMD)
    out = cli_json("--min", "2", "--max", "2", *FAST, "--", sys.executable, str(tmp_path / "counts.py"),
                   str(tmp_path / "log.txt"), "1")
    (point,) = out["points"]
    assert point["in_force"]["torch"]["intra_op"] == 1
    assert any("torch ran 1 threads, not 2" in n for n in out["notes"]), out["notes"]


@pytest.mark.timeout(120)
def test_a_command_that_is_not_python_is_said_to_be_unverified():
    out = cli_json("--max", "1", *FAST, "--", "true")
    (point,) = out["points"]
    assert point["in_force"]["verified"].startswith("unknown (the command did not run parinfo's start-up hook")
    assert point["in_force"]["env"]["PARINFO_NUM_THREADS"] == "1"
    assert [n for n in out["notes"] if "not verified" in n] == [
        "counts and preloads of the command not verified: " + point["in_force"]["verified"]]


# -- allocator choices in real processes -----------------------------------------------------------------

@pytest.mark.timeout(200)
def test_allocator_trials_of_a_command_preload_jemalloc_and_the_profile_says_what_won(tmp_path):
    lib = jemalloc()
    (tmp_path / "maps.py").write_text(MAPS)
    log, prof = tmp_path / "log.txt", tmp_path / "tuned.yaml"
    out = cli_json("--max", "1", *FAST, "--allocator", "default,jemalloc", "--write", str(prof), "--",
                   sys.executable, str(tmp_path / "maps.py"), env=clean_env(TRIAL_LOG=str(log)))
    lines = [line.split(" ", 1) for line in log.read_text().splitlines()]
    with_lib = [mapped for mapped, preload in lines if lib in preload.split(":")]
    without = [mapped for mapped, preload in lines if lib not in preload.split(":")]
    assert with_lib == ["1"] * choices.ROUNDS * 3  # every jemalloc trial process had it mapped
    assert set(without) == {"0"} and len(without) == 3 + choices.ROUNDS * 3  # the count search, default trials
    order = [lib in preload.split(":") for _, preload in lines[3:]]  # after the count search: A/B, B/A
    assert order == [False] * 3 + [True] * 6 + [False] * 3, order
    (cs,) = out["choices"]
    assert (cs["key"], [t["choice"] for t in cs["trials"]]) == ("allocator", ["default", "jemalloc"])
    trials = {t["choice"]: t for t in cs["trials"]}
    assert trials["jemalloc"]["in_force"]["preloaded"] == {lib: True}
    assert "preloaded" not in trials["default"]["in_force"]
    body = yaml.safe_load(prof.read_text())
    assert body.get("allocator") == (cs["kept"] if cs["written"] else None)
    assert ("beyond the noise" in cs["why"]) == cs["written"]
    assert "# Allocator at 1 (" in prof.read_text() and cs["why"] in prof.read_text()
    assert run_cli("apply", str(prof)).returncode == 0


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("pause", "written"), [("0.01", True), ("0.1", False)])
def test_worker_trials_write_the_allocator_only_when_it_wins_beyond_the_noise(tmp_path, pause, written):
    lib = jemalloc()
    (tmp_path / "fakealloc.py").write_text(MAPS)
    prof = tmp_path / "tuned.yaml"
    env = clean_env(PYTHONPATH=str(tmp_path), TRIAL_LOG=str(tmp_path / "log.txt"), TRIAL_PAUSE=pause)
    out = cli_json("--module", "fakealloc:work", "--max", "1", *FAST, "--allocator", "jemalloc",
                   "--write", str(prof), env=env)
    (cs,) = out["choices"]
    assert [t["choice"] for t in cs["trials"]] == ["default", "jemalloc"]  # default added: the baseline
    assert {t["choice"]: t["in_force"].get("preloaded") for t in cs["trials"]} == {"default": None,
                                                                                   "jemalloc": {lib: True}}
    assert cs["written"] is written and cs["kept"] == ("jemalloc" if written else "default")
    body = yaml.safe_load(prof.read_text())
    assert body.get("allocator") == ("jemalloc" if written else None)
    assert "openmp" not in body


# -- the choice rule, on fake trials -----------------------------------------------------------------------

def fake_trial(times: dict[str, float], mapped: bool = True, spread: float = 0.0):
    calls = []

    def trial(p: Point, picked: dict[str, str]) -> tuple[Stats, dict]:
        calls.append(dict(picked))
        t = times[picked["allocator"]]
        seen = {"preloaded": {"/x/lib.so": mapped}} if picked["allocator"] != "default" else {}
        return Stats((t * (1 - spread), t, t * (1 + spread))), seen

    trial.calls = calls
    return trial


@pytest.mark.parametrize(("times", "spread", "mapped", "kept", "words"), [
    ({"default": 0.010, "jemalloc": 0.008}, 0.0, True, "jemalloc", "beyond the noise"),
    ({"default": 0.010, "jemalloc": 0.0099}, 0.0, True, "default", "within the noise"),
    ({"default": 0.010, "jemalloc": 0.008}, 0.3, True, "default", "within the noise ("),
    ({"default": 0.010, "jemalloc": 0.012}, 0.0, True, "default", "default (nothing preloaded) was fastest"),
    ({"default": 0.010, "jemalloc": 0.005}, 0.0, False, "default", "did not have /x/lib.so mapped"),
])
def test_a_choice_is_kept_only_when_it_beats_the_default_beyond_the_noise(times, spread, mapped, kept, words):
    trial = fake_trial(times, mapped, spread)
    cs = choices.measure("allocator", ("default", "jemalloc"), Point(2, 1), {"openmp": "intel"}, trial)
    assert cs.kept == kept and words in cs.why
    order = [w for r in range(choices.ROUNDS) for w in (("default", "jemalloc"), ("jemalloc", "default"))[r % 2]]
    assert trial.calls == [{"openmp": "intel", "allocator": w} for w in order]  # A/B, B/A: no choice always first
    assert len(cs.stats["jemalloc"].samples) == 3 * choices.ROUNDS
    assert [sorted(r) for r in cs.rounds] == [["default", "jemalloc"]] * choices.ROUNDS


def test_a_slow_first_trial_of_each_round_does_not_make_a_choice_win():
    """The field case: the default measured 3.15 ms where the count sweep had 2.10 ms, and tcmalloc
    was written as "37% faster, beyond the noise". Here each round's first trial is that much slower,
    and both choices are the same speed: measured in alternate order, the rounds disagree, so the
    default stays; measured default-first every round, it would have lost in both."""
    calls = []

    def trial(p: Point, picked: dict[str, str]) -> tuple[Stats, dict]:
        first = len(calls) % 2 == 0
        calls.append(picked["allocator"])
        t = 0.00315 if first else 0.00210
        return Stats((t * 0.99, t, t * 1.01)), {"preloaded": {"/x/libtcmalloc.so": True}}

    cs = choices.measure("allocator", ("default", "tcmalloc"), Point(2, 1), {}, trial, rounds=2)
    assert cs.kept == "default" and not cs.written, cs.why
    assert calls == ["default", "tcmalloc", "tcmalloc", "default"]
    steady = fake_trial({"default": 0.00315, "tcmalloc": 0.00210})  # a real gain shows in every round
    won = choices.measure("allocator", ("default", "tcmalloc"), Point(2, 1), {}, steady, rounds=2)
    assert won.kept == "tcmalloc" and "in each of 2 rounds" in won.why, won.why


def test_a_choice_that_wins_pooled_but_not_in_every_round_is_not_written():
    """Pooled over four rounds, jemalloc is faster than default beyond the noise; against its own
    round's default in round 4 it is not: the rounds disagree, and the why gives each round."""
    figures = iter([0.010, 0.008, 0.008, 0.010, 0.010, 0.008, 0.008, 0.0081])  # A/B, B/A, A/B, B/A

    def trial(p: Point, picked: dict[str, str]) -> tuple[Stats, dict]:
        t = next(figures)
        return Stats((t, t, t)), {"preloaded": {"/x/lib.so": True}}

    cs = choices.measure("allocator", ("default", "jemalloc"), Point(1, 1), {}, trial, rounds=4)
    assert not cs.written and "not beyond the noise in round 4" in cs.why, cs.why
    assert "round 1: default 10 ms, jemalloc 8 ms" in cs.why, cs.why


# -- bad input: one line, exit 2 ---------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "words"), [
    (("--allocator", "jemaloc"), "--allocator 'jemaloc': not a choice; use jemalloc, tcmalloc, default"),
    (("--allocator", "auto"), "--allocator auto: name the choices to measure"),
    (("--allocator", "default"), "--allocator default: nothing to compare it with"),
    (("--allocator", "default,,jemalloc"), "give comma-separated choices"),
    (("--openmp", "iomp"), "--openmp 'iomp': not a choice; use"),
    (("--openmp", "intel", "--in-process"), "--openmp needs trials in fresh processes"),
    (("--allocator", "jemalloc", "--in-process"), "--allocator needs trials in fresh processes"),
])
def test_bad_choices_give_one_line_and_exit_2(args, words):
    proc = run_cli("tune", "--stmt", "x = 1", "--max", "1", *FAST, *args)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("parinfo: error: ") and words in line, line


ABSENT = ("import sys\nfrom parinfo.process import preload\npreload.SEARCH[:] = []\n"
          "from parinfo.cli import main\nsys.argv = ['parinfo', 'tune', *sys.argv[1:]]\nmain()\n")


@pytest.mark.parametrize(("args", "install"), [
    (("--allocator", "default,jemalloc"), "install it: apt-get install libjemalloc2"),
    (("--allocator", "tcmalloc"), "install it: apt-get install libtcmalloc-minimal4"),
    (("--openmp", "intel"), "install it: pip install intel-openmp"),
])
def test_a_choice_not_installed_names_what_to_install(args, install):
    proc = subprocess.run([sys.executable, "-c", ABSENT, "--stmt", "x = 1", "--max", "1", *FAST, *args],
                          env=clean_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    (line,) = proc.stderr.splitlines()
    assert "is not installed" in line and install in line, line


def test_the_api_takes_a_list_and_puts_default_first():
    class Facts:
        usable_cpus, logical_cpus = 2, 2

    jemalloc()
    plan = resolve(TuneOptions(stmt="x = 1", allocator=["jemalloc", "default"]), Facts())  # type: ignore[arg-type]
    assert plan.choices == (("allocator", ("default", "jemalloc")),)
    with pytest.raises(UsageError, match="--in-process"):
        resolve(TuneOptions(stmt="x = 1", allocator="jemalloc", in_process=True), Facts())  # type: ignore[arg-type]


# -- the start-up hook's report is hostile input ------------------------------------------------------------

def test_a_report_is_checked_and_bounded(tmp_path):
    from parinfo.launch.child import ChildEnv
    from parinfo.tuning.measure import hook_report

    child = ChildEnv(env={}, kept=(), overridden=(), torch_intra=None, torch_inter=1, cpus=None,
                     preloaded=("/x/libjemalloc.so.2",))
    assert hook_report(str(tmp_path / "missing"), 1, child) is None
    for i in range(100):
        (tmp_path / f"junk{i}.txt").write_text("x")
    assert hook_report(str(tmp_path), 1, child) is None
    (tmp_path / "7.json").write_text("not json {")
    (tmp_path / "8.json").write_text('{"torch": {"intra_op": 3, "inter_op": 2}, '
                                     '"preloaded": {"/x/libjemalloc.so.2": true}}')
    assert hook_report(str(tmp_path), 7, child) == {"torch": {"intra_op": 3, "inter_op": 2},
                                                    "preloaded": {"/x/libjemalloc.so.2": True}}
    (tmp_path / "9.json").write_text('{"torch": {"intra_op": "9; rm", "inter_op": true}, "parinfo": [1], '
                                     '"preloaded": {"/x/libjemalloc.so.2": "yes", "/etc/other": true}, "x": 1}')
    assert hook_report(str(tmp_path), 9, child) == {"torch": {"intra_op": None, "inter_op": None},
                                                    "preloaded": {"/x/libjemalloc.so.2": None}}


FORGED = ("import json, os\n"
          "path = os.path.join(os.environ['_PARINFO_HOOK_REPORT'], '%d.json' % os.getpid())\n"
          "open(path, 'w').write(json.dumps({'torch': {'intra_op': '\\x1b[31m', 'inter_op': -4}}))\n"
          "os._exit(0)\n")


@pytest.mark.timeout(120)
def test_a_forged_report_from_the_command_is_believed_only_within_bounds():
    out = cli_json("--max", "1", *FAST, "--", sys.executable, "-c", FORGED)
    (point,) = out["points"]
    assert point["in_force"]["torch"] == {"intra_op": None, "inter_op": None}
    assert out["notes"] == []
