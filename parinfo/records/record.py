"""Records: dataclasses whose methods are written once here instead of compiled for each class.

``dataclasses.dataclass`` builds ``__init__``, ``__repr__``, ``__eq__`` (and, when frozen,
``__setattr__``, ``__delattr__`` and ``__hash__``) from source text with ``exec`` for every class:
0.25-0.45 ms a class on our machine, and ``parinfo show`` defines some seventy before it prints.
``record`` makes the same class a real dataclass without those methods (so ``fields``, ``asdict``
and ``replace`` work as before) and gives it the methods below, which read the class's fields.
For a class of plain fields it also makes the fields itself, as dataclass makes them (its
``Field`` objects, its field marker and parameters, taken from a class dataclass made), which
costs a fifth of dataclass's pass over the annotations.
Behaviour is the dataclass one: positional or keyword arguments, defaults and ``default_factory``,
``__post_init__``, equality between instances of the same class, hashing and ``FrozenInstanceError``
when frozen, ordering when asked. A class with keyword-only fields or ``InitVar`` pseudo-fields gets
dataclass's own methods instead. Type checkers see a dataclass (``dataclass_transform``).
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
elif TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:  # only type checkers read the mark; typing_extensions would cost 15 ms at start-up
    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda f: f

_T = TypeVar("_T")
_MISSING = dataclasses.MISSING


class _Shape:
    """What the shared methods need to know of one record class, computed once when it is defined."""

    __slots__ = (
        "cls",
        "compare",
        "defaults",
        "factories",
        "frozen",
        "index",
        "init_names",
        "late",
        "post_init",
        "shown",
    )

    def __init__(self, cls: type, frozen: bool) -> None:
        fields = dataclasses.fields(cls)
        self.cls = cls
        self.init_names = tuple(f.name for f in fields if f.init)
        self.index = frozenset(self.init_names)
        self.defaults = {f.name: f.default for f in fields if f.init and f.default is not _MISSING}
        self.factories = {f.name: f.default_factory for f in fields
                          if f.init and f.default_factory is not _MISSING}
        self.late = tuple((f.name, f.default, f.default_factory) for f in fields if not f.init)
        self.compare = tuple(f.name for f in fields if f.compare)
        self.shown = tuple(f.name for f in fields if f.repr)
        self.post_init = hasattr(cls, "__post_init__")
        self.frozen = frozen

    def missing(self, name: str) -> TypeError:
        return TypeError(f"{self.cls.__qualname__}() missing required argument: {name!r}")


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    shape: _Shape = type(self).__record_shape__
    names = shape.init_names
    if len(args) > len(names):
        raise TypeError(f"{shape.cls.__qualname__}() takes {len(names)} positional arguments "
                        f"but {len(args)} were given")
    values = dict(zip(names, args, strict=False))
    if kwargs:
        for name in kwargs:
            if name in values:
                raise TypeError(f"{shape.cls.__qualname__}() got multiple values for argument {name!r}")
            if name not in shape.index:
                raise TypeError(f"{shape.cls.__qualname__}() got an unexpected keyword argument {name!r}")
        values.update(kwargs)
    if len(values) < len(names):
        for name in names[len(args):]:
            if name in values:
                continue
            if name in shape.defaults:
                values[name] = shape.defaults[name]
            elif name in shape.factories:
                values[name] = shape.factories[name]()
            else:
                raise shape.missing(name)
    for name, default, factory in shape.late:
        if factory is not _MISSING:
            values[name] = factory()
        elif default is not _MISSING:
            values[name] = default
    self.__dict__.update(values)  # also how a frozen record is filled: its __setattr__ refuses
    if shape.post_init:
        self.__post_init__()


def _key(self: Any) -> tuple[Any, ...]:
    return tuple([getattr(self, name) for name in type(self).__record_shape__.compare])


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _key(self) == _key(other)


def _hash(self: Any) -> int:
    return hash(_key(self))


def _repr(self: Any) -> str:
    shape: _Shape = type(self).__record_shape__
    inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shape.shown)
    return f"{shape.cls.__qualname__}({inner})"


def _setattr(self: Any, name: str, value: Any) -> None:
    shape: _Shape = type(self).__record_shape__
    if type(self) is shape.cls or name in shape.index:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _delattr(self: Any, name: str) -> None:
    shape: _Shape = type(self).__record_shape__
    if type(self) is shape.cls or name in shape.index:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
    object.__delattr__(self, name)


def _order(compare: Callable[[tuple[Any, ...], tuple[Any, ...]], bool]) -> Callable[[Any, Any], Any]:
    def method(self: Any, other: Any) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return compare(_key(self), _key(other))
    return method


_ORDER = {
    "__lt__": _order(lambda a, b: a < b),
    "__le__": _order(lambda a, b: a <= b),
    "__gt__": _order(lambda a, b: a > b),
    "__ge__": _order(lambda a, b: a >= b),
}


def _needs_dataclass(cls: type) -> bool:
    """Whether ``cls`` declares what the shared methods do not model: keyword-only fields (``KW_ONLY``
    or ``field(kw_only=True)``) or ``InitVar`` pseudo-fields (given to ``__post_init__``)."""
    for name, annotation in getattr(cls, "__annotations__", {}).items():  # the class's own (3.10+)
        value = cls.__dict__.get(name)
        if annotation is dataclasses.KW_ONLY or (isinstance(annotation, str) and annotation.endswith("KW_ONLY")):
            return True
        if isinstance(value, dataclasses.Field) and value.kw_only is True:
            return True
        if isinstance(annotation, dataclasses.InitVar) or (isinstance(annotation, str) and "InitVar" in annotation):
            return True
    return False


@dataclasses.dataclass(init=False, repr=False, eq=False)
class _Made:
    """A class dataclass made as ``record`` asks it to: its parameters and field marker are what a
    record's fields and parameters get."""

    plain: int = 0


