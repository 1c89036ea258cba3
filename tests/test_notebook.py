"""The report in notebooks: ``Report._repr_html_`` (the same rows as the text report, escaped, no
external asset, findings by severity, pool counts as threadpoolctl sees them), the ``%parinfo`` and
``%parinfo_watch`` magics in IPython's own shell, and docs/notebook.ipynb executed fresh."""
from __future__ import annotations

import json
import re

import pytest
from conftest import HAVE_NUMPY, REPO, clean_env, run_json
from html_report import Report as ParsedReport

from parinfo.diagnostics.model import Report
from parinfo.diagnostics.sections import sections, title
from parinfo.safe_text import plural

HOSTILE = {"OMP_NUM_THREADS": "<script>alert(\"x\")</script>", "MKL_NUM_THREADS": "2 & 'q' <b>"}

_REPORT_IN_A_NUMPY_PROCESS = """
import json, numpy, parinfo
from threadpoolctl import threadpool_info, threadpool_limits
threadpool_limits(1, user_api="blas")  # a count no default gives: read back from the pool itself
report = parinfo.inspect()
print(json.dumps({"html": report._repr_html_(), "report": report.to_dict(),
                  "truth": [(i["filepath"], i["num_threads"]) for i in threadpool_info()]}, default=str))
"""


@pytest.fixture(scope="module")
def numpy_report() -> dict:
    if not HAVE_NUMPY:
        pytest.skip("numpy is not installed")
    return run_json(_REPORT_IN_A_NUMPY_PROCESS, env=clean_env(**HOSTILE), timeout=120)


def test_html_is_well_formed_and_self_contained(numpy_report):
    html = numpy_report["html"]
    parsed = ParsedReport(html)
    assert parsed.problems == []
    assert not re.search(r"<(script|link|style|img|iframe)\b|https?://|url\(", html, flags=re.I)


def test_html_shows_the_rows_of_every_section(numpy_report):
    report = Report.from_dict(numpy_report["report"])
    parsed = ParsedReport(numpy_report["html"])
    expected = sections(report)
    assert list(parsed.tables) == [s.key for s in expected]
    for section in expected:
        table = parsed.tables[section.key]
        assert table.caption == section.title
        assert table.columns == list(section.columns)
        assert table.rows == [list(row.cells) for row in section.rows]
        assert table.tones == [row.tone for row in section.rows]
        assert table.details == [list(row.details) for row in section.rows]
        assert table.notes == [note.text for note in section.notes]
    assert parsed.title == "".join(text for text, _ in title(report))
    # the live evidence is there, and values are the report's own fields
    assert "live" in parsed.tables
    machine = parsed.tables["machine"]
    assert machine.row("usable CPUs")[1].startswith(f"{report.machine.usable_cpus} (")
    assert machine.row("logical CPUs")[1] == str(report.machine.logical_cpus)
    settings = parsed.tables["settings"]
    assert [r[0] for r in settings.rows][:2] == ["parinfo intra-op", "parinfo inter-op"]


def test_hostile_values_are_escaped(numpy_report):
    html = numpy_report["html"]
    for value in HOSTILE.values():
        assert value not in html  # never raw
    assert "<script" not in html and "<b>" not in html
    parsed = ParsedReport(html)
    env = parsed.tables["environment"]
    # ...and read back exactly, once the escapes are undone
    assert env.row(f"OMP_NUM_THREADS={HOSTILE['OMP_NUM_THREADS']}")[1].startswith("INVALID: ")
    assert env.row(f"MKL_NUM_THREADS={HOSTILE['MKL_NUM_THREADS']}")
    invalid = [f for group in parsed.findings.values() for f in group if f.id == "invalid-variable"]
    assert invalid and all(HOSTILE["OMP_NUM_THREADS"] in f.text or HOSTILE["MKL_NUM_THREADS"] in f.text
                           for f in invalid)


