"""Hostile values for `parinfo tune`: one line and exit 2 before anything runs; exit codes as a shell gives."""
from __future__ import annotations

import pytest

from conftest import clean_env, run_cli

FAST = ("--repeats", "1", "--min-time", "0", "--warmup", "0", "--no-noise-check", "--max", "1")


def one_line_exit_2(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, needles", [
    (("--timeout", "nan"), ("--timeout must be a finite number", "nan")),
    (("--timeout", "inf"), ("--timeout must be a finite number", "inf")),
    (("--timeout", "-inf"), ("--timeout",)),
    (("--min-time", "nan"), ("--min-time must be a finite number", "nan")),
    (("--min-time", "inf"), ("--min-time must be a finite number", "inf")),
    (("--size", "200000"), ("--size 200000", "GiB", "use a smaller --size")),
    (("--size", "200000", "--in-process"), ("--size 200000",)),
])
def test_bad_numbers_one_line_exit_2(args, needles):
    one_line_exit_2(run_cli("tune", *FAST, "--stmt", "pass", *args, env=clean_env())
                    if "--size" not in args else run_cli("tune", *FAST, *args, env=clean_env()), *needles)
