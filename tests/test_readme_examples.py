"""The README's examples stay true: its set-up commands, its profile, its runtime snippet, the shape of
its output blocks (real output of the commands, abridged blocks marked), its findings table."""
from __future__ import annotations

import json
import os
import re

import pytest
import yaml
from conftest import HAVE_NUMPY, HAVE_TORCH, REPO, clean_env, run_cli, run_py

README = (REPO / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_readme_has_exactly_the_two_setup_commands():
    setup = README.split("## Set up", 1)[1].split("## ", 1)[0]
    commands = [b.strip() for b in re.findall(r"```console\n(.*?)```", setup, flags=re.S)]
    assert commands == ['pip install . && parinfo show', 'pip install -e ".[test]" && pytest']


def test_readme_profile_example_is_valid_on_this_machine():
    from parinfo.profiles.loading import resolve_profile

    (doc,) = [b for b in blocks("yaml") if b.startswith("version: 1")]
    plan = resolve_profile(yaml.safe_load(doc))
    assert plan.inter_op.value == 2 and plan.libraries["blas"].value == 1
    assert plan.env["OMP_WAIT_POLICY"] == "passive"
    # every key it shows takes effect: no note that one of them does not apply
    assert plan.affinity is not None and plan.affinity_why.startswith("compact")
    assert not [note for note in plan.notes if "does not apply" in note]


def test_readme_apply_block_has_the_rows_and_last_line_of_real_output():
    (cmd, out) = next((c, o) for _, c, o in console_blocks() if c == "parinfo apply throughput")
    real = run_cli(*cmd.split()[1:], env=clean_env())
    assert real.returncode == 0, real.stderr

    def rows(lines: list[str]) -> list[str]:
        return [line.split()[0] for line in lines[2:] if line.strip() and not line.startswith(("─", "nothing"))]

    assert rows(out) == rows(real.stdout.splitlines())
    assert out[-1].replace("`", "") == " ".join(real.stdout.splitlines()[-1].split()).replace("`", "")


def test_readme_runtime_snippet_runs(tmp_path):
    (code,) = [b for b in blocks("python") if "parallel_for" in b]
    code = code.replace('"parallel.json"', repr(str(tmp_path / "parallel.json")))
    run_py(code + "\nassert abs(out - __import__('numpy').sin(x)).max() == 0\n", timeout=120)
    trace = json.loads((tmp_path / "parallel.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    tasks = [e for e in events if e.get("cat") == "task" and e.get("ph") == "X"]
    assert len(tasks) >= 8
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the inter-op pool runs one lane")
    # the trace shows overlap: two tasks on different threads run at the same time
    assert any(a["tid"] != b["tid"] and a["ts"] < b["ts"] + b["dur"] and b["ts"] < a["ts"] + a["dur"]
               for a in tasks for b in tasks)


def console_blocks() -> list[tuple[str, str, list[str]]]:
    """(the text before the block, the command line, the output lines) of every console block."""
    out = []
    for m in re.finditer(r"```console\n\$ (.*?)\n(.*?)```", README, flags=re.S):
        before = README[max(0, m.start() - 300):m.start()]
        out.append((before, m.group(1), m.group(2).splitlines()))
    return out


def sections(lines: list[str]) -> list[str]:
    """The section titles of a ``parinfo show`` report (lines that start a section)."""
    return [ln for ln in lines[1:] if ln and not ln.startswith((" ", "[...]", "exit code"))]


def test_no_output_block_invents_an_error_prefix():
    for _, command, lines in console_blocks():
        for line in lines:
            assert not line.startswith(("Error: ", "error: ")), (command, line)
            if "error:" in line.split(" ", 2)[:2]:
                assert line.startswith("parinfo: error: "), (command, line)


@pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")
def test_show_blocks_have_the_sections_of_real_output():
    real = run_cli("show", env=clean_env())
    assert real.returncode == 0, real.stderr
    real_sections = sections(real.stdout.splitlines())
    shows = [(before, cmd, lines) for before, cmd, lines in console_blocks() if "parinfo show" in cmd
             and not cmd.startswith("parinfo fleet")]
    assert len(shows) == 2
    for _before, cmd, lines in shows:
        assert re.fullmatch(r"parinfo report for pid \d+ \(Python [\d.]+\) imported to probe: numpy", lines[0])
        shown = sections(lines)
        if "[...]" in lines:  # an abridged block says so on its command line, and cuts whole sections
            assert "(abridged" in cmd
            assert [t for t in real_sections if t in shown] == shown
        else:
            assert "(abridged" not in cmd and shown == real_sections


def test_profiles_block_shows_the_real_profiles_folder():
    real = run_cli("profiles", env=clean_env())
    (block,) = [lines for _, cmd, lines in console_blocks() if cmd == "parinfo profiles"]
    real_last, shown_last = real.stdout.splitlines()[-1], block[-1]
    assert real_last.split("Files: ")[0] == shown_last.split("Files: ")[0]
    shown_dir, real_dir = shown_last.split("Files: ")[1], real_last.split("Files: ")[1]
    assert os.path.isabs(shown_dir) and os.path.basename(shown_dir) == os.path.basename(real_dir) == "profiles"
    (apply_block,) = [lines for _, cmd, lines in console_blocks() if cmd == "parinfo apply throughput"]
    assert apply_block[0] == f"profile throughput  {shown_dir}/throughput.yaml"


def _finding_ids() -> dict[str, set[str]]:
    """Every finding id the rules can emit (a process's, live evidence, outer threads: a fleet's and
    ``parinfo host``'s), with the severities written beside it."""
    out: dict[str, set[str]] = {}
    for path in sorted((REPO / "parinfo" / "diagnostics").glob("*_rules.py")):
        text = path.read_text()
        for fid, sev in re.findall(r'Finding\(\s*"([a-z0-9-]+)",\s*(Severity\.(?:INFO|WARNING|ERROR)\b|\w+)', text):
            out.setdefault(fid, set()).add(sev[9:].lower() if sev.startswith("Severity.") else "info or warning")
    from parinfo.process.libraries import records

    for lib in records():  # a family judged by a rule of its own names its id in the registry
        if lib.own_rule:
            out.setdefault(lib.own_rule, set()).add("warning")
    return out


def test_findings_table_lists_every_finding_with_its_severities():
    table = README.split("### Findings", 1)[1].split("\n\n", 2)[1]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z0-9-]+)` \| ([^|]+) \|", table, flags=re.M)}
    ids = _finding_ids()
    assert set(rows) == set(ids)
    for fid, severities in ids.items():
        for sev in severities:
            for word in sev.split(" or "):
                assert word in rows[fid], (fid, word, rows[fid])


@pytest.mark.torch
@pytest.mark.skipif(not (HAVE_TORCH and HAVE_NUMPY), reason="torch and numpy are needed")
def test_torch_block_findings_are_todays():
    if len(os.sched_getaffinity(0)) != 2 or os.cpu_count() != 2:
        pytest.skip("the README's block was taken on 2 CPUs")
    (block,) = [lines for _, cmd, lines in console_blocks() if cmd.startswith("python -c 'import torch, parinfo;")]
    real = run_py('import torch, parinfo; print(parinfo.parallel_info(), end="")', env=clean_env(), timeout=120)
    found = re.compile(r"^\t\[(\w+)\] ([a-z0-9-]+):")
    shown = [found.match(ln).groups() for ln in block if found.match(ln)]
    assert shown and shown == [found.match(ln).groups() for ln in real.stdout.splitlines() if found.match(ln)]


def test_readme_magic_error_line_is_todays():
    from parinfo.cli.magics import show_args
    from parinfo.errors import UsageError

    lines = README.splitlines()
    shown = lines[next(i for i, line in enumerate(lines) if line.endswith("%parinfo --pid abc'")) + 1]
    with pytest.raises(UsageError) as err:
        show_args("--pid abc")
    assert shown == f"UsageError: %parinfo: {err.value}"