def test_pools_table_matches_threadpoolctl_in_the_same_process(numpy_report):
    parsed = ParsedReport(numpy_report["html"])
    pools = parsed.tables["pools"]
    shown = {details[0]: row[1] for row, details in zip(pools.rows, pools.details, strict=True) if details}
    truth = dict(numpy_report["truth"])
    assert truth and set(truth) <= set(shown)
    for path, count in truth.items():
        assert shown[path] == plural(count, "thread")  # threadpoolctl's count, seen by threadpoolctl
    assert 1 in truth.values()  # the limit set in the process shows


def _finding(fid: str, severity: str) -> dict:
    return {"id": fid, "severity": severity, "message": f"{fid} <m>", "why": "because & so", "fix": f"fix {fid} 'now'"}


def test_findings_are_grouped_by_severity_worst_first_with_their_fix():
    report = Report.from_dict({"findings": [_finding("a-info", "info"), _finding("b-warn", "warning"),
                                            _finding("c-err", "error"), _finding("d-warn", "warning")]})
    parsed = ParsedReport(report._repr_html_())
    assert parsed.problems == []
    assert list(parsed.findings) == ["error", "warning", "info"]
    assert [[f.id for f in group] for group in parsed.findings.values()] == [["c-err"], ["b-warn", "d-warn"],
                                                                             ["a-info"]]
    for group in parsed.findings.values():
        for f in group:
            assert f"{f.id}: {f.id} <m>" in f.text and "why: because & so" in f.text
            assert f"fix: fix {f.id} 'now'" in f.text
    assert "nothing wrong found" in ParsedReport(Report.from_dict({})._repr_html_()).text


def test_a_report_read_from_outside_renders_too():
    payload = {"process": {"pid": 7, "name": "w<orker>", "inspected_from": 1, "cmdline": ["python", "-c", "<x>"],
                           "counts": "counts & more", "hint": "run it inside"},
               "pools": [{"library": "openblas", "num_threads": 3, "count_source": "in force (read)"}]}
    report = Report.from_dict(payload)
    parsed = ParsedReport(report._repr_html_())
    assert parsed.problems == []
    assert list(parsed.tables) == [s.key for s in sections(report)] and "outside" in parsed.tables
    assert parsed.title == "parinfo report for pid 7 (w<orker>), read from outside python -c <x>"
    assert parsed.tables["outside"].notes[0] == "read from the process's memory: 1 of 1 pool (above)"
    assert parsed.tables["pools"].rows[0][1:] == ["3 threads", "in force (read)"]


# -- the magics, in IPython's own shell ---------------------------------------------------------

_SHELL = r"""
import contextlib, io, json, subprocess, sys
from IPython.core.displaypub import DisplayPublisher
from IPython.core.interactiveshell import InteractiveShell

class Recorder(DisplayPublisher):
    calls = []
    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kw):
        self.calls.append({"data": data, "display_id": (transient or {}).get("display_id"), "update": update})

shell = InteractiveShell.instance()
default_pub = shell.display_pub
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
try:
    results = []
    for cell, record in json.loads(sys.argv[1]):
        cell = cell.replace("CHILD", str(child.pid))
        Recorder.calls = []
        shell.display_pub = Recorder(shell=shell) if record else default_pub
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            res = shell.run_cell(cell)
        results.append({"cell": cell, "ok": res.success, "stdout": out.getvalue(), "stderr": err.getvalue(),
                        "error": type(res.error_in_exec).__name__ if res.error_in_exec else None,
                        "calls": Recorder.calls})
    with open(f"/proc/{child.pid}/comm") as fh:  # its name as the kernel has it (python, python3, ...)
        comm = fh.read().strip()
    print(json.dumps({"pid": __import__("os").getpid(), "child": child.pid, "child_comm": comm, "results": results},
                     default=str))
finally:
    child.kill()
    child.wait()
"""


