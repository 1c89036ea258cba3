"""`parinfo tune` end to end on a fake workload whose time depends on the counts it runs with.

The fake function sleeps for a time read off a known curve, keyed by the counts the worker put in
force (PARINFO_NUM_THREADS / PARINFO_NUM_INTEROP_THREADS in its environment, or the runtime's count
in-process), so the chosen point, the skipped points, the profile and the plot are all predictable
and do not depend on how busy the machine is.
"""
from __future__ import annotations

import json
import textwrap

import pytest
import yaml
from conftest import clean_env, run_cli

FAKE = textwrap.dedent('''
    import os
    import time

    def latency_curve(n):
        # a valley at 4 threads: 10 ms there, 10 ms more per step away from it
        return 0.010 * (1 + abs(n - 4))

    def work():
        time.sleep(latency_curve(int(os.environ["PARINFO_NUM_THREADS"])))

    def work_inprocess():
        import parinfo
        time.sleep(latency_curve(parinfo.get_num_threads()))

    PER_REQUEST = {(1, 4): 0.030, (2, 2): 0.010, (3, 1): 0.020, (4, 1): 0.025, (2, 1): 0.015}

    def requests():
        # seconds per request (known) times the concurrent requests sleeping side by side
        intra = int(os.environ["PARINFO_NUM_THREADS"])
        inter = int(os.environ["PARINFO_NUM_INTEROP_THREADS"])
        time.sleep(PER_REQUEST.get((inter, intra), 0.05) * inter)
''')


@pytest.fixture
def fake_env(tmp_path):
    (tmp_path / "fakecurve.py").write_text(FAKE)
    return clean_env(PYTHONPATH=str(tmp_path))


FAST = ("--repeats", "3", "--min-time", "0", "--no-noise-check")


@pytest.mark.timeout(180)
def test_latency_picks_the_valley_skips_ruled_out_points_and_writes_profile_and_plot(fake_env, tmp_path):
    prof, svg = tmp_path / "tuned.yaml", tmp_path / "curve.svg"
    proc = run_cli("tune", "--module", "fakecurve:work", "--max", "16", *FAST, "--json",
                   "--write", str(prof), "--plot", str(svg), env=fake_env, timeout=170)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["best"]["intra_op"] == 4
    assert out["counts"] == {"intra_op": 4, "inter_op": 1}
    measured = [p["intra_op"] for p in out["points"]]
    assert measured == [1, 2, 3, 4, 5, 6, 8, 16]
    skipped = {s["intra_op"]: s["reason"] for s in out["skipped"]}
    assert sorted(skipped) == [7, 9, 10, 11, 12, 13, 14, 15]
    assert "between 6" in skipped[7] and "and 8" in skipped[7]
    assert all(p["in_force"]["parinfo"]["intra_op"] == p["intra_op"] for p in out["points"]
               if isinstance(p["in_force"].get("parinfo"), dict))
    by_count = {p["intra_op"]: p["median_s"] for p in out["points"]}
    assert by_count[4] == pytest.approx(0.010, abs=0.005)
    assert by_count[16] == pytest.approx(0.130, rel=0.3)

    text = prof.read_text()
    body = yaml.safe_load(text)
    assert body["version"] == 1 and body["intra_op"] == 4 and body["name"] == "tuned-module"
    assert body["inter_op"] == 1  # one request at a time: the profile says so rather than leaving it out
    assert "# inter_op 1: requests come one at a time" in text
    assert "# Workload: module fakecurve:work" in text
    assert "# Machine: " in text and "usable CPUs" in text
    assert "<- chosen" in text and "# Skipped: 7,9-15" in text

    head = svg.read_text()[:400]
    assert "<svg" in head


