"""Counts of one read as English everywhere a person reads them ("1 thread", "1 usable CPU", never
"1 threads"), and no "None" reaches a person: findings, report sections, plans and watch lines
rendered with counts of 1."""
from __future__ import annotations

import re
import textwrap

from profile_machines import machine

from parinfo.cli.watch import render_sample
from parinfo.diagnostics import process_rules
from parinfo.diagnostics.model import Report
from parinfo.diagnostics.sections import environment
from parinfo.profiles.loading import resolve_profile
from parinfo.safe_text import plural
from parinfo.watching.model import Sample

# a count of one followed (maybe after a word or two) by a plural noun
ONE_PLURAL = re.compile(r"(?<![\d.])1 (?:[a-z-]+ ){0,2}(?:threads|CPUs|cores|instances|processes|workers|pools|"
                        r"nodes)\b|\((?:s|es)\)")


def bad_words(text: str) -> list[str]:
    return [m.group(0) for m in ONE_PLURAL.finditer(text)] + (["None"] if re.search(r"\bNone\b", text) else [])


def one_cpu_report(**extra) -> Report:
    m = {"usable_cpus": 1, "usable_physical_cores": 1, "smt": False, "quota": None, "affinity": [0],
         "logical_cpus": 1}
    return Report.from_dict({
        "machine": m,
        "runtime": {"backend": "native", "intra_op": {"count": 1, "source": "default"},
                    "inter_op": {"count": 1, "source": "explicit call"}},
        "pools": [], "frameworks": {"torch": None}, "settings": [], "environment": [], **extra})


def test_plural_formats_the_number_and_says_one_in_the_singular():
    assert plural(1.0, "CPU", "g") == "1 CPU" and plural(1.5, "CPU", "g") == "1.5 CPUs"
    assert plural(1, "usable CPU") == "1 usable CPU" and plural(2, "process") == "2 processes"


def test_findings_on_one_usable_cpu_say_one_cpu():
    report = one_cpu_report(
        settings=[{"library": "libgomp", "count": 2, "source": "env OMP_NUM_THREADS=2"}],
        frameworks={"torch": {"intra_op": 2, "inter_op": 2, "interop_started": True}})
    found = process_rules.diagnose(report)
    texts = [t for f in found for t in (f.message, f.why, f.fix)]
    assert any("only 1 CPU is usable" in t for t in texts), texts
    assert any("2 inter-op threads x 2 intra-op threads = 4 threads can run at once on 1 usable CPU" in t
               for t in texts), texts
    assert [w for t in texts for w in bad_words(t)] == []


def test_a_variable_set_after_a_library_loaded_says_not_set_rather_than_none():
    report = one_cpu_report(
        environment=[{"name": "OPENBLAS_NUM_THREADS", "value": "1", "launch_value": None, "valid": True,
                      "changed_after_launch": True, "readers": ["openblas"]}],
        settings=[{"library": "openblas", "count": 4, "asked_now": 1, "ignored_changes": ["OPENBLAS_NUM_THREADS"]}])
    (found,) = [f for f in process_rules.diagnose(report) if f.id == "variable-after-load"]
    assert "OPENBLAS_NUM_THREADS changed after launch (not set -> '1')" in found.message, found.message
    assert bad_words(found.message) == []


def test_a_variable_set_after_launch_says_it_was_not_set_rather_than_none():
    report = one_cpu_report(environment=[{"name": "OMP_NUM_THREADS", "value": "1", "launch_value": None,
                                          "valid": True, "changed_after_launch": True, "readers": ["libgomp"]}])
    cells = [cell for row in environment(report).rows for cell in row.cells]
    assert any("changed after launch (not set at launch)" in c for c in cells), cells
    assert [w for c in cells for w in bad_words(c)] == []


def test_a_plan_on_one_cpu_says_one_cpu(tmp_path):
    path = tmp_path / "one.yaml"
    path.write_text(textwrap.dedent("""\
        version: 1
        name: one
        intra_op: 4
        inter_op: 1
        affinity: compact
    """))
    plan = resolve_profile(str(path), machine(1))
    texts = [*plan.notes, plan.affinity_why, plan.intra_op.why, plan.memory_why]
    assert any("more than the 1 usable CPU:" in t for t in texts), texts
    assert [w for t in texts for w in bad_words(t)] == []
    two = tmp_path / "two.yaml"
    two.write_text("version: 1\nname: two\ninstances: 1\n")
    inst = resolve_profile(str(two), machine(1))
    texts = [*inst.notes, inst.affinity_why]
    assert any("per instance: 1 instance, each pinned to one CPU of each of its 1 core" in t for t in texts), texts
    assert [w for t in texts for w in bad_words(t)] == []


def test_watch_says_one_process_one_thread_one_cpu():
    sample = Sample(time=0.0, interval=1.0, pid=42, processes=1, threads=1, usable_cpus=1, quota=1.0,
                    cpu_percent=100.0, runnable=1.0, running_now=1, involuntary=0, groups=(), throttling=None,
                    throttling_unknown=None, pressure_some=0.0, pressure_cgroup_some=0.0)
    text = render_sample(sample, "pid 42")
    assert "1 process, 1 thread;" in text and "quota 1 CPU" in text, text
    assert bad_words(text) == [], text
