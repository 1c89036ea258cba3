"""Each command's options, declared once, and the two grammars derived from that declaration.

A command's arguments are a NamedTuple whose every field is annotated with its :class:`Opt`::

    class ShowArgs(NamedTuple):
        torch: Annotated[bool, Flag("--torch", help="Import torch and report its pools.")] = False

The field gives the name, type and default; the :class:`Opt` gives the spellings and the help, and
its class (Flag, Value, Many, Choice, Argument, Rest) how the value is read. From that come the
typer command (:func:`typer_command`: help, mistakes, every spelling), the plain reading
(:func:`plain`) that ``main()`` uses to run the commonest command lines without loading typer, and
the argparse options of the IPython magics (:func:`add_arguments`, :func:`from_namespace`), which
take some of a command's options. Adding an option is adding one field. This module never imports typer at module level.
"""
from __future__ import annotations

import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from parinfo.errors import UsageError

if TYPE_CHECKING:
    import argparse

Args = TypeVar("Args", bound=NamedTuple)


class Opt:
    """One option of a command: its spellings (none for a positional), help and metavar. Its class
    says how it reads its value. (Plain classes, not an enum and NamedTuples: they are defined on
    every plain command line, and those cost several times as much to define.)"""

    __slots__ = ("help", "metavar", "names")

    def __init__(self, *names: str, help: str, metavar: str | None = None) -> None:
        self.names, self.help, self.metavar = names, help, metavar

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self.names}"


class Flag(Opt):
    """An option without a value: the field is True when it is given."""

    __slots__ = ()


class Value(Opt):
    """An option with one value, checked by ``convert`` (which raises UsageError; text as given
    without it). ``bare`` is the value of the option given without one (``--check`` is
    ``--check=warning``; typer, which has no such options, is handed the command line with it spelled
    out by parinfo.cli.show.normalise_check)."""

    __slots__ = ("bare", "convert")

    def __init__(self, *names: str, help: str, metavar: str | None = None,
                 convert: Callable[[str], Any] | None = None, bare: str | None = None) -> None:
        super().__init__(*names, help=help, metavar=metavar)
        self.convert, self.bare = convert, bare


class Many(Opt):
    """An option that may be given any number of times: the field is the list of its values."""

    __slots__ = ()


class Choice(Opt):
    """An option whose value is one of the field's enum (its values, spelled exactly)."""

    __slots__ = ()


class Argument(Opt):
    """A positional argument."""

    __slots__ = ()

    def __init__(self, metavar: str, *, help: str) -> None:
        super().__init__(help=help, metavar=metavar)


class Rest(Opt):
    """Every word after the first ``--`` (a command to run)."""

    __slots__ = ()

    def __init__(self, metavar: str, *, help: str) -> None:
        super().__init__(help=help, metavar=metavar)


class Field:
    """A declared field: its name, option, type (as typer reads it) and default (``...``: required).
    (A plain class: it is defined on every plain command line, and a NamedTuple costs more to define.)"""

    __slots__ = ("default", "name", "opt", "type")

    def __init__(self, name: str, opt: Opt, type: Any, default: Any) -> None:
        self.name, self.opt, self.type, self.default = name, opt, type, default


_FIELDS: dict[type[Any], tuple[Field, ...]] = {}


def fields(cls: type[NamedTuple]) -> tuple[Field, ...]:
    """The declared fields of an arguments record, in order; TypeError for a field without an Opt."""
    found = _FIELDS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls, include_extras=True)
        made = []
        for name in cls._fields:
            hint = hints[name]
            opt = next((m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Opt)), None)
            if opt is None:
                raise TypeError(f"{cls.__name__}.{name} has no option declared (Annotated[type, Opt])")
            made.append(Field(name, opt, typing.get_args(hint)[0], cls._field_defaults.get(name, ...)))
        found = _FIELDS[cls] = tuple(made)
    return found