def run_shell(*cells: str, record: bool = True) -> dict:
    """Run ``cells`` in a fresh IPython shell in a subprocess (``CHILD``: the pid of a sleeping child);
    each result with its display calls, stdout and stderr."""
    pytest.importorskip("IPython")
    args = json.dumps([[c, record] for c in cells])
    code = f"import sys; sys.argv[1:] = [{args!r}]\n" + _SHELL
    return run_json(code, env=clean_env(**HOSTILE), timeout=120)


def test_parinfo_magic_displays_html_and_text():
    out = run_shell("%load_ext parinfo", "%parinfo", "%parinfo --json", "%parinfo --format torch")
    load, show, as_json, torch = out["results"]
    assert load["ok"] and load["calls"] == [] and load["stderr"] == ""
    assert show["ok"], show
    (call,) = show["calls"]
    assert set(call["data"]) == {"text/plain", "text/html"}
    assert call["data"]["text/plain"].startswith(f"parinfo report for pid {out['pid']} (Python ")
    parsed = ParsedReport(call["data"]["text/html"])
    assert parsed.problems == [] and parsed.title.startswith(f"parinfo report for pid {out['pid']} ")
    text_titles = [ln for ln in call["data"]["text/plain"].splitlines()[1:] if ln and not ln.startswith(" ")]
    assert [t.caption for t in parsed.tables.values()] + ["Findings"] == text_titles
    assert HOSTILE["OMP_NUM_THREADS"] not in call["data"]["text/html"]
    assert "no module imported to probe" in call["data"]["text/plain"]  # the kernel as it is
    (call,) = as_json["calls"]
    payload = call["data"]["application/json"]
    assert payload["schema_version"] == 2 and payload["process"]["pid"] == out["pid"]
    assert json.loads(call["data"]["text/plain"]) == payload
    (call,) = torch["calls"]
    assert call["data"]["text/plain"].startswith("torch: not imported: ")  # the kernel has not imported it
    assert "\nparinfo/Parallel:\n" in call["data"]["text/plain"]
    assert ParsedReport(call["data"]["text/html"]).problems == []


@pytest.mark.parametrize("cell, says", [
    ("%parinfo --pid abc", "--pid abc: not a whole number"),
    ("%parinfo --bogus", "unrecognized arguments: --bogus"),
    ("%parinfo --json --format torch", "--json and --format torch ask for two formats"),
    ("%parinfo --children", "--children needs --pid PID"),
    ("%parinfo --pid 4194303", "no process with pid 4194303"),
    ("%parinfo --import 'not a module'", "is not a module name"),
    ("%parinfo --format 'unclosed", "cannot read the options"),
    ("%parinfo_watch --samples 0", "--samples 0: out of range (1-10000)"),
    ("%parinfo_watch --interval soon", "--interval soon: not a number of seconds"),
    ("%parinfo_watch --interval 0.001", "--interval 0.001: out of range (0.05-3600)"),
    ("%parinfo_watch -n x", "--samples x: not a whole number"),
    ("%parinfo_watch --serve 127.0.0.1:9464", "unrecognized arguments: --serve 127.0.0.1:9464; usage: "
                                              "%parinfo_watch [--samples N] [--interval SECONDS] [--pid PID]"),
    ("%parinfo_watch --children", "--children needs --pid PID"),
    ("%parinfo --format=--", "invalid choice: '--'"),
])
def test_bad_input_is_one_line_without_a_traceback(cell, says):
    out = run_shell("%load_ext parinfo", cell)
    result = out["results"][1]
    assert not result["ok"] and result["error"] == "UsageError" and result["calls"] == []
    lines = result["stderr"].splitlines()
    assert len(lines) == 1, result["stderr"]
    magic = cell.split()[0]
    assert lines[0].startswith(f"UsageError: {magic}: ") and says in lines[0]
    assert "Traceback" not in result["stderr"] + result["stdout"]


