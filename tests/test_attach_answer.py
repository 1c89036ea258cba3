"""The attached target's answer is hostile input: each field is believed only with its type and within
its bounds, anything else is unknown (None, left out), and nothing the target writes raises anything
but BadAnswer (one line, shown as the attach's error)."""
from __future__ import annotations

import json

import pytest

from parinfo.outside.attach.result import MAX_COUNT, MAX_ITEMS, MAX_TEXT, BadAnswer, PythonFacts, PyThread, parse
from parinfo.process.provenance import SetByApply
from parinfo.process.torch_config import TorchFacts


def answer(**fields: object) -> bytes:
    base: dict[str, object] = {"token": "t", "pid": 7}
    base.update(fields)
    return json.dumps(base).encode()


def read(**fields: object):
    return parse(answer(**fields), "t", 7)


def test_an_answer_with_only_its_token_and_pid_is_all_unknown():
    got = read()
    assert got.pid == 7 and got.python == PythonFacts() and got.environ == {} and got.modules == frozenset()
    assert (got.python_threads, got.threads, got.pools, got.torch, got.python_libs, got.parinfo, got.errors) == \
        (None, None, {}, None, [], None, {})


def test_oversized_texts_are_cut_at_their_bounds():
    long = "x" * 100_000
    got = read(python={"version": long, "executable": long, "implementation": long, "platform": long, "x_gil": long},
               environ={"K" * 5000: long}, errors={"e" * 100: long},
               pools=[{"path": "/p" + long, "version": long, "layer": long, "architecture": long, "why": long}],
               python_libs=[{"name": long, "file": long, "facts": {"f" * 300: "v"}}],
               threads=[1, [[5, long, True]]],
               parinfo={"version": long, "state": {"gil_reenabled_by": long, "busy": long,
                                                   "applied": {"V": {"value": long, "profile": long,
                                                                     "loaded": [long]}}}})
    p = got.python
    assert [len(v or "") for v in (p.version, p.executable, p.implementation, p.platform, p.x_gil)] == \
        [64, MAX_TEXT, 64, 64, 16]
    assert [(len(k), len(v)) for k, v in got.environ.items()] == [(MAX_TEXT, 1 << 16)]
    assert [(len(k), len(v)) for k, v in got.errors.items()] == [(64, 400)]
    (path, pool), = got.pools.items()
    assert len(path) == MAX_TEXT and path.startswith("/px")
    assert [len(v or "") for v in (pool.version, pool.layer, pool.architecture, pool.why)] == [200, 64, 100, 400]
    lib, = got.python_libs
    assert (len(lib.name), len(lib.file or ""), [len(k) for k in lib.facts]) == (200, MAX_TEXT, [200])
    assert got.threads is not None and len(got.threads[0].name) == MAX_TEXT
    inside = got.parinfo
    assert inside is not None and inside.applied is not None
    assert [len(v or "") for v in (inside.version, inside.gil_reenabled_by, inside.busy)] == [64, 400, 400]
    applied = inside.applied["V"]
    assert (len(applied.value), len(applied.profile), [len(x) for x in applied.loaded]) == (MAX_TEXT, 400, [MAX_TEXT])


def test_control_characters_are_kept_as_said_for_the_report_to_escape():
    ansi = "\x1b[31mred\x1b[0m\n\x00\u202e"
    got = read(python={"version": ansi}, environ={"OMP_NUM_THREADS": ansi}, errors={"pools": ansi},
               pools=[{"path": ansi, "why": ansi}])
    assert got.python.version == ansi and got.environ["OMP_NUM_THREADS"] == ansi and got.errors["pools"] == ansi
    assert got.pools[ansi].why == ansi


def test_values_of_the_wrong_type_or_out_of_bounds_are_unknown():
    got = read(pid=7, python={"version": 3, "version_info": [3, "14", True, 0], "abiflags": 5, "gil_enabled": "yes",
                              "executable": ["/x"]},
               environ={"A": 3, "B": None, "C": "c"}, modules=[1, "numpy", None, "torch"],
               pools=[{"path": "/a", "count": "3"}, {"path": "/b", "count": True}, {"path": "/c", "count": 0},
                      {"path": "/d", "count": MAX_COUNT + 1}, {"path": "/e", "count": MAX_COUNT},
                      {"path": "/f", "count": 2.0, "version": 1, "why": {"x": 1}}],
               torch={"version": 2, "intra_op": 0, "inter_op": "4", "parallel_info": ["x"], "mkl_available": 1,
                      "mkldnn_available": True, "other": "left out"},
               python_libs=[{"name": "numexpr", "count": -1, "file": 3,
                             "facts": {"a": 1.5, "b": [1], "c": None, "d": True, "e": "s", "f": 3}}],
               parinfo={"version": 1, "runtime_loaded": 1, "state": {"info": "x", "busy": 5}})
    assert got.python == PythonFacts(version_info=(3,))
    assert got.environ == {"C": "c"} and got.modules == frozenset({"numpy", "torch"})
    assert {p: r.count for p, r in got.pools.items()} == {"/a": None, "/b": None, "/c": None, "/d": None,
                                                          "/e": MAX_COUNT, "/f": None}
    assert (got.pools["/f"].version, got.pools["/f"].why) == (None, None)
    assert got.torch == TorchFacts(mkldnn_available=True)
    lib, = got.python_libs
    assert (lib.name, lib.count, lib.file) == ("numexpr", None, None)
    assert lib.facts == {"c": None, "d": True, "e": "s", "f": 3}
    assert got.parinfo is not None and (got.parinfo.version, got.parinfo.runtime_loaded, got.parinfo.info,
                                        got.parinfo.busy, got.parinfo.applied) == (None, False, None, None, None)


