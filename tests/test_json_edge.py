"""``dict[str, Any]`` only at the JSON edge (issue 37): a dict whose shape parinfo knows is a record or
a TypedDict, so the shape is declared once; what is left is the one place a payload becomes JSON or
is read from it, or a free-form JSON value (a user's profile). Each place left is listed below with
why; a new one fails, and so does an entry whose place has gone (the list only shrinks).
"""
from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "parinfo"
PATTERN = re.compile(r"\b(?:typing\.)?[Dd]ict\[\s*str\s*,\s*(?:typing\.)?Any\s*\]")

#: The issue's bound on what stays for good (the temporary headings below are cut by their branches).
MOST_AT_THE_EDGE = 25

#: file:function (or file:Class, for a field) -> (occurrences, why it is a JSON edge).
JSON_EDGES: dict[str, tuple[int, str]] = {
    "diagnostics/model.py:Report.to_dict": (1, "the `parinfo show --json` payload: the report's JSON form"),
    "host/model.py:HostReport.to_dict": (1, "the `parinfo host --json` payload"),
    "fleet/report.py:FleetReport.to_dict": (1, "the `parinfo fleet show --json` payload"),
    "tuning/result.py:TuneResult.to_dict": (1, "the `parinfo tune --json` payload"),
    "runtime/state.py:Runtime.info": (1, "`parinfo.runtime.info()`: the runtime snapshot's JSON form, as "
                                         "documented (docs/runtime.md) and as the attach script sends it"),
    "runtime/state.py:Runtime.refresh": (1, "`parinfo.refresh()`: `info()['follow']`, the same JSON form"),
    "fleet/probe.py:worker_row": (1, "the row a fleet worker sends the client: a WorkerRow's JSON, read back "
                                     "leniently by FleetReport.from_rows"),
    "fleet/probe.py:ProfileDocument": (1, "`body`: the user's profile as free-form JSON data (its file's "
                                          "mapping), checked and resolved by each worker"),
    "diagnostics/report_schema.py:build_schema": (1, "the report's JSON Schema document, written to "
                                                      "report.schema.json"),
    "records/schema.py:<module>": (1, "`Schema`: a JSON Schema fragment, the generator's output"),
    "profiles/value_rules.py:<module>": (1, "`Schema`: a profile JSON Schema fragment, the generator's output"),
    "profiles/model.py:Profile.document": (1, "the profile as the YAML/JSON document a fleet sends its workers"),
    "profiles/yaml_nodes.py:_Builder.value": (1, "a YAML mapping as read from the user's file, before it is "
                                                  "checked into a Profile"),
    "records/convert.py:dump": (1, "the one converter's JSON object being written"),
    "records/source.py:Source.to_json": (2, "a Source's JSON object (the annotation and the value built)"),
    "process/library_parts.py:NativeReads.to_data": (1, "the native getters as JSON data written into the "
                                                         "attach script, which imports nothing of parinfo"),
    "outside/attach/__init__.py:script_data": (1, "the attach script's DATA, written into the script as a "
                                                  "literal (its reader declares it: in_target._Data)"),
    "outside/attach/__init__.py:script": (1, "the same DATA, formatted into the script's text"),
    "outside/attach/result.py:ParinfoRead": (1, "`info`: the target's `parinfo.runtime.info()` JSON, carried "
                                                "as it came"),
}

ALLOWED = JSON_EDGES


def _owners(tree: ast.Module) -> list[tuple[int, int, str]]:
    """(first line, last line, qualified name) of every class and function, outermost first."""
    spans: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                spans.append((first, child.end_lineno or child.lineno, name))
                visit(child, f"{name}.")

    visit(tree, "")
    return spans


@functools.cache
def occurrences(package: Path = PACKAGE) -> Counter[str]:
    """``dict[str, Any]`` (or ``Dict[str, Any]``) in the package, by file:innermost function or class."""
    found: Counter[str] = Counter()
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if not PATTERN.search(text):
            continue
        spans = _owners(ast.parse(text))
        rel = path.relative_to(package).as_posix()
        for number, line in enumerate(text.splitlines(), 1):
            hits = len(PATTERN.findall(line))
            if hits:
                inside = [name for first, last, name in spans if first <= number <= last]
                found[f"{rel}:{inside[-1] if inside else '<module>'}"] += hits
    return found


def test_dict_str_any_only_where_listed():
    found = occurrences()
    extra = {k: n for k, n in found.items() if n > ALLOWED.get(k, (0, ""))[0]}
    assert not extra, ("dict[str, Any] outside the JSON edge (declare the shape: a record, a TypedDict, "
                       f"or explicit parameters): {extra}")


def test_no_stale_entry():
    found = occurrences()
    stale = {k: (n, found.get(k, 0)) for k, (n, _) in ALLOWED.items() if found.get(k, 0) < n}
    assert not stale, f"listed (count, now found) but gone: lower or remove these entries: {stale}"


def test_what_stays_for_good_is_within_the_issue_bound():
    assert sum(n for n, _ in JSON_EDGES.values()) <= MOST_AT_THE_EDGE
    assert all(why.strip() for _, why in ALLOWED.values())


def test_the_scan_sees_every_spelling(tmp_path):
    (tmp_path / "m.py").write_text(
        "from typing import Any, Dict\n"
        "import typing\n"
        "x: dict[str, Any] = {}\n"
        "class C:\n"
        "    f: Dict[str,Any]\n"
        "    def m(self, a: typing.Dict[str, typing.Any]) -> dict[str, Any]: ...\n"
        "def g() -> dict[str, object]: ...\n"
        "def h() -> dict[str, int]: ...\n")
    assert occurrences(tmp_path) == Counter({"m.py:<module>": 1, "m.py:C": 1, "m.py:C.m": 2})
