"""The one converter: records to JSON and back, lenient on what another process or version sends."""
from __future__ import annotations

import enum
import json
from dataclasses import field
from typing import Annotated, ClassVar

import pytest

from parinfo.convert import FLATTEN, LOCAL, OMIT_EMPTY, OMIT_NONE, REQUIRED, at_most, between, dump, key, load
from parinfo.record import record
from parinfo.runtime.snapshot import RuntimeSection
from parinfo.source import Kind, Source, variable


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@record
class Inner:
    n: int = 0
    tags: list[str] = field(default_factory=list)


@record
class Outer:
    name: str
    count: int | None = None
    ratio: float | None = None
    flag: bool = False
    colour: Colour = Colour.RED
    source: Source | None = None
    inner: Inner | None = None
    many: list[Inner] = field(default_factory=list)
    by_name: dict[str, int] = field(default_factory=dict)
    pair: tuple[int, int] | None = None
    either: int | str | None = None
    hidden: str | None = field(default=None, metadata=OMIT_NONE)
    fallback: str = field(default="x", metadata={"missing": "unknown"})


def test_round_trip_through_json():
    value = Outer("a", 3, 0.5, True, Colour.BLUE, variable("OMP_NUM_THREADS", "2"), Inner(1, ["t"]),
                  [Inner(2), Inner(3, ["u", "v"])], {"k": 4}, (1, 2), "why", "seen", "y")
    data = json.loads(json.dumps(dump(value)))
    assert data["colour"] == "blue" and data["source"]["kind"] == "variable" and data["pair"] == [1, 2]
    assert load(Outer, data) == value


def test_none_is_left_out_only_where_the_field_says_so():
    data = dump(Outer("a"))
    assert "hidden" not in data and data["count"] is None and data["inner"] is None


@pytest.mark.parametrize("junk", [None, 3, "text", [], {"name": 5}, {"name": "a", "count": True}])
def test_odd_data_never_raises(junk):
    got = load(Outer, junk)
    assert isinstance(got, Outer) and got.count is None and got.flag is False


def test_each_odd_value_takes_its_default_and_odd_items_are_left_out():
    got = load(Outer, {"name": "a", "count": "3", "ratio": True, "flag": 1, "colour": "green",
                       "source": {"kind": "nonsense", "text": "w"}, "inner": [1], "many": [{"n": 1}, 7, {"n": "x"}],
                       "by_name": {"k": 1, "j": "2"}, "pair": [1, "b"], "either": 2.5, "fallback": 9})
    assert (got.count, got.ratio, got.flag, got.colour) == (None, None, False, Colour.RED)
    assert got.source == Source(Kind.OTHER, "", "w")  # words from a report this parinfo cannot type
    assert got.inner is None and got.many == [Inner(1), Inner(0)] and got.by_name == {"k": 1}
    assert got.pair is None and got.either is None and got.fallback == "unknown"
    assert load(Outer, {"name": "a", "either": "why"}).either == "why"
    assert load(Outer, {}).name == ""  # a required field missing: its type's empty value


def test_the_runtime_section_of_another_version_is_read_without_error():
    push = {"count": 1, "pools": [{"library": "openblas", "filepath": "/x", "num_threads": 1}],
            "source": {"kind": "profile", "detail": "p", "text": "profile p"}}
    section = load(RuntimeSection, {"backend": "native", "intra_op": {"count": 2, "source": "explicit call"},
                                        "native_push": push,
                                        "follow": {"enabled": False, "changes": [{"at": "12:00:00"}, "odd"]}})
    assert section.intra_op is not None and section.intra_op.source == Source(Kind.OTHER, "", "explicit call")
    assert section.native_push is not None and section.native_push.by_file()["/x"][1].kind is Kind.PROFILE
    assert section.follow is not None and section.followed_at == "12:00:00" and not section.follow.enabled
    assert dump(load(RuntimeSection, {"unknown": "read from outside"})) == {"unknown": "read from outside"}


@record
class Counter:
    name: str = field(metadata=REQUIRED)
    value: int = field(default=0, metadata=REQUIRED)


@record
class Part:
    a: int | None = None
    b: str = ""


@record
class Shaped:
    label: str = field(default="", metadata=key("json label"))
    part: Part = field(default_factory=Part, metadata=FLATTEN)
    tags: list[str] = field(default_factory=list, metadata=OMIT_EMPTY)
    note: str = field(default="", metadata=OMIT_EMPTY)
    counter: Counter | None = None
    counters: list[Counter] = field(default_factory=list)
    scratch: dict[str, int] = field(default_factory=dict, metadata=LOCAL)


