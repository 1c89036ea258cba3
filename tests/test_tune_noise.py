"""Noise is detected and said: other busy processes, and points whose repeats disagree."""
from __future__ import annotations

import subprocess
import sys

import pytest

from parinfo.tuning.measure import noise_check


@pytest.mark.timeout(60)
def test_a_busy_process_is_named():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        notes = noise_check(2, interval=0.5, threshold=10.0, limit=1000)
    finally:
        spinner.kill()
        spinner.wait()
    assert any(f"(pid {spinner.pid})" in n and "% CPU" in n for n in notes), notes


@pytest.mark.timeout(120)
def test_wide_spread_and_near_ties_are_reported(tmp_path, monkeypatch):
    import parinfo

    # repeats alternate between 5 ms and 25 ms: the spread is far over 10 %, whatever the count
    (tmp_path / "jittery.py").write_text(
        "import itertools, time\n_c = itertools.cycle([0.005, 0.025])\n"
        "def f():\n    time.sleep(next(_c))\n")
    monkeypatch.chdir(tmp_path)
    r = parinfo.tune(module="jittery:f", max_threads=2, repeats=4, warmup=1, min_time=0,
                     check_noise=False)
    text = "\n".join(r.noise)
    assert "spread" in text and "noisy" in text
    assert "within the noise of the best" in text
    assert all(d["noisy"] for d in r.to_dict()["points"])
    assert "# Noise: " in r.to_profile_yaml()


def test_busy_note_follows_the_last_moment_not_the_load_average(monkeypatch):
    import psutil

    # a load average left high by work that has ended says nothing; CPU use in the window does
    monkeypatch.setattr(psutil, "getloadavg", lambda: (64.0, 64.0, 64.0))
    monkeypatch.setattr(psutil, "process_iter", lambda *a, **k: iter(()))
    monkeypatch.setattr(psutil, "cpu_count", lambda *a, **k: 4)
    monkeypatch.setattr(psutil, "cpu_percent", lambda *a, **k: 1.0)
    assert noise_check(4, interval=0.01) == []
    monkeypatch.setattr(psutil, "cpu_percent", lambda *a, **k: 90.0)
    notes = noise_check(4, interval=0.01)
    assert len(notes) == 1 and "3.6 CPUs were busy in the 0.01 s before the sweep" in notes[0]