def test_watch_updates_one_display_in_place():
    out = run_shell("%load_ext parinfo", "%parinfo_watch --samples 3 --interval 0.1")
    result = out["results"][1]
    assert result["ok"], result
    calls = result["calls"]
    assert len(calls) == 3
    ids = {c["display_id"] for c in calls}
    assert len(ids) == 1 and None not in ids
    assert [c["update"] for c in calls] == [False, True, True]
    for n, c in enumerate(calls, 1):
        text = c["data"]["text/plain"]
        assert text.startswith(f"this process (pid {out['pid']}), sample {n} of 3: ")
        assert "verdict" in text
        assert ParsedReport(c["data"]["text/html"]).text == text


def test_magics_read_another_process_and_unload():
    out = run_shell("%load_ext parinfo", "%parinfo --pid CHILD",
                    "%parinfo_watch --samples 1 --interval 0.1 --pid CHILD", "%unload_ext parinfo", "%parinfo")
    _, show, watch, unload, gone = out["results"]
    assert show["ok"], show
    (call,) = show["calls"]
    parsed = ParsedReport(call["data"]["text/html"])
    assert parsed.title.startswith(f"parinfo report for pid {out['child']} ({out['child_comm']}")
    assert "outside" in parsed.tables
    assert watch["ok"], watch
    (call,) = watch["calls"]
    assert call["data"]["text/plain"].startswith(f"pid {out['child']}, sample 1 of 1: ")
    assert unload["ok"] and not gone["ok"] and "%parinfo` not found" in gone["stderr"]


def test_in_a_terminal_shell_the_report_is_text():
    out = run_shell("%load_ext parinfo", "%parinfo", "%parinfo_watch --samples 2 --interval 0.1", record=False)
    _, show, watch = out["results"]
    assert show["ok"] and show["stdout"].startswith(f"parinfo report for pid {out['pid']} (Python ")
    assert "\nMachine\n" in show["stdout"] and "<table" not in show["stdout"]
    assert watch["ok"] and "sample 1 of 2" in watch["stdout"] and "sample 2 of 2" in watch["stdout"]


# -- the notebook in docs/ ---------------------------------------------------------------------

NOTEBOOK = REPO / "docs" / "notebook.ipynb"


def test_the_docs_notebook_runs_and_shows_what_it_says():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from jupyter_client.manager import KernelManager

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), "commit it unexecuted"
    km = KernelManager(kernel_name="python3", ip="127.0.0.1")
    client = nbclient.NotebookClient(nb, km=km, timeout=120, resources={"metadata": {"path": str(REPO)}})
    client.execute(env=clean_env())
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    for cell in code:
        assert not [o for o in cell.outputs if o.output_type == "error" or o.get("name") == "stderr"], cell.source
    load, inspect, magic, watch, limited = code
    assert load.outputs == []
    (result,) = inspect.outputs
    assert result.output_type == "execute_result"
    report = ParsedReport(result.data["text/html"])
    assert report.problems == [] and {"machine", "pools", "settings", "live"} <= set(report.tables)
    assert any(row[0].startswith("OpenBLAS") for row in report.tables["pools"].rows)
    (shown,) = magic.outputs
    assert shown.output_type == "display_data" and set(shown.data) >= {"text/html", "text/plain"}
    (sample,) = watch.outputs  # one display, updated in place
    assert "sample 2 of 2" in sample.data["text/plain"]
    (after,) = limited.outputs
    settings = ParsedReport(after.data["text/html"]).tables["settings"]
    assert settings.row("openblas")[1:] == ["1", "set at run time by parinfo.set_num_threads(1)"]
    pools = ParsedReport(after.data["text/html"]).tables["pools"]
    assert [row[1] for row in pools.rows if row[0].startswith("OpenBLAS")] == ["1 thread"]


def test_host_report_shows_its_text_in_a_notebook():
    from parinfo.host.model import HostReport, Scope

    report = HostReport(time=0.0, interval=1.0, scope=Scope("/<b>x</b>&'y'"), logical_cpus=2)
    html = report._repr_html_()
    parsed = ParsedReport(html)
    assert parsed.problems == [] and "<b>" not in html
    assert parsed.text == report.table() and "(cgroup /<b>x</b>&'y')" in parsed.text
