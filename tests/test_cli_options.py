"""Each command's options are declared once (parinfo.cli.options): the plain reading that main() runs
without typer and the typer command built from the same declaration must read every command line the
plain reading accepts into the same values. These tests fail when the two grammars diverge."""
from __future__ import annotations

import inspect
import itertools
import random
from typing import Annotated, NamedTuple

import pytest
import typer

from parinfo.cli import options
from parinfo.cli._app import app
from parinfo.cli.launch import ApplyArgs
from parinfo.cli.options import Argument, Choice, Flag, Rest, Value, fields, plain, typer_command
from parinfo.cli.show import ShowArgs, normalise_check
from parinfo.errors import ParinfoError

COMMANDS = {"show": ShowArgs, "apply": ApplyArgs}

# Values each field takes, as a user types them. Every declared field needs an entry (a new option
# without one fails test_every_field_has_sample_values), so every option is tried in both grammars.
SAMPLES: dict[str, list[str]] = {
    "imports": ["numpy", "a,b", "none", ""],
    "fmt": ["rich", "json", "torch"],
    "check": ["error", "info", ""],
    "pid": ["7", "007", "4194304"],
    "timeout": ["0.1", "2", "2.5", "30"],
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


def test_the_magic_reads_shows_options_as_the_command_does():
    """``%parinfo`` takes some of ``parinfo show``'s options from the same declaration: every spelling
    and sample value of each reads into the values the command line gives."""
    import shlex

    from parinfo.cli.magics import SHOW_OPTIONS, show_args

    magic_fields = [f for f in fields(ShowArgs) if f.name in SHOW_OPTIONS]
    assert {f.name for f in magic_fields} == set(SHOW_OPTIONS)
    spelled = {name for f in magic_fields for name in f.opt.names}
    tried = 0
    for words in _option_words(ShowArgs):
        option = words[0].partition("=")[0]
        if option not in spelled:
            continue
        expected = plain(ShowArgs, words)
        assert expected is not None
        assert show_args(shlex.join(words)) == expected, words
        tried += 1
    pairs = [["--pid", "7", "--children"], ["-i", "numpy", "--import=scipy", "-f", "torch"], ["--json", "--torch"]]
    for words in pairs:
        assert show_args(shlex.join(words)) == plain(ShowArgs, words), words
    assert tried >= len(spelled)
    assert type(show_args("-f json").fmt) is type(ShowArgs().fmt)  # the declared enum, not its word
    with pytest.raises(ParinfoError, match=r"unrecognized arguments: --check; usage: %parinfo \[--pid PID\]"):
        show_args("--check")  # an exit code means nothing to a notebook cell
