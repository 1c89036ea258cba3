"""A plain `parinfo show` runs without typer, and gives exactly what the typer app gives for the same
command line: output, error line and exit code. Anything the plain reading does not know goes to typer."""
from __future__ import annotations

import io
import json

import pytest
from conftest import clean_env, run_py

from parinfo.cli import main, show
from parinfo.cli.show import Format, ShowArgs, plain_args

# Command lines the plain path runs: every option, both spellings of each, and mistakes that only
# the command itself (not the option parser) can see.
PLAIN = [
    ["show"],
    ["show", "--json"],
    ["show", "-f", "json"],
    ["show", "--format", "torch"],
    ["show", "--format=torch"],
    ["show", "-f", "rich"],
    ["show", "--check"],
    ["show", "--check=error"],
    ["show", "--check=info", "--json"],
    ["show", "--check=bogus"],
    ["show", "--check="],
    ["show", "-i", "none"],
    ["show", "--import", "numpy,os", "-i", "json", "--import=math"],
    ["show", "-i", "bad name!"],
    ["show", "-i", "", "--json"],
    ["show", "--torch", "--json"],
    ["show", "--json", "--format", "torch"],
    ["show", "--pid", "1"],
    ["show", "--pid=1", "--json", "--check"],
    ["show", "--children"],
    ["show", "--pid", "1", "--children", "-f", "json"],
    ["show", "--pid", "1", "-f", "torch"],
    ["show", "--pid", "1", "-i", "x"],
    ["show", "--pid", "1", "--torch"],
]

# Command lines the plain path leaves to typer: help, positionals, other spellings, bad values.
TYPER = [
    [], ["--help"], ["--version"], ["fleet", "show"], ["show", "--help"], ["show", "-h"], ["show", "extra"],
    ["show", "--check", "error"], ["show", "--"], ["show", "-i"], ["show", "-i", "--json"], ["show", "--format", "xml"],
    ["show", "--format", "JSON"], ["show", "-fjson"], ["show", "-i=numpy"], ["show", "--pid", "x"],
    ["show", "--pid", "-1"], ["show", "--pid", "+1"], ["show", "--pid", "\u0661"], ["show", "--pid", "9" * 19],
    ["show", "--pid="], ["show", "--json=1"], ["show", "--json", "--json"], ["show", "--pid", "1", "--pid", "2"],
    ["show", "--check", "--check=error"], ["show", "--jso"], ["show", "--torch=yes"], ["showx"],
]


def test_plain_values_are_typers():
    assert plain_args(["show"]) == ShowArgs()
    assert plain_args(["show", "--check"]) == ShowArgs(check="warning")
    assert plain_args(["show", "--check="]) == ShowArgs(check="")
    assert plain_args(["show", "-i", "a,b", "--import=c", "--import", ""]) == ShowArgs(imports=["a,b", "c", ""])
    assert plain_args(["show", "--format=torch", "--pid", "007", "--children", "--torch", "--json"]) == \
        ShowArgs(fmt=Format.torch, pid=7, children=True, torch=True, json_out=True)


@pytest.mark.parametrize("args", TYPER, ids=repr)
def test_everything_else_goes_to_typer(args):
    assert plain_args(args) is None


@pytest.mark.parametrize("args", PLAIN, ids=repr)
def test_plain_lines_take_the_plain_path(args):
    assert plain_args(args) is not None


@pytest.fixture(scope="module")
def report():
    from parinfo.diagnostics.report import inspect

    return inspect(imports=[])


def _outcome(args, capsys) -> tuple[object, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.mark.parametrize("args", PLAIN, ids=repr)
def test_plain_path_and_typer_give_the_same(args, report, monkeypatch, capsys):
    import parinfo.diagnostics.report

    asked = []
    monkeypatch.setattr(parinfo.diagnostics.report, "inspect", lambda *a, **k: asked.append((a, k)) or report)
    plain = _outcome(args, capsys)
    monkeypatch.setattr(show, "plain_args", lambda args: None)  # what main() does for a line it cannot read
    through_typer = _outcome(args, capsys)
    assert plain == through_typer
    assert plain[0] in (0, 1, 2) and (plain[1] or plain[2])
    if len(asked) == 2:
        assert asked[0] == asked[1]  # the report was asked for in the same words


def _plain_show_at_exit(expression: str) -> str:
    """Run ``parinfo show --json -i none`` as a process's own command line; what ``expression``
    (over gc and sys) printed at its exit."""
    code = ("import atexit, gc, sys\n"
            f"atexit.register(lambda: print({expression}, file=sys.stderr))\n"
            "sys.argv = ['parinfo', 'show', '--json', '-i', 'none']\n"
            "from parinfo.cli import main\n"
            "main()\n")
    proc = run_py(code, env=clean_env())
    assert json.loads(proc.stdout)["schema_version"] == 2
    return proc.stderr.strip().splitlines()[-1]


def test_plain_show_loads_neither_typer_nor_rich_nor_what_it_does_not_run():
    assert _plain_show_at_exit("sorted(m for m in ('typer', 'click', 'rich', 'parinfo.cli.launch', "
                               "'parinfo.runtime.interop', 'parinfo.runtime.intraop') if m in sys.modules)") == "[]"


def test_the_command_line_leaves_the_last_collection_nothing_and_a_caller_keeps_its_collector(capsys):
    assert _plain_show_at_exit("'frozen', gc.get_freeze_count() > 0") == "frozen True"

    import gc

    before = gc.get_freeze_count()
    code_, out, _ = _outcome(["show", "--json", "-i", "none"], capsys)
    assert code_ == 0 and json.loads(out)["schema_version"] == 2
    assert gc.get_freeze_count() == before == 0


def _streams():
    yield "text", io.StringIO
    for encoding in ("utf-8", "ascii", "latin-1"):
        yield encoding, lambda encoding=encoding: io.TextIOWrapper(io.BytesIO(), encoding=encoding)


def _written(stream) -> bytes | str:
    stream.flush()
    return stream.buffer.getvalue() if hasattr(stream, "buffer") else stream.getvalue()


@pytest.mark.parametrize("text", ["plain", "caf\u00e9 \u2026 \u4e2d", "", "two\nlines"])
@pytest.mark.parametrize("nl", [True, False])
@pytest.mark.parametrize(("kind", "make"), list(_streams()), ids=[k for k, _ in _streams()])
def test_the_plain_path_writes_as_typer_echo(text, nl, kind, make, monkeypatch):
    import typer

    results = []
    for echo in (show._echo, typer.echo):
        stream = make()
        monkeypatch.setattr("sys.stdout", stream)
        try:
            echo(text, nl=nl)
            results.append(_written(stream))
        except UnicodeEncodeError as exc:
            results.append(f"{type(exc).__name__}: {exc.encoding}")
    assert results[0] == results[1], kind
