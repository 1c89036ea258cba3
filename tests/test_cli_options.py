"""Each command's options are declared once (parinfo.cli.options): the plain reading that main() runs
without typer, the typer command and the IPython magics' options built from the same declaration must
read every command line the plain reading accepts into the same values, and refuse a bad value with
the same line. These tests fail when the grammars diverge."""
from __future__ import annotations

import inspect
import itertools
import random
from collections.abc import Callable
from typing import Annotated, NamedTuple

import pytest
import typer

from parinfo.cli import options
from parinfo.cli._app import app
from parinfo.cli.launch import ApplyArgs
from parinfo.cli.options import Argument, Choice, Flag, Rest, Value, fields, plain, typer_command
from parinfo.cli.show import ShowArgs, normalise_check
from parinfo.cli.watch import WatchArgs
from parinfo.errors import ParinfoError

COMMANDS = {"show": ShowArgs, "apply": ApplyArgs, "watch": WatchArgs}

# Values each field takes, as a user types them. Every declared field needs an entry (a new option
# without one fails test_every_field_has_sample_values), so every option is tried in both grammars.
SAMPLES: dict[str, list[str]] = {
    "imports": ["numpy", "a,b", "none", ""],
    "fmt": ["rich", "json", "torch"],
    "check": ["error", "info", ""],
    "pid": ["7", "007", "4194304"],
    "timeout": ["0.1", "2", "2.5", "30"],
    "interval": ["0.05", "1", "2.5", "3600"],
    "samples": ["1", "3", "10000"],
    "serve": ["9464", "127.0.0.1:9464"],
    "otlp": ["http://127.0.0.1:4318", "https://collector:4318/v1/metrics"],
    "profile": ["latency", "p.yaml"],
    "instances": ["1", "3", "1000000"],
    "instance_index": ["0", "3"],
    "log_dir": ["logs", "/tmp/a b"],
    "command": ["x"],
}
# Values the fields' checks refuse, or that look like something else: the plain reading must leave
# them to typer (or read them as typer does).
BAD = ["", "-1", "+1", "x", "JSON", "\u0661", "9" * 19, "1_0", " 5", "0", "--", "-h"]


def _option_words(cls: type[NamedTuple]) -> list[list[str]]:
    """Every spelling of every declared option and argument, with each sample value."""
    words = []
    for f in fields(cls):
        samples = [m.value for m in f.type] if isinstance(f.opt, Choice) else SAMPLES.get(f.name, [])
        if isinstance(f.opt, Flag):
            words += [[name] for name in f.opt.names]
        elif not isinstance(f.opt, (Argument, Rest)):  # positionals: see _required
            bare = isinstance(f.opt, Value) and f.opt.bare is not None
            for name, sample in itertools.product(f.opt.names, samples):
                if sample and not bare:  # an option with a bare value takes one only after "="
                    words.append([name, sample])
                if name.startswith("--"):
                    words.append([f"{name}={sample}"])
            if bare:
                words += [[name] for name in f.opt.names]
    return [w for w in words if w]


def _required(cls: type[NamedTuple], pick: int = 0) -> list[str]:
    """The words a command line of ``cls`` always holds: its positionals (sample ``pick`` of each),
    and a command after "--"."""
    head = [SAMPLES[f.name][pick % len(SAMPLES[f.name])] for f in fields(cls) if isinstance(f.opt, Argument)]
    tail = [["--", SAMPLES[f.name][pick % len(SAMPLES[f.name])]] for f in fields(cls) if isinstance(f.opt, Rest)]
    return head + (tail[0] if tail else [])


class Refused(NamedTuple):
    what: str
    line: str = ""


def _typer_app(name: str, cls: type[NamedTuple], seen: list[object]) -> typer.Typer:
    """An app whose ``name`` command is built from ``cls`` as parinfo's own app builds it, with the
    same context settings, recording the record it is called with."""
    info = next(c for c in app.registered_commands if c.name == name)
    test_app = typer.Typer(context_settings={"help_option_names": ["-h", "--help"]})

    def record(given: NamedTuple) -> int:
        seen.append(given)
        return 0

    test_app.command(name, context_settings=info.context_settings)(typer_command(cls, record))
    test_app.command("other")(lambda: None)  # two commands: the name is given as on the real command line
    return test_app


