"""parinfo.records.record behaves as the dataclass it stands in for: each case is checked against
``dataclasses.dataclass`` on the same class body."""
from __future__ import annotations

import dataclasses
import pickle
from dataclasses import FrozenInstanceError, field
from typing import ClassVar

import pytest

from parinfo.records.record import record


def _pair(frozen: bool = False, order: bool = False):
    """The same class made by dataclass and by record."""

    def body():
        class Row:
            """A row."""

            name: str
            count: int = 1
            tags: list[str] = field(default_factory=list)
            note: str = field(default="", compare=False, repr=False)

            @property
            def wide(self) -> bool:
                return self.count > 4

        return Row

    return (dataclasses.dataclass(frozen=frozen, order=order)(body()),
            record(frozen=frozen, order=order)(body()))


@pytest.mark.parametrize("frozen", [False, True])
def test_construction_repr_equality_and_helpers_match_dataclass(frozen):
    for cls in _pair(frozen):
        a = cls("x", 3, note="n")
        assert (a.name, a.count, a.tags, a.note, a.wide) == ("x", 3, [], "n", False)
        assert repr(a).endswith(".Row(name='x', count=3, tags=[])")  # the qualified name, as dataclass
        assert a == cls("x", 3, note="other")  # note takes no part in equality
        assert a != cls("x", 4)
        assert a != ("x", 3, [])
        assert dataclasses.asdict(a) == {"name": "x", "count": 3, "tags": [], "note": "n"}
        assert dataclasses.replace(a, count=5).wide
        assert [f.name for f in dataclasses.fields(cls)] == ["name", "count", "tags", "note"]
        assert cls("y").tags is not cls("y").tags  # one list per instance
        assert cls.__match_args__ == ("name", "count", "tags", "note")


@pytest.mark.parametrize("frozen", [False, True])
def test_wrong_arguments_are_refused_as_dataclass_refuses_them(frozen):
    for cls in _pair(frozen):
        with pytest.raises(TypeError, match="name"):
            cls()
        with pytest.raises(TypeError, match="positional"):
            cls("a", 1, [], "", "extra")
        with pytest.raises(TypeError, match="multiple values"):
            cls("a", name="b")
        with pytest.raises(TypeError, match="unexpected keyword"):
            cls("a", size=2)


def test_frozen_refuses_changes_and_hashes_by_value():
    for cls in _pair(frozen=True):
        a = cls("x", 2, ("t",))  # a tuple, so the instance is hashable
        with pytest.raises(FrozenInstanceError):
            a.count = 3
        with pytest.raises(FrozenInstanceError):
            del a.name
        assert hash(a) == hash(cls("x", 2, ("t",), note="other"))
        assert len({a, cls("x", 2, ("t",))}) == 1


def test_mutable_is_unhashable_and_changes_in_place():
    for cls in _pair(frozen=False):
        a = cls("x")
        a.count = 7
        assert a.wide
        with pytest.raises(TypeError):
            hash(a)


def test_order_compares_fields_in_order():
    for cls in _pair(frozen=True, order=True):
        items = [cls("b", 1, ()), cls("a", 2, ()), cls("a", 1, ())]
        assert [(i.name, i.count) for i in sorted(items)] == [("a", 1), ("a", 2), ("b", 1)]
        assert cls("a", 1, ()) <= cls("a", 1, ())
        with pytest.raises(TypeError):
            _ = cls("a") < "a"


def test_post_init_runs_and_can_refuse():
    @record(frozen=True)
    class Positive:
        n: int

        def __post_init__(self) -> None:
            if self.n <= 0:
                raise ValueError("n must be positive")

    assert Positive(2).n == 2
    with pytest.raises(ValueError, match="positive"):
        Positive(0)


def test_fields_not_in_init_are_filled_and_a_subclass_adds_fields():
    @record
    class Base:
        a: int
        seen: list[int] = field(default_factory=list, init=False)

    @record
    class Child(Base):
        b: str = "b"

    c = Child(1, "z")
    assert (c.a, c.b, c.seen) == (1, "z", [])
    assert repr(c).endswith(".Child(a=1, seen=[], b='z')")
    assert c != Base(1)


def test_a_record_that_writes_its_own_methods_is_refused():
    with pytest.raises(TypeError, match="defines __eq__"):
        @record
        class Own:
            a: int

            def __eq__(self, other: object) -> bool:
                return True


