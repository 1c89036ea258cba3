"""What `parinfo apply` prints about a profile's file: its path escaped wherever it appears."""
from __future__ import annotations

import pytest
from conftest import run_cli

HOSTILE = ["a\x1b[2Jb", "a\nb", "a\u202eb", "a\rb\x07"]


@pytest.mark.parametrize("stem", HOSTILE, ids=["csi", "newline", "bidi", "cr-bel"])
def test_the_plans_source_path_is_printed_escaped(tmp_path, stem):
    from parinfo.safe_text import escape_controls

    path = tmp_path / f"{stem}.yaml"
    path.write_text("version: 1\nname: plain\nintra_op: 1\nenv:\n  OMP_WAIT_POLICY: passive\n")
    proc = run_cli("apply", str(path))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert not any(c in out for c in "\x1b\r\x07\u202e")
    shown = escape_controls(str(path))
    assert shown != str(path)
    first = out.splitlines()[0]
    assert first.startswith("profile plain") and shown in first  # the header names the file, escaped
    # the env row's why names the file and line too ("set in the profile (PATH:5)"), maybe folded, and
    # the last line names it twice, in how to apply the plan (a command line and a Python call)
    assert "".join(out.split()).count(escape_controls(stem) + ".yaml") == 4
    assert "".join(out.split()).count(escape_controls(stem) + ".yaml:5)") == 1


def test_the_plan_says_nothing_was_applied_and_how_to_apply_it(tmp_path):
    path = tmp_path / "my prof.yaml"
    path.write_text("version: 1\nname: plain\nintra_op: 1\n")
    out = run_cli("apply", str(path))
    assert out.returncode == 0, out.stderr
    last = " ".join(out.stdout.split("\n")[-3:]).split()
    text = " ".join(last)
    assert "nothing applied" in text and f"parinfo apply '{path}' -- COMMAND" in " ".join(out.stdout.split())
    shown = run_cli("apply", "multi-instance", "--instances", "2")
    assert shown.returncode == 0, shown.stderr
    (row,) = [line for line in shown.stdout.splitlines() if line.startswith("affinity")]
    assert row.split()[1:3] == ["per", "instance"], row  # the value agrees with the reason: pinned per instance
    joined = " ".join(shown.stdout.split())
    # the way to run it names the same layout, and no in-process apply(): a process is one instance
    assert "`parinfo apply multi-instance --instances 2 -- COMMAND`" in joined
    assert "parinfo.apply(" not in joined
    one = run_cli("apply", "multi-instance", "--instances", "1")
    (row,) = [line for line in one.stdout.splitlines() if line.startswith("affinity")]
    assert row.split()[1:3] == ["per", "instance"], row  # one instance is pinned too: not "inherited"
    assert "parinfo.apply(\"multi-instance\")" in " ".join(one.stdout.split())
