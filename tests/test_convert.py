"""The one converter: records to JSON and back, lenient on what another process or version sends
(``strict=False``), strict on what a test or a round trip hands it (``strict=True``)."""
from __future__ import annotations

import enum
import json
from dataclasses import field
from typing import Annotated, ClassVar

import pytest

from parinfo.errors import RecordError, UsageError
from parinfo.records.convert import FLATTEN, LOCAL, OMIT_EMPTY, OMIT_NONE, REQUIRED, at_most, between, dump, key, load
from parinfo.records.record import record
from parinfo.records.source import Kind, Source, variable
from parinfo.runtime.snapshot import RuntimeSection


def lenient(cls, data):
    """What a hostile path reads: never an error."""
    return load(cls, data, strict=False)


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
    assert lenient(Outer, data) == value
    assert load(Outer, data, strict=True) == value


def test_none_is_left_out_only_where_the_field_says_so():
    data = dump(Outer("a"))
    assert "hidden" not in data and data["count"] is None and data["inner"] is None


@pytest.mark.parametrize("junk", [None, 3, "text", [], {"name": 5}, {"name": "a", "count": True}])
def test_odd_data_never_raises(junk):
    got = lenient(Outer, junk)
    assert isinstance(got, Outer) and got.count is None and got.flag is False


def test_each_odd_value_takes_its_default_and_odd_items_are_left_out():
    got = lenient(Outer, {"name": "a", "count": "3", "ratio": True, "flag": 1, "colour": "green",
                       "source": {"kind": "nonsense", "text": "w"}, "inner": [1], "many": [{"n": 1}, 7, {"n": "x"}],
                       "by_name": {"k": 1, "j": "2"}, "pair": [1, "b"], "either": 2.5, "fallback": 9})
    assert (got.count, got.ratio, got.flag, got.colour) == (None, None, False, Colour.RED)
    assert got.source == Source(Kind.OTHER, "", "w")  # words from a report this parinfo cannot type
    assert got.inner is None and got.many == [Inner(1), Inner(0)] and got.by_name == {"k": 1}
    assert got.pair is None and got.either is None and got.fallback == "unknown"
    assert lenient(Outer, {"name": "a", "either": "why"}).either == "why"
    assert lenient(Outer, {}).name == ""  # a required field missing: its type's empty value


def test_the_runtime_section_of_another_version_is_read_without_error():
    push = {"count": 1, "pools": [{"library": "openblas", "filepath": "/x", "num_threads": 1}],
            "source": {"kind": "profile", "detail": "p", "text": "profile p"}}
    section = lenient(RuntimeSection, {"backend": "native", "intra_op": {"count": 2, "source": "explicit call"},
                                        "native_push": push,
                                        "follow": {"enabled": False, "changes": [{"at": "12:00:00"}, "odd"]}})
    assert section.intra_op is not None and section.intra_op.source == Source(Kind.OTHER, "", "explicit call")
    assert section.native_push is not None and section.native_push.by_file()["/x"][1].kind is Kind.PROFILE
    assert section.follow is not None and section.followed_at == "12:00:00" and not section.follow.enabled
    assert dump(lenient(RuntimeSection, {"unknown": "read from outside"})) == {"unknown": "read from outside"}


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
    back = load(Shaped, data, strict=True)
    assert back.label == "x" and back.part == Part(1, "y") and back.counters == [Counter("c", 2)]
    assert back.scratch == {}  # never read back, even when the JSON has the key
    assert lenient(Shaped, {"scratch": {"k": 1}, "label": "under its field name"}).scratch == {}
    assert lenient(Shaped, {"label": "under its field name"}).label == ""
    assert dump(Shaped(tags=["t"], note="n"))["tags"] == ["t"] and dump(Shaped(note="n"))["note"] == "n"