@pytest.mark.timeout(180)
def test_written_profile_loads_and_resolves(fake_env, tmp_path):
    profiles = pytest.importorskip("parinfo.profiles.loading")
    prof = tmp_path / "tuned.yaml"
    proc = run_cli("tune", "--module", "fakecurve:work", "--min", "3", "--max", "6", *FAST,
                   "--write", str(prof), "--name", "my-tuned", env=fake_env, timeout=170)
    assert proc.returncode == 0, proc.stderr
    plan = profiles.resolve_profile(profiles.load_profile(str(prof)))
    assert plan.name == "my-tuned"
    assert plan.intra_op.value == 4
    assert "Best: 4 intra-op threads" in proc.stdout
    assert f"Wrote profile {prof}" in proc.stdout


@pytest.mark.timeout(180)
def test_throughput_sweeps_pairs_that_fit_and_picks_two_by_two(fake_env, tmp_path):
    prof = tmp_path / "tp.yaml"
    proc = run_cli("tune", "--module", "fakecurve:requests", "--objective", "throughput", "--max", "4",
                   *FAST, "--json", "--write", str(prof), env=fake_env, timeout=170)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["axis"] == "requests x intra-op threads"
    assert (out["best"]["inter_op"], out["best"]["intra_op"]) == (2, 2)
    assert out["counts"] == {"intra_op": 2, "inter_op": 2}
    labels = {p["label"] for p in out["points"]}
    assert {"1x4", "2x2", "4x1", "2x1"} <= labels
    assert all(p["inter_op"] * p["intra_op"] <= 4 for p in out["points"])
    skipped = {s["label"] for s in out["skipped"]}
    assert {"1x1", "1x2", "1x3"} <= skipped
    assert labels.isdisjoint(skipped)
    assert len(labels) + len(skipped) == out["candidates"]
    best = next(p for p in out["points"] if p["label"] == "2x2")
    assert best["per_second"] == pytest.approx(100, rel=0.3)
    body = yaml.safe_load(prof.read_text())
    assert (body["intra_op"], body["inter_op"]) == (2, 2)
    profiles = pytest.importorskip("parinfo.profiles.loading")
    plan = profiles.resolve_profile(profiles.load_profile(str(prof)))
    assert (plan.intra_op.value, plan.inter_op.value) == (2, 2)


@pytest.mark.timeout(180)
def test_in_process_sets_counts_through_the_runtime(fake_env):
    proc = run_cli("tune", "--module", "fakecurve:work_inprocess", "--in-process", "--max", "8", *FAST,
                   "--json", env=fake_env, timeout=170)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["mode"] == "in-process"
    assert out["best"]["intra_op"] == 4
    assert {s["intra_op"] for s in out["skipped"]} == {7}


@pytest.mark.timeout(180)
def test_human_output_has_table_skips_text_plot(fake_env):
    proc = run_cli("tune", "--module", "fakecurve:work", "--max", "8", *FAST, env=fake_env, timeout=170)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no progress bar when stderr is not a terminal
    out = proc.stdout
    assert "median ms (per call)" in out
    assert "Skipped 1 of 8 candidates:" in out and "7: ruled out: between 6" in out
    plot_lines = [ln for ln in out.splitlines() if " | #" in ln]
    assert [ln.split("|")[0].strip() for ln in plot_lines] == ["1", "2", "3", "4", "5", "6", "8"]
    best_line = next(ln for ln in plot_lines if ln.strip().startswith("4 |"))
    assert "<- best" in best_line
    assert best_line.count("#") < next(ln for ln in plot_lines if ln.strip().startswith("8 |")).count("#")
    assert "Best: 4 intra-op threads" in out


def test_api_png_plot_and_exhaustive(fake_env, tmp_path, monkeypatch):
    import parinfo

    monkeypatch.chdir(tmp_path)
    r = parinfo.tune(module="fakecurve:work", max_threads=5, repeats=2, min_time=0, check_noise=False,
                     exhaustive=True)
    assert [p.intra for p, _ in r.measured] == [1, 2, 3, 4, 5]
    assert r.best.intra == 4 and r.search.skipped == {}
    png = tmp_path / "c.png"
    r.plot(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<- best" in r.text_plot()
