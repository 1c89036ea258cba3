"""Hostile profiles given to `parinfo apply` and to the API: exit 2 with one line naming the file or key,
no traceback, in bounded time; nothing changed in-process by a profile that is refused."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import clean_env, run_cli
from test_profiles_cli import _one_line_error

TIMEOUT = 20


def _one_line(proc: subprocess.CompletedProcess) -> str:
    message = _one_line_error(proc)
    assert "\x1b" not in message and "\x07" not in message and "\u202e" not in message
    return message


def _apply(path: Path | str) -> str:
    return _one_line(run_cli("apply", str(path), timeout=TIMEOUT))


# (file content, words the one line must hold besides the file name)
YAML_CASES = {
    "bad_timestamp": ("version: 1\ndescription: 2024-13-45\n", "cannot read '2024-13-45' as !!timestamp"),
    "bad_timestamp_key": ("version: 1\n2024-13-45: x\n", ":2:1: cannot read '2024-13-45'"),
    "int_abc": ("version: 1\nintra_op: !!int abc\n", "'abc' is not a plain decimal integer"),
    "bool_maybe": ("version: 1\nname: !!bool maybe\n", "cannot read 'maybe' as !!bool"),
    "float_xyz": ("version: 1\nintra_op: !!float xyz\n", "cannot read 'xyz' as !!float"),
    "timestamp_nope": ("version: 1\ndescription: !!timestamp nope\n", "cannot read 'nope' as !!timestamp"),
    "int_empty": ("version: 1\nintra_op: !!int ''\n", "'' is not a plain decimal integer"),
    "int_plus": ("version: 1\nintra_op: !!int '+'\n", "'+' is not a plain decimal integer"),
    "int_5000_digits": ("version: 1\nintra_op: " + "9" * 5000 + "\n", "integer of 5000 digits"),
    "lone_surrogate": ('version: 1\nname: "\\ud800"\n', "U+D800 is a lone surrogate"),
    "nul_in_name": ('version: 1\nname: "a\\0b"\n', "'name' has the control character U+0000 (NUL)"),
    "nul_in_env": ('version: 1\nenv: {OMP_PLACES: "cores\\0x"}\n', "env OMP_PLACES: the value has U+0000 (NUL)"),
    "escape_in_name": ('version: 1\nname: "evil\\e[31mred"\n', "'name' has the control character U+001B (ESC)"),
    "title_in_description": ('version: 1\ndescription: "\\e]0;title\\a"\n', "U+001B (ESC) at character 1"),
    "clear_in_name": ('version: 1\nname: "x\\e[2J"\n', "U+001B (ESC) at character 2"),
    "cr_in_name": ('version: 1\nname: "ok\\rno"\n', "U+000D (CR) at character 3"),
    "bidi_in_description": ('version: 1\ndescription: "abc\\u202Edef"\n', "U+202E (RIGHT-TO-LEFT OVERRIDE)"),
    "base60": ("version: 1\nintra_op: 1:00\n", "'1:00' is not a plain decimal integer (YAML 1.1 reads it as a base-60"),
    "hex": ("version: 1\nintra_op: 0x10\n", "'0x10' is not a plain decimal integer (YAML 1.1 reads it in another"),
    "octal": ("version: 1\ninter_op: 010\n", "leading 0 as octal"),
    "arabic_digit_env": ('version: 1\nenv: {OMP_WAIT_POLICY: "\u0663"}\n', "U+0663 (ARABIC-INDIC DIGIT THREE)"),
    "arabic_digit_affinity": ('version: 1\naffinity: "\u0663"\n', "is not written in ASCII digits"),
    "underscore_affinity": ('version: 1\naffinity: "0_0"\n', "'0_0' is not written in ASCII digits"),
}


@pytest.mark.parametrize("case", sorted(YAML_CASES))
def test_hostile_yaml_gives_one_line(tmp_path, case):
    text, words = YAML_CASES[case]
    p = tmp_path / f"{case}.yaml"
    p.write_text(text, encoding="utf-8")
    line = _apply(p)
    assert line.startswith(f"{p}:"), line
    assert words in line, line


@pytest.mark.parametrize("target, words", [
    ("/proc/kmsg", "is under /proc, not a profile file"),
    ("/proc/self/status", "is under /proc"),
    ("/sys/kernel/notes", "is under /sys"),
    ("/dev/zero", "is under /dev"),
])
def test_pseudo_files_are_refused_as_profile_and_as_extends(tmp_path, target, words):
    assert words in _apply(target)
    child = tmp_path / "child.yaml"
    child.write_text(f"version: 1\nextends: {target}\n")
    line = _apply(child)
    assert line.startswith(f"{child}:2:10: extends: {target} {words}"), line


def test_fifo_symlink_loop_and_device_links_say_what_they_are(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    expected = {"fifo.yaml": "is a FIFO (named pipe), not a profile file", "loop.yaml": "is a symbolic link loop",
                "zero.yaml": "is under /dev, not a profile file", "dangling.yaml": "is a dangling symbolic link"}
    for name, words in expected.items():
        assert _apply(tmp_path / name) == f"{tmp_path / name}: {words} (give the path of a .yaml file)"
        child = tmp_path / f"child-{name}"
        child.write_text(f"version: 1\nextends: ./{name}\n")
        assert words in _apply(child)


def test_bare_extends_name_is_looked_up_next_to_the_profile(tmp_path):
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "base").write_text("version: 1\nintra_op: 3\n")
    (tmp_path / "prof" / "child.yaml").write_text("version: 1\nextends: base\n")
    (tmp_path / "base").write_text("version: 1\nintra_op: 5\n")  # in the cwd: must not be used
    proc = subprocess.run([sys.executable, "-m", "parinfo", "apply", "prof/child.yaml", "--json"], check=False,
                          cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert '"value": 3' in proc.stdout


def test_long_and_multi_line_names_are_shortened_and_escaped(tmp_path):
    p = tmp_path / "child.yaml"
    p.write_text('version: 1\nextends: "' + "x" * 900 + '\\nmore"\n')
    line = _apply(p)
    assert len(line) < 600 and "..." in line and "\\nmore" in line, line
    odd = tmp_path / "evil\nname\x1b[31m.yaml"
    odd.write_text("version: 2\n")
    line = _apply(odd)
    assert line.startswith(f"{tmp_path}/evil\\nname\\x1b[31m.yaml:1:10: unsupported profile version 2"), line


def test_resolve_profile_with_a_non_text_key_is_a_profile_error():
    from parinfo import resolve_profile
    from parinfo.errors import ProfileError

    with pytest.raises(ProfileError, match=r"key 1 in the profile is an integer, not text"):
        resolve_profile({1: 2})
    with pytest.raises(ProfileError, match=r"key 2 in libraries is an integer, not text"):
        resolve_profile({"version": 1, "libraries": {2: 1}})


@pytest.mark.parametrize("profile", [
    "{'version': 1, 'intra_op': 3, 'inter_op': 2, 'env': {'OMP_PLACES': 'cores\\0x'}}",
    "{'version': 1, 'intra_op': 3, 'name': 'a\\x1bb'}",
    "{'version': 1, 'intra_op': 3, 'affinity': '\u0663'}",
    "{1: 2}",
])
def test_in_process_apply_with_a_bad_profile_changes_nothing(profile):
    code = textwrap.dedent(f"""
        import os, parinfo
        from parinfo import runtime
        from parinfo.errors import ProfileError
        env, info, cpus = dict(os.environ), runtime.info(), os.sched_getaffinity(0)
        try:
            parinfo.apply({profile})
        except ProfileError as exc:
            print("refused:", str(exc).splitlines()[0][:60])
        else:
            raise SystemExit("accepted")
        assert dict(os.environ) == env, set(os.environ.items()) ^ set(env.items())
        assert runtime.info() == info
        assert os.sched_getaffinity(0) == cpus
        runtime.configure(inter_op=2, source="test")  # the inter-op count was not locked
        print("unchanged")
    """)
    proc = subprocess.run([sys.executable, "-c", code], check=False, env=clean_env(), capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "refused:" in proc.stdout and "unchanged" in proc.stdout


def test_a_hand_built_plan_that_cannot_be_applied_changes_nothing():
    code = textwrap.dedent("""
        import dataclasses, os, parinfo
        from parinfo import runtime
        from parinfo.errors import ProfileError
        plan = parinfo.resolve_profile({"version": 1, "intra_op": 3})
        bad = dataclasses.replace(plan, env={**plan.env, "OMP_PLACES": "a\\0b"})
        env, info = dict(os.environ), runtime.info()
        try:
            parinfo.apply(bad)
        except ProfileError as exc:
            print("refused")
        assert dict(os.environ) == env and runtime.info() == info
    """)
    proc = subprocess.run([sys.executable, "-c", code], check=False, env=clean_env(), capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0 and proc.stdout.strip() == "refused", proc.stderr + proc.stdout


@pytest.mark.timeout(30)
def test_a_profile_swapped_for_a_fifo_after_its_check_is_refused_without_blocking(tmp_path, monkeypatch):
    """Issue 36: the open itself goes through parinfo.safe_file, so a FIFO put in place between the
    check and the open is one line, not a hang."""
    from parinfo.errors import ProfileError
    from parinfo.profiles import yaml_nodes

    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    monkeypatch.setattr(yaml_nodes, "file_problem", lambda path: None)
    with pytest.raises(ProfileError, match="is a FIFO, not a regular file"):
        yaml_nodes.read_text(fifo)