def test_a_record_missing_a_required_field_is_odd_as_a_whole():
    got = lenient(Shaped, {"counter": {"value": 3}, "counters": [{"name": "a"}, {"name": "b", "value": 1},
                                                            {"name": "c", "value": "1"}]})
    assert got.counter is None and got.counters == [Counter("b", 1)]
    assert lenient(Counter, {"value": 1}) == Counter("", 1)  # asked for at the top: its empty record


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
    assert lenient(Hooked, {"n": 3, "words": "old words", "double": 6}) == Hooked(3, "OLD WORDS")
    assert lenient(list[Hooked], [{"n": -1}, {"n": 1}]) == [Hooked(1)]  # a hook refuses an odd object
    assert lenient(Hooked, {"n": -1}) == Hooked()


@record
class Kinded:
    kind: ClassVar[str] = "kinded"
    n: int = 0


def test_class_variables_do_not_travel():
    assert dump(Kinded(1)) == {"n": 1}
    assert lenient(Kinded, {"n": 2, "kind": "other"}) == Kinded(2) and Kinded.kind == "kinded"


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
    got = lenient(Bounded, {"word": "abcdef", "maybe": "xyz", "count": 9, "ratio": 1.5, "first": [1, "bc", "d", "e"],
                         "seen": {"long key": 1, "k": "odd", "late": 3}, "kept": "wxyz"})
    assert (got.word, got.maybe, got.count, got.ratio) == ("abc", "xy", None, 0.5)
    assert got.first == ["b", "d"]  # the first three items read, the odd one among them left out
    assert got.seen == {"lo": 1}  # the first two entries read; keys cut too
    assert got.kept == "wxy"
    assert [lenient(Bounded, {"count": n}).count for n in (0, 1, 8, True, 2.0)] == [None, 1, 8, None, None]
    assert lenient(Bounded, {}) == Bounded()  # a bounded field's empty value is its type's
    assert lenient(list[Bounded], [{"word": "a", "kept": "k"}, {"word": "b", "kept": 3}, {"word": "c"}]) == \
        [Bounded("a", kept="k")]  # a required bounded field odd or missing: the row is left out


@record
class Row:
    _json_array = True

    n: int | None
    name: str = field(metadata=REQUIRED)
    flag: bool = False


def test_a_record_written_as_an_array_reads_its_fields_in_order():
    assert dump(Row(1, "a", True)) == [1, "a", True]
    rows = [[1, "a", True], ["x", "b", 1], [2, "c"], [3, 4, True], {"n": 5, "name": "d"}, "odd"]
    assert lenient(list[Row], rows) == \
        [Row(1, "a", True), Row(None, "b", False), Row(5, "d", False)]


# -- strict: trusted input (a test's payload, a round trip) ---------------------------------------

def _error(cls, data) -> str:
    with pytest.raises(RecordError) as caught:
        load(cls, data, strict=True)
    assert isinstance(caught.value, UsageError) and isinstance(caught.value, ValueError)
    return str(caught.value)


def test_strict_an_unknown_key_is_an_error_that_suggests_the_key_meant():
    assert _error(Outer, {"name": "a", "cuont": 3}) == "cuont: unknown key (did you mean count?)"
    assert _error(Outer, {"name": "a", "zzz": 3}) == "zzz: unknown key"
    assert _error(Kinded, {"n": 2, "kind": "other"}) == "kind: unknown key"  # a class variable never travels
    assert _error(Shaped, {"scratch": {}}) == "scratch: unknown key"  # nor does a LOCAL field
    assert _error(Shaped, {"label": "x"}) == "label: unknown key (did you mean json label?)"
    assert load(Shaped, {"a": 1, "b": "y"}, strict=True).part == Part(1, "y")  # a flattened record's keys