@record(frozen=True)
class Pickled:
    a: int
    b: tuple[str, ...] = ()


def test_records_pickle_and_copy():
    import copy

    p = Pickled(1, ("x",))
    assert pickle.loads(pickle.dumps(p)) == p
    assert copy.deepcopy(p) == p


def test_keyword_only_fields_and_initvars_behave_as_dataclass():
    """What the shared methods do not model goes to dataclass's own: a keyword-only field is refused
    positionally, an InitVar reaches __post_init__ and is no field."""
    def body():
        class Job:
            name: str
            scale: dataclasses.InitVar[int] = 1
            size: int = field(default=0, kw_only=True)
            total: int = field(default=0, init=False)

            def __post_init__(self, scale: int) -> None:
                self.total = self.size * scale

        return Job

    for cls in (dataclasses.dataclass(body()), record(body())):
        job = cls("a", 3, size=2)
        assert (job.name, job.size, job.total) == ("a", 2, 6)
        assert [f.name for f in dataclasses.fields(job)] == ["name", "size", "total"]
        with pytest.raises(TypeError):
            cls("a", 3, 2)  # size is keyword-only

    def after_marker():
        class Opts:
            path: str
            _: dataclasses.KW_ONLY
            strict: bool = False

        return Opts

    for cls in (dataclasses.dataclass(after_marker()), record(frozen=True)(after_marker())):
        assert cls("p", strict=True).strict is True
        with pytest.raises(TypeError):
            cls("p", True)



def test_a_record_without_a_docstring_is_described_by_its_fields():
    @record
    class Bare:
        name: str
        tags: list[str] = field(default_factory=list)
        count: int = 1

    assert Bare.__doc__ == "Bare(name: str, tags: list[str], count: int)"
    assert Bare("a") == Bare("a", [], 1)


_FIELD_FACTS = ("name", "type", "default", "default_factory", "init", "repr", "hash", "compare", "metadata",
                "kw_only", "_field_type")


def _facts(cls) -> list[tuple]:
    return [tuple(getattr(f, a) for a in _FIELD_FACTS) for f in cls.__dataclass_fields__.values()]


def test_the_fields_a_record_makes_are_dataclasss_own():
    def body(base=object):
        class Row(base):
            """A row."""

            name: str
            count: int = 1
            tags: list[str] = field(default_factory=list, metadata={"json": "t"})
            note: str = field(default="", compare=False, repr=False)
            total: int = field(default=0, init=False)
            size: float = field(default=0.5, hash=False)

        return Row

    made, ours = dataclasses.dataclass(body()), record(body())
    assert _facts(ours) == _facts(made)
    assert ours.__match_args__ == made.__match_args__ == ("name", "count", "tags", "note", "size")
    for name in ("count", "note", "size"):  # the class attributes dataclass leaves
        assert getattr(ours, name) == getattr(made, name)
    assert not hasattr(ours, "tags") and not hasattr(made, "tags") and not hasattr(ours, "name")
    assert dataclasses.is_dataclass(ours) and dataclasses.asdict(ours("a")) == dataclasses.asdict(made("a"))
    assert dataclasses.replace(ours("a", 2), count=3) == ours("a", 3)

    def child(base):
        class Child(base):
            """A row with more."""

            extra: str = "x"

        return Child

    assert _facts(record(child(ours))) == _facts(dataclasses.dataclass(child(made)))
    sub = dataclasses.dataclass(child(ours))  # a dataclass may build on a record
    assert [f.name for f in dataclasses.fields(sub)][-2:] == ["size", "extra"] and sub("a").extra == "x"


def test_what_is_not_a_plain_field_is_read_as_dataclass_reads_it():
    @record
    class WithClassVar:
        """A field and a class variable."""

        kind: ClassVar[str] = "k"
        name: str = "n"

    assert [f.name for f in dataclasses.fields(WithClassVar)] == ["name"] and WithClassVar.kind == "k"
    for mutable in ("[]", "field(default={})"):
        with pytest.raises(ValueError, match="mutable default"):
            exec(f"@record\nclass Bad:\n    '''x'''\n    items: list = {mutable}\n",
                 {"record": record, "field": field, "list": list})
    with pytest.raises(TypeError, match="no type annotation"):
        exec("@record\nclass Bad:\n    '''x'''\n    items = field(default=1)\n", {"record": record, "field": field})