def _typer_reads(name: str, cls: type[NamedTuple], line: list[str]) -> object:
    """The record typer calls the command with for ``name LINE`` (after main()'s bare-value spelling),
    or Refused."""
    seen: list[object] = []
    try:
        given = normalise_check(line) if name == "show" else line  # as main() hands show's line to typer
        _typer_app(name, cls, seen)(args=[name, *given], standalone_mode=False)
    except ParinfoError as exc:
        return Refused(type(exc).__name__, str(exc))
    except typer.Exit as exc:
        return Refused(type(exc).__name__)
    except Exception as exc:  # click's usage errors (typer vendors click from 0.2x on)
        if type(exc).__name__ not in ("UsageError", "BadParameter", "NoSuchOption", "MissingParameter",
                                      "BadOptionUsage", "NoArgsIsHelpError"):
            raise
        return Refused(type(exc).__name__)
    return seen[0] if seen else Refused("not called")


@pytest.mark.parametrize("name", COMMANDS)
def test_every_field_has_sample_values(name):
    cls = COMMANDS[name]
    missing = [f.name for f in fields(cls) if not isinstance(f.opt, (Flag, Choice)) and f.name not in SAMPLES]
    assert not missing, f"add sample values for {missing} to SAMPLES"


@pytest.mark.parametrize("name", COMMANDS)
def test_the_real_typer_command_is_built_from_the_declaration(name):
    cls = COMMANDS[name]
    info = next(c for c in app.registered_commands if c.name == name)
    assert list(inspect.signature(info.callback).parameters) == list(cls._fields)
    command = typer.main.get_command(app).commands[name]
    declared = {n for f in fields(cls) for n in f.opt.names}
    spelled = {n for p in command.params for n in p.opts if n.startswith("-")} - {"-h", "--help"}
    assert spelled == declared


@pytest.mark.parametrize("name", COMMANDS)
def test_every_declared_option_reads_the_same_in_both_grammars(name):
    cls = COMMANDS[name]
    tried = 0
    for words, pick in itertools.product(_option_words(cls), range(2)):
        required = _required(cls, pick)
        for line in (words + required, required[:1] + words + required[1:]):
            ours = plain(cls, line)
            assert ours is not None, f"the plain reading leaves {line} to typer"
            assert ours == _typer_reads(name, cls, line), line
            tried += 1
    assert tried >= 2 * len(fields(cls))


@pytest.mark.parametrize("name", COMMANDS)
def test_whatever_the_plain_reading_accepts_typer_reads_the_same(name):
    """Short and mixed command lines from the declared spellings, sample values, bad values and stray
    words: the plain reading either leaves one to typer or reads what typer reads."""
    cls = COMMANDS[name]
    pool = sorted({w for words in _option_words(cls) for w in words} | set(BAD) | {"--bogus", "-x", "extra"})
    rng = random.Random(28)
    lines = [list(p) for p in itertools.product(pool, repeat=2)]
    lines += [rng.sample(pool, rng.randint(3, 5)) for _ in range(300)]
    accepted = 0
    for line in lines:
        line = line + _required(cls)
        ours = plain(cls, line)
        if ours is not None:
            accepted += 1
            assert ours == _typer_reads(name, cls, line), line
    assert accepted > len(pool)  # the comparison saw many accepted lines, not only refusals