@pytest.mark.parametrize(("abiflags", "free_threaded"), [("t", True), ("td", True), ("", False), ("d", False),
                                                         (None, None), (1, None)])
def test_a_free_threaded_build_is_told_from_its_abiflags(abiflags, free_threaded):
    assert read(python={"abiflags": abiflags}).python.free_threaded is free_threaded


@pytest.mark.parametrize(("threads", "count", "listed"), [
    ("x", None, None), ([1], None, None), ([1, 2, 3], None, None), ([2, "x"], 2, None),
    ([-1, []], None, []), ([MAX_ITEMS * 16 + 1, []], None, []), ([MAX_ITEMS * 16, []], MAX_ITEMS * 16, []),
    ([True, []], None, []),
    ([4, [[1, "main", False], [None, "w", True], ["x", "v", 1], [2, 3, True], [3, "short"], "odd", [4, "d", True]]],
     4, [PyThread(1, "main", False), PyThread(None, "w", True), PyThread(None, "v", False), PyThread(4, "d", True)]),
])
def test_the_python_threads_are_a_count_and_rows_each_believed_alone(threads, count, listed):
    got = read(threads=threads)
    assert (got.python_threads, got.threads) == (count, listed)


def test_rows_missing_what_names_them_are_left_out():
    got = read(pools=[{"count": 2}, {"path": 5, "count": 2}, {"path": "/ok", "count": 2}, "odd", 3],
               python_libs=[{"file": "/f"}, {"name": 3}, {"name": "numexpr"}],
               parinfo={"state": {"applied": {"A": {"value": "1", "profile": "p"},
                                              "B": {"value": "1", "loaded": []},
                                              "C": {"profile": "p", "loaded": []},
                                              "D": {"value": "1", "profile": "p", "loaded": "x"},
                                              "E": "odd",
                                              "F": {"value": "2", "profile": "p", "loaded": ["/l", "m"]}}}})
    assert list(got.pools) == ["/ok"] and [m.name for m in got.python_libs] == ["numexpr"]
    assert got.parinfo is not None
    assert got.parinfo.applied == {"F": SetByApply("2", "p", frozenset({"/l", "m"}))}


def test_unknown_keys_are_ignored():
    got = read(extra={"anything": [1, 2]}, python={"version": "3.14.0", "surprise": 1},
               pools=[{"path": "/a", "count": 2, "novel": "x"}], parinfo={"version": "1", "novel": True,
                                                                         "state": {"novel": 1}})
    assert got.python == PythonFacts(version="3.14.0") and got.pools["/a"].count == 2
    assert got.parinfo is not None and got.parinfo.version == "1"


def test_long_lists_are_read_only_to_their_bounds():
    many = [{"path": f"/p{i}", "count": 1} for i in range(MAX_ITEMS + 10)]
    got = read(pools=many, modules=[f"m{i}" for i in range(MAX_ITEMS + 10)],
               environ={f"K{i}": "v" for i in range(MAX_ITEMS + 10)},
               errors={f"e{i}": "why" for i in range(100)},
               python_libs=[{"name": f"lib{i}"} for i in range(100)],
               threads=[1, [[i, "t", False] for i in range(MAX_ITEMS + 10)]],
               python={"version_info": [3, 14, 0, "final", 0]})
    assert len(got.pools) == len(got.modules) == len(got.environ) == MAX_ITEMS
    assert "/p0" in got.pools and f"/p{MAX_ITEMS}" not in got.pools
    assert len(got.errors) == len(got.python_libs) == 64
    assert got.threads is not None and len(got.threads) == MAX_ITEMS
    assert got.python.version_info == (3, 14, 0)


@pytest.mark.parametrize(("raw", "why"), [
    (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    (b'{"token": "t", "pid": 7, "n": ' + b"1" * 5000 + b"}", "not JSON"),
    ('{"token": "t", "pid": 7, "é": 1}'.encode(), "not JSON"),
    (b'{"token": "t", "pid": 7, "x": Infinity}', "Infinity"),
    (b"[1, 2]", "token"),
    (b'{"token": "t", "pid": "7"}', "pid None"),
], ids=["deep", "long number", "not ascii", "infinity", "not an object", "pid as text"])
def test_an_answer_that_cannot_be_read_is_one_bad_answer(raw, why):
    with pytest.raises(BadAnswer, match=why):
        parse(raw, "t", 7)


def test_deep_nesting_inside_a_field_is_not_followed():
    deep: object = "end"
    for _ in range(400):
        deep = [deep]
    got = read(environ={"A": deep, "B": "b"}, python={"version": deep}, pools=[{"path": "/a", "why": deep}],
               parinfo={"state": {"info": {"deep": deep}}})
    assert got.environ == {"B": "b"} and got.python.version is None and got.pools["/a"].why is None
    assert got.parinfo is not None and got.parinfo.info == {"deep": deep}


def test_odd_values_are_left_out_rather_than_turned_into_text():
    """An error that is not a text, a loaded name that is not one, an ``applied`` that is not an
    object: unknown like any odd value (the script writes texts and objects there)."""
    got = read(errors={"pools": 5, "torch": ["x"], "environ": "cannot read"},
               parinfo={"state": {"applied": {"V": {"value": "1", "profile": "p", "loaded": ["/a", 3, None]}}}})
    assert got.errors == {"environ": "cannot read"}
    assert got.parinfo is not None and got.parinfo.applied == {"V": SetByApply("1", "p", frozenset({"/a"}))}
    assert (parsed := read(parinfo={"state": {"applied": 5}}).parinfo) is not None and parsed.applied is None