def test_strict_errors_name_the_path_nested_and_through_lists_and_mappings():
    assert _error(Outer, {"name": "a", "inner": {"n": 1, "tag": []}}) == "inner.tag: unknown key (did you mean tags?)"
    assert _error(Outer, {"name": "a", "many": [{"n": 1}, {"n": "2"}]}) == "many[1].n: expected int, not str"
    assert _error(Outer, {"name": "a", "many": [{}, {"tags": ["a", 3]}]}) == "many[1].tags[1]: expected str, not int"
    assert _error(Outer, {"name": "a", "by_name": {"k": 1, "j": "2"}}) == "by_name.j: expected int, not str"
    assert _error(list[Outer], [{"name": "a"}, {"name": "b", "flg": True}]) == \
        "[1].flg: unknown key (did you mean flag?)"


def test_strict_a_value_of_the_wrong_type_is_an_error():
    assert _error(Outer, {"name": 5}) == "name: expected str, not int"
    assert _error(Outer, {"name": "a", "count": True}) == "count: expected int or null, not bool"
    assert _error(Outer, {"name": "a", "flag": 1}) == "flag: expected bool, not int"
    assert _error(Outer, {"name": "a", "colour": "green"}) == "colour: 'green' is not one of 'red', 'blue'"
    assert _error(Outer, {"name": "a", "pair": [1, "b"]}) == "pair[1]: expected int, not str"
    assert _error(Outer, {"name": "a", "pair": [1]}) == "pair: expected 2 items, not 1"
    assert _error(Outer, {"name": "a", "either": 2.5}) == "either: expected int or str or null, not float"
    assert _error(Outer, {"name": "a", "inner": [1]}) == "inner: expected Inner (an object) or null, not list"
    assert _error(Outer, {"name": "a", "fallback": None}) == "fallback: expected str, not null"
    assert _error(Outer, {"name": "a", "source": {"kind": "nonsense"}}) == \
        "source.kind: 'nonsense' is not a source kind"
    assert _error(Outer, {"name": "a", "source": {"kind": "variable", "detial": "X"}}) == \
        "source.detial: unknown key (did you mean detail?)"
    assert _error(Outer, []) == "expected Outer (an object), not list"
    assert _error(Row, [1, "a"]) == "expected an array of 3 items, not 2"
    assert _error(Hooked, {"n": -1}) == "not a Hooked as its reader takes one"


def test_strict_bounds_are_errors_not_cuts():
    assert _error(Bounded, {"word": "abcdef"}) == "word: 6 long, more than its bound 3"
    assert _error(Bounded, {"count": 9}) == "count: 9 is out of its bounds 1..8"
    assert _error(Bounded, {"first": ["a", "b", "c", "d"]}) == "first: 4 long, more than its bound 3"
    assert _error(Bounded, {"seen": {"long": 1}}) == "seen.long: 4 long, more than its bound 2"  # a bounded key
    assert load(Bounded, {"word": "abc", "count": 8, "first": ["a"], "kept": "k"}, strict=True) == \
        Bounded("abc", count=8, first=["a"], kept="k")


def test_strict_missing_fields_take_their_defaults_but_a_required_one_is_an_error():
    assert load(Outer, {}, strict=True) == Outer("", fallback="unknown")  # an older version's JSON, fewer keys
    assert load(Outer, {"name": "a"}, strict=True).fallback == "unknown"
    assert _error(Counter, {"value": 1}) == "name: missing (the record needs it)"
    assert _error(Shaped, {"counters": [{"name": "a", "value": 0}, {"value": 1}]}) == \
        "counters[1].name: missing (the record needs it)"


def test_strict_reads_the_keys_a_hook_writes_and_its_values_as_given():
    assert load(Hooked, {"n": 3, "words": "w"}, strict=True) == Hooked(3, "W")
    assert _error(Hooked, {"n": 3, "double": 6}) == "double: unknown key"  # Hooked lists no extra key


def test_every_reading_says_how_far_it_trusts_its_data():
    with pytest.raises(TypeError, match="strict"):
        load(Outer, {"name": "a"})  # type: ignore[call-arg]
