"""What `parinfo tune` prints is true and whole: units, headers and titles when piped."""
from __future__ import annotations

import pytest
from conftest import clean_env, run_cli

FAST = ("--repeats", "1", "--min-time", "0", "--warmup", "0", "--no-noise-check", "--max", "2")
LONG = "x = [i * i for i in range(10)]  # " + "a long comment " * 8


@pytest.mark.timeout(60)
def test_piped_throughput_report_has_whole_headers_ms_labels_and_a_marked_cut_title():
    proc = run_cli("tune", *FAST, "--objective", "throughput", "--stmt", LONG, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "requests/s" in out and "requests…" not in out
    assert "median ms per request against" in out and "median s per" not in out
    assert "[i * i for i in range(10)]" in out  # the user's text is not read as markup
    first = out.splitlines()[0]
    assert "…" in first and "a long comment " * 8 not in out


def test_plot_title_is_cut_with_an_ellipsis():
    from parinfo.tuning.plot import shorten

    assert shorten("a" * 10, 10) == "a" * 10
    assert shorten("a" * 11, 10) == "a" * 9 + "…"
    assert shorten("one\ntwo", 20) == "one two"


def test_help_names_the_choices_of_objective_and_framework():
    from parinfo.tuning.options import OBJECTIVES
    from parinfo.tuning.workloads import FRAMEWORKS

    proc = run_cli("tune", "--help", env=clean_env(COLUMNS="160"))
    assert proc.returncode == 0, proc.stderr
    assert f"[{'|'.join(OBJECTIVES)}]" in proc.stdout and f"[{'|'.join(FRAMEWORKS)}]" in proc.stdout
    assert "<str>" not in proc.stdout.split("--framework")[1].split("\n")[0]