def plain(cls: type[Args], args: Sequence[str]) -> Args | None:
    """The values of command line ``args`` (the words after the command's name), read as typer reads
    them; None for anything this plain reading leaves to typer, so that its help and error lines stay
    the only ones: help, an unknown or abbreviated option, short options run together (-fjson), -x=v,
    a value that starts with "-", an option other than a Many given twice, a value the option's check
    refuses, a missing or extra positional, a "--" where nothing follows one."""
    declared = fields(cls)
    spelled = {name: f for f in declared for name in f.opt.names}
    positionals = [f for f in declared if isinstance(f.opt, Argument)]
    values: dict[str, object] = {}  # each field's value as typer would give it
    many: dict[str, list[object]] = {}  # a Many's values, in order
    head = list(args)
    tail = next((f for f in declared if isinstance(f.opt, Rest)), None)
    if tail is not None and "--" in head:
        split = head.index("--")
        head, values[tail.name] = head[:split], head[split + 1:]
        if not values[tail.name]:
            return None
    words = iter(head)
    for word in words:
        if not word.startswith("-"):
            if not positionals:
                return None
            values[positionals.pop(0).name] = word
            continue
        name, eq, text = word.partition("=") if word.startswith("--") else (word, "", "")
        field = spelled.get(name)
        if field is None:
            return None
        opt = field.opt
        parsed: Any
        if isinstance(opt, Flag):
            if eq:
                return None
            parsed = True
        elif isinstance(opt, Value) and opt.bare is not None and not eq:
            parsed = opt.bare
        else:
            if not eq:
                following = next(words, None)
                if following is None or following.startswith("-"):
                    return None
                text = following
            parsed = _converted(field, text)
            if parsed is None:
                return None
        if isinstance(opt, Many):
            many.setdefault(field.name, []).append(parsed)
        elif field.name in values:
            return None
        else:
            values[field.name] = parsed
    if any(f.default is ... for f in positionals):
        return None  # a required positional is missing
    return cls._make(many[f.name] if f.name in many else values.get(f.name, f.default) for f in declared)


def _converted(field: Field, text: str) -> Any:
    """``text`` as typer converts it for ``field``; None where typer would refuse it (with the check's
    own line, or its choice error)."""
    opt = field.opt
    if isinstance(opt, Choice):
        return next((member for member in field.type if member.value == text), None)
    if not isinstance(opt, Value) or opt.convert is None:
        return text
    try:
        return opt.convert(text)
    except UsageError:
        return None


def add_arguments(parser: argparse.ArgumentParser, cls: type[NamedTuple], names: Sequence[str],
                  defaults: Mapping[str, Any] | None = None) -> None:
    """Add the options of ``cls`` named by ``names`` (field names) to an argparse ``parser``, spelled,
    checked and defaulted as declared, but for the fields ``defaults`` names (a magic may need another
    default than its command); :func:`from_namespace` reads them back as a ``cls``. Options only: a
    positional argument has no place among a magic's options (TypeError)."""
    declared = {f.name: f for f in fields(cls)}
    for name in names:
        f = declared[name]
        if defaults is not None and name in defaults:
            f = Field(f.name, f.opt, f.type, defaults[name])
        opt = f.opt
        if isinstance(opt, Flag):
            parser.add_argument(*opt.names, action="store_true", dest=f.name, help=opt.help)
        elif isinstance(opt, Many):
            parser.add_argument(*opt.names, action="append", metavar=opt.metavar, dest=f.name, help=opt.help)
        elif isinstance(opt, Choice):
            parser.add_argument(*opt.names, choices=[m.value for m in f.type], default=f.default.value, dest=f.name,
                                help=opt.help)
        elif isinstance(opt, Value) and opt.bare is None:
            parser.add_argument(*opt.names, type=opt.convert or str, metavar=opt.metavar, default=f.default,
                                dest=f.name, help=opt.help)
        elif isinstance(opt, Value):  # "--opt" alone means opt.bare
            parser.add_argument(*opt.names, type=opt.convert or str, metavar=opt.metavar, default=f.default,
                                nargs="?", const=opt.bare, dest=f.name, help=opt.help)
        else:
            raise TypeError(f"{cls.__name__}.{name} is a positional argument, not an option")


def from_namespace(cls: type[Args], namespace: argparse.Namespace) -> Args:
    """The ``cls`` of what :func:`add_arguments` parsed: each option not added keeps its default."""
    values = []
    for f in fields(cls):
        value = getattr(namespace, f.name, f.default)
        values.append(f.type(value) if isinstance(f.opt, Choice) and value is not f.default else value)
    return cls._make(values)


def typer_command(cls: type[Args], run: Callable[[Args], int], doc: str | None = None) -> Callable[..., None]:
    """A typer command function whose parameters are ``cls``'s declared fields: it calls ``run`` with
    the record and exits with the code it returns. ``doc`` (else ``run``'s docstring) is its help."""
    import inspect

    import typer

    def command(**given: Any) -> None:
        code = run(cls._make(given[name] for name in cls._fields))
        if code:
            raise typer.Exit(code)

    params = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=_typer_param(f), annotation=f.type)
              for f in fields(cls)]
    vars(command)["__signature__"] = inspect.Signature(params)  # what typer reads a command's parameters from
    command.__doc__ = doc if doc is not None else run.__doc__
    return command


def _typer_param(field: Field) -> Any:
    """The typer parameter that declares ``field``."""
    import typer

    opt = field.opt
    if isinstance(opt, (Argument, Rest)):
        return typer.Argument(field.default, metavar=opt.metavar, help=opt.help)
    convert = opt.convert if isinstance(opt, Value) else None
    return typer.Option(field.default, *opt.names, metavar=opt.metavar, help=opt.help, parser=convert)