_PARAMS = _Made.__dataclass_params__  # type: ignore[attr-defined]
_FIELD = dataclasses.fields(_Made)[0]._field_type  # type: ignore[attr-defined]


def _plain_fields(cls: type) -> dict[str, dataclasses.Field[Any]] | None:
    """The dataclass fields of ``cls`` (its bases' first), made as dataclass makes them, with the
    class attributes set as it sets them; None, changing nothing, for a class with anything but
    plain fields (a ClassVar, an annotation that is not text, a mutable default, a ``field()``
    without an annotation), which dataclass then reads itself, refusals included. Keyword-only
    fields and InitVars never come here (:func:`_needs_dataclass`)."""
    own: dict[str, object] = getattr(cls, "__annotations__", {})  # the class's own (3.10+)
    for name, kind in own.items():
        if not isinstance(kind, str) or "ClassVar" in kind:
            return None
        value = cls.__dict__.get(name, _MISSING)
        default = value.default if isinstance(value, dataclasses.Field) else value
        if default is not _MISSING and type(default).__hash__ is None:
            return None  # a mutable default: dataclass's own refusal says what to do
    if any(isinstance(v, dataclasses.Field) and k not in own for k, v in cls.__dict__.items()):
        return None
    fields: dict[str, dataclasses.Field[Any]] = {}
    for base in cls.__mro__[-1:0:-1]:
        fields.update(getattr(base, "__dataclass_fields__", {}))
    for name, kind in own.items():
        value = cls.__dict__.get(name, _MISSING)
        given = isinstance(value, dataclasses.Field)
        made: dataclasses.Field[Any] = value if given else dataclasses.field(default=value)
        made.name, made.type = name, kind
        made._field_type = _FIELD  # type: ignore[attr-defined]
        if made.kw_only is _MISSING:
            made.kw_only = False
        if given:
            if made.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, made.default)
        fields[name] = made
    return fields


def _make(cls: type[_T], frozen: bool, order: bool) -> type[_T]:
    for name in ("__init__", "__repr__", "__eq__", *(_ORDER if order else ())):
        if name in cls.__dict__:
            raise TypeError(f"record {cls.__qualname__} defines {name}; use a plain dataclass")
    if not cls.__doc__:  # dataclass would write one from inspect.signature, its costliest step
        own = getattr(cls, "__annotations__", {})
        shown = (f"{name}: {getattr(kind, '__name__', kind)}" for name, kind in own.items())
        cls.__doc__ = f"{cls.__name__}({', '.join(shown)})"
    if _needs_dataclass(cls):  # rare: dataclass's own compiled methods, whatever they cost
        return dataclasses.dataclass(frozen=frozen, order=order)(cls)
    fields = _plain_fields(cls)
    if fields is None:
        dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    else:
        cls.__dataclass_params__ = _PARAMS  # type: ignore[attr-defined]
        cls.__dataclass_fields__ = fields  # type: ignore[attr-defined]
        if "__match_args__" not in cls.__dict__:
            cls.__match_args__ = tuple(f.name for f in fields.values() if f.init)  # type: ignore[attr-defined,misc]
    cls.__record_shape__ = _Shape(cls, frozen)  # type: ignore[attr-defined]
    cls.__init__ = _init  # type: ignore[method-assign]
    cls.__repr__ = _repr  # type: ignore[method-assign]
    cls.__eq__ = _eq  # type: ignore[method-assign]
    if frozen:
        cls.__setattr__ = _setattr  # type: ignore[method-assign]
        cls.__delattr__ = _delattr  # type: ignore[method-assign]
        cls.__hash__ = _hash  # type: ignore[method-assign]
    elif "__hash__" not in cls.__dict__:
        cls.__hash__ = None  # type: ignore[assignment]
    if order:
        for name, method in _ORDER.items():
            setattr(cls, name, method)
    return cls


@overload
def record(cls: type[_T], /) -> type[_T]: ...
@overload
def record(*, frozen: bool = False, order: bool = False) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: type[_T] | None = None, /, *, frozen: bool = False, order: bool = False) -> Any:
    """``@record`` or ``@record(frozen=True, order=False)``: a dataclass with shared methods."""
    if cls is None:
        return lambda c: _make(c, frozen, order)
    return _make(cls, frozen, order)