@pytest.mark.parametrize("name", COMMANDS)
def test_a_value_the_check_refuses_is_refused_by_typer_with_the_same_line(name):
    """The plain reading leaves a refused value to typer, which must refuse it with the check's line."""
    cls = COMMANDS[name]
    checked = [f for f in fields(cls) if isinstance(f.opt, Value) and f.opt.convert is not None]
    assert checked
    for f, spelling, bad in itertools.product(checked, (0, 1), BAD):
        option = f.opt.names[0]
        line = [f"{option}={bad}"] if spelling else [option, bad]
        if bad.startswith("-") and not spelling:
            continue  # typer reads "-1" after an option as an option: its own error, not the check's
        try:
            f.opt.convert(bad)
        except ParinfoError as exc:
            expected = str(exc)
        else:
            continue
        assert plain(cls, line + _required(cls)) is None
        assert _typer_reads(name, cls, line + _required(cls)) == Refused("BadValue", expected), line


def test_a_field_without_an_option_is_refused():
    class Undeclared(NamedTuple):
        ok: Annotated[bool, options.Flag("--ok", help="fine")] = False
        bare: bool = False

    with pytest.raises(TypeError, match=r"Undeclared\.bare has no option declared"):
        fields(Undeclared)


def test_a_new_option_needs_one_edit():
    class Extended(NamedTuple):
        json_out: Annotated[bool, options.Flag("--json", help="JSON.")] = False
        level: Annotated[int | None, options.Value("--level", "-l", metavar="N", convert=int, help="A level.")] = None
        names: Annotated[list[str] | None, options.Many("--name", metavar="NAME", help="Names.")] = None

    line = ["--level=3", "--name", "a", "--json", "--name=b"]
    assert plain(Extended, line) == Extended(json_out=True, level=3, names=["a", "b"])
    seen: list[object] = []
    test_app = typer.Typer()
    test_app.command("x")(typer_command(Extended, lambda a: seen.append(a) or 0))
    test_app.command("y")(lambda: None)
    test_app(args=["x", *line], standalone_mode=False)
    assert seen == [plain(Extended, line)]


def _magic(name: str) -> tuple[Callable[[str], NamedTuple], type[NamedTuple], tuple[str, ...], dict[str, object]]:
    """The magic that takes some of command ``name``'s options: its reader of a line, the command's
    record, the options it takes and the defaults it has instead of the command's."""
    from parinfo.cli import magics

    if name == "show":
        return magics.show_args, ShowArgs, magics.SHOW_OPTIONS, {}
    return magics.watch_args, WatchArgs, magics.WATCH_OPTIONS, dict(magics.WATCH_DEFAULTS)


def _as_in_the_magic(given: object, defaults: dict[str, object], words: list[str]) -> object:
    """The command's record for ``words`` with the magic's own defaults where ``words`` leave the field."""
    assert isinstance(given, tuple) and hasattr(given, "_replace"), given  # a record, not Refused
    declared = {f.name: f for f in fields(type(given))}
    spelled = {w.partition("=")[0] for w in words}
    left = {k: v for k, v in defaults.items() if not spelled & set(declared[k].opt.names)}
    return given._replace(**left)


MAGICS = pytest.mark.parametrize("name", ["show", "watch"])


@MAGICS
def test_the_magic_reads_the_commands_options_as_the_command_does(name):
    """``%parinfo`` and ``%parinfo_watch`` take some of ``parinfo show``'s and ``parinfo watch``'s
    options from the same declaration: every spelling and sample value of each reads into the values
    the typer command gives; the command's other options are not the magic's."""
    import shlex

    read, cls, names, defaults = _magic(name)
    magic_fields = [f for f in fields(cls) if f.name in names]
    assert {f.name for f in magic_fields} == set(names)
    spelled = {n for f in magic_fields for n in f.opt.names}
    tried = 0
    for words in _option_words(cls):
        if words[0].partition("=")[0] not in spelled:
            continue
        expected = _as_in_the_magic(_typer_reads(name, cls, words), defaults, words)
        assert read(shlex.join(words)) == expected, words
        tried += 1
    mixes = {"show": [["--pid", "7", "--children"], ["-i", "numpy", "--import=scipy", "-f", "torch"],
                      ["--json", "--torch"]],
             "watch": [["--pid", "7", "--children", "-n", "2"], ["--interval=0.5", "--json", "--samples", "9"],
                       ["--interval", "2"]]}
    for words in mixes[name] + [[]]:
        assert read(shlex.join(words)) == _as_in_the_magic(_typer_reads(name, cls, words), defaults, words), words
    assert tried >= len(spelled)
    assert read("") == cls()._replace(**defaults)
    magic = "%parinfo" if name == "show" else "%parinfo_watch"
    for f in fields(cls):
        if f.name not in names:
            for option in f.opt.names:
                with pytest.raises(ParinfoError, match=rf"^unrecognized arguments: {option}; usage: {magic} \["):
                    read(option)


