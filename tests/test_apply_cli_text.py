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
    # the env row's why names the file and line too ("set in the profile (PATH:5)"), maybe folded
    assert "".join(out.split()).count(escape_controls(stem) + ".yaml") == 2
    assert "".join(out.split()).count(escape_controls(stem) + ".yaml:5)") == 1