def test_renamed_flattened_and_empty_fields_travel_as_declared():
    value = Shaped("x", Part(1, "y"), [], "", None, [Counter("c", 2)], {"kept": 1})
    data = dump(value)
    assert data == {"json label": "x", "a": 1, "b": "y", "counter": None, "counters": [{"name": "c", "value": 2}]}
    back = load(Shaped, data)
    assert back.label == "x" and back.part == Part(1, "y") and back.counters == [Counter("c", 2)]
    assert back.scratch == {}  # never read back, even when the JSON has the key
    assert load(Shaped, {"scratch": {"k": 1}, "label": "under its field name"}).scratch == {}
    assert load(Shaped, {"label": "under its field name"}).label == ""
    assert dump(Shaped(tags=["t"], note="n"))["tags"] == ["t"] and dump(Shaped(note="n"))["note"] == "n"


def test_a_record_missing_a_required_field_is_odd_as_a_whole():
    got = load(Shaped, {"counter": {"value": 3}, "counters": [{"name": "a"}, {"name": "b", "value": 1},
                                                            {"name": "c", "value": "1"}]})
    assert got.counter is None and got.counters == [Counter("b", 1)]
    assert load(Counter, {"value": 1}) == Counter("", 1)  # asked for at the top: its empty record


@record
class Hooked:
    n: int = 0
    words: str = ""

    def _json_out(self, data: dict[str, object]) -> dict[str, object]:
        return {**data, "double": self.n * 2}

    @classmethod
    def _json_in(cls, data: object) -> object:
        if not isinstance(data, dict) or data.get("n") == -1:
            return None
        return {**data, "words": data["words"].upper()} if isinstance(data.get("words"), str) else data


def test_a_record_whose_json_differs_says_so_in_its_hooks():
    assert dump(Hooked(3, "w")) == {"n": 3, "words": "w", "double": 6}
    assert load(Hooked, {"n": 3, "words": "old words", "double": 6}) == Hooked(3, "OLD WORDS")
    assert load(list[Hooked], [{"n": -1}, {"n": 1}]) == [Hooked(1)]  # a hook refuses an odd object
    assert load(Hooked, {"n": -1}) == Hooked()


@record
class Kinded:
    kind: ClassVar[str] = "kinded"
    n: int = 0


def test_class_variables_do_not_travel():
    assert dump(Kinded(1)) == {"n": 1}
    assert load(Kinded, {"n": 2, "kind": "other"}) == Kinded(2) and Kinded.kind == "kinded"


@record
class Bounded:
    word: Annotated[str, at_most(3)] = ""
    maybe: Annotated[str, at_most(2)] | None = None
    count: Annotated[int, between(1, 8)] | None = None
    ratio: Annotated[float, between(0, 1)] = 0.5
    first: Annotated[list[Annotated[str, at_most(1)]], at_most(3)] = field(default_factory=list)
    seen: Annotated[dict[Annotated[str, at_most(2)], int], at_most(2)] = field(default_factory=dict)
    kept: Annotated[str, at_most(3)] = field(default="", metadata=REQUIRED)


def test_bounds_cut_texts_read_only_the_first_items_and_refuse_numbers_outside():
    got = load(Bounded, {"word": "abcdef", "maybe": "xyz", "count": 9, "ratio": 1.5, "first": [1, "bc", "d", "e"],
                         "seen": {"long key": 1, "k": "odd", "late": 3}, "kept": "wxyz"})
    assert (got.word, got.maybe, got.count, got.ratio) == ("abc", "xy", None, 0.5)
    assert got.first == ["b", "d"]  # the first three items read, the odd one among them left out
    assert got.seen == {"lo": 1}  # the first two entries read; keys cut too
    assert got.kept == "wxy"
    assert [load(Bounded, {"count": n}).count for n in (0, 1, 8, True, 2.0)] == [None, 1, 8, None, None]
    assert load(Bounded, {}) == Bounded()  # a bounded field's empty value is its type's
    assert load(list[Bounded], [{"word": "a", "kept": "k"}, {"word": "b", "kept": 3}, {"word": "c"}]) == \
        [Bounded("a", kept="k")]  # a required bounded field odd or missing: the row is left out


@record
class Row:
    _json_array = True

    n: int | None
    name: str = field(metadata=REQUIRED)
    flag: bool = False


def test_a_record_written_as_an_array_reads_its_fields_in_order():
    assert dump(Row(1, "a", True)) == [1, "a", True]
    assert load(list[Row], [[1, "a", True], ["x", "b", 1], [2, "c"], [3, 4, True], {"n": 5, "name": "d"}, "odd"]) == \
        [Row(1, "a", True), Row(None, "b", False), Row(5, "d", False)]