def test_the_magic_reads_the_declared_enum():
    from parinfo.cli.magics import show_args

    assert type(show_args("-f json").fmt) is type(ShowArgs().fmt)  # the declared enum, not its word
    with pytest.raises(ParinfoError, match=r"unrecognized arguments: --check; usage: %parinfo \[--pid PID\]"):
        show_args("--check")  # an exit code means nothing to a notebook cell


@MAGICS
def test_a_value_the_check_refuses_is_one_line_in_the_magic_as_on_the_command_line(name):
    """A bad value of any of the magic's checked options: the magic refuses it with the very line
    the typer command gives (exit 2 on the command line: test_watch_live, test_hostile_cli)."""
    import shlex

    read, cls, names, _ = _magic(name)
    checked = [f for f in fields(cls) if f.name in names and isinstance(f.opt, Value) and f.opt.convert is not None]
    assert checked
    refused = 0
    lines = [[option, bad] for f in checked for option in f.opt.names for bad in BAD
             if not bad.startswith("-")]  # "-1" after an option: each grammar's own error, not the check's
    lines += [[f"{option}={bad}"] for f in checked for option in f.opt.names for bad in BAD if option.startswith("--")]
    for words in lines:
        typer_read = _typer_reads(name, cls, words)
        if not isinstance(typer_read, Refused):
            continue  # a value some option takes ("0" for a pid is refused, for a count it may not be)
        assert typer_read.what == "BadValue", (words, typer_read)
        with pytest.raises(ParinfoError) as caught:
            read(shlex.join(words))
        assert str(caught.value) == typer_read.line and "\n" not in typer_read.line, words
        refused += 1
    assert refused >= len(checked) * 3


@MAGICS
def test_each_magics_docstring_shows_the_usage_its_options_give(name):
    """The usage line in the magic's help (``%parinfo_watch?``) is the one its parser derives from
    the declaration, as its errors print it."""
    from parinfo.cli import magics

    read, *_ = _magic(name)
    function = magics.parinfo_magic if name == "show" else magics.parinfo_watch_magic
    with pytest.raises(ParinfoError) as caught:
        read("--no-such-option")
    usage = str(caught.value).partition("; usage: ")[2]
    assert usage.startswith("%parinfo") and usage in " ".join((function.__doc__ or "").split())


def test_the_magic_reads_watchs_options_without_typer():
    """``%parinfo_watch`` reads its options and renders its samples without loading the CLI framework."""
    from conftest import run_json

    loaded = run_json("import json, sys\n"
                      "from parinfo.cli.magics import watch_args\n"
                      "from parinfo.cli.watch import render_sample\n"
                      "watch_args('-n 2 --interval 0.5')\n"
                      "print(json.dumps(sorted(m for m in ('typer', 'click', 'rich') if m in sys.modules)))")
    assert loaded == []


def test_a_bad_value_of_each_watch_option_is_one_line_and_exit_2():
    """``parinfo watch`` with a value its declaration's check refuses: exit 2 and that check's one line."""
    from conftest import run_cli

    checked = [f for f in fields(WatchArgs) if isinstance(f.opt, Value) and f.opt.convert is not None]
    assert {f.name for f in checked} >= {"pid", "timeout", "interval", "samples"}
    for f in checked:
        with pytest.raises(ParinfoError) as caught:
            f.opt.convert("x")
        proc = run_cli("watch", f.opt.names[0], "x")
        assert proc.returncode == 2, (f.name, proc.stderr)
        assert proc.stderr == f"parinfo: error: {caught.value}\n" and proc.stdout == "", f.name
