"""The files a trial of `parinfo tune` writes are hostile input (issue 36): a FIFO where a report or
the worker's result is expected, and JSON nested deeper than the parser goes, end in "unknown (why)"
for that trial's facts, never in a hang or a traceback."""
from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import clean_env, run_cli

from parinfo.launch.child import ChildEnv
from parinfo.records.unknown import Unknown
from parinfo.tuning.measure import hook_report

FAST = ("--repeats", "1", "--min-time", "0", "--warmup", "0", "--no-noise-check", "--max", "1")
DEEP = "[" * 200_000 + "]" * 200_000

# A command trial that leaves a FIFO named PID.json and a deeply nested PID+1.json in the report folder.
HOSTILE_CMD = (
    "import os\n"
    "folder = os.environ['_PARINFO_HOOK_REPORT']\n"
    "open(os.path.join(folder, '%d.json' % (os.getpid() + 1)), 'w').write('[' * 200000 + ']' * 200000)\n"
    "os.mkfifo(os.path.join(folder, '%d.json' % os.getpid()))\n"
    "os._exit(0)\n"  # no exit handler: the hook does not replace the FIFO with its report
)


def _child() -> ChildEnv:
    return ChildEnv(env={}, kept=(), overridden=(), torch_intra=None, torch_inter=1, cpus=None, preloaded=())


def _tune(*args: str) -> dict:
    proc = run_cli("tune", "--json", *FAST, *args, env=clean_env(), timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def test_a_fifo_or_deep_json_in_the_report_folder_is_a_reason(tmp_path):
    os.mkfifo(tmp_path / "5.json")
    assert hook_report(str(tmp_path), 5, _child()) == Unknown("cannot read the start-up hook's report 5.json: "
                                                              "is a FIFO, not a regular file")
    (tmp_path / "6.json").write_text(DEEP)
    assert hook_report(str(tmp_path), 6, _child()) == Unknown("cannot read the start-up hook's report 6.json: "
                                                              "nested too deeply")
    (tmp_path / "7.json").write_text("[1]")
    not_object = hook_report(str(tmp_path), 7, _child())
    assert isinstance(not_object, Unknown) and "7.json is not a JSON object" in not_object.why
    (tmp_path / "8.json").write_text('{"torch": {"intra_op": 2, "inter_op": 1}}')
    assert hook_report(str(tmp_path), 9, _child()) == {"torch": {"intra_op": 2, "inter_op": 1}}


@pytest.mark.timeout(150)
def test_tune_finishes_when_a_trial_leaves_a_fifo_and_deep_json_as_its_reports():
    out = _tune("--", sys.executable, "-c", HOSTILE_CMD)
    (point,) = out["points"]
    verified = point["in_force"]["verified"]
    assert verified.startswith("unknown (cannot read the start-up hook's report ") and "is a FIFO" in verified, point
    assert any("not verified" in note and "is a FIFO" in note for note in out["notes"]), out["notes"]


@pytest.mark.timeout(150)
def test_tune_finishes_when_the_statement_makes_the_workers_result_and_a_report_fifos():
    stmt = ("import os, sys\nif not os.path.exists(sys.argv[2]): os.mkfifo(sys.argv[2])\n"
            "fifo = os.path.join(os.environ['_PARINFO_HOOK_REPORT'], '1.json')\n"
            "if not os.path.exists(fifo): os.mkfifo(fifo)")
    out = _tune("--stmt", stmt)
    (point,) = out["points"]
    assert point["samples_s"] and isinstance(point["in_force"], dict), point
