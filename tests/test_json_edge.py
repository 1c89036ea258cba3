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
}

#: Owned by the handle branch (parinfo/outside/): left to it, each at the attach script's JSON edge.
HANDLE_BRANCH: dict[str, tuple[int, str]] = {
    "outside/attach/__init__.py:script_data": (1, "the attach script's DATA, written into the script as a "
                                                  "literal (its reader declares it: in_target._Data)"),
    "outside/attach/__init__.py:script": (1, "the same DATA, formatted into the script's text"),
    "outside/attach/result.py:ParinfoRead": (1, "`info`: the target's `parinfo.runtime.info()` JSON, carried "
                                                "as it came"),
    "outside/attach/sender.py:_interpreter": (1, "not a JSON edge: subprocess's user/group options; the handle "
                                                 "branch rewrites this function's `| str` (a TypedDict then)"),
}

#: Rewritten by the library branch (the registry becomes library classes): the lead trims after merging.
LIBRARY_BRANCH: dict[str, tuple[int, str]] = {
    "process/library_entries.py:_numba_context": (1, "a library's context facts"),
    "process/library_entries.py:_numexpr_context": (1, "a library's context facts"),
    "process/library_record.py:Library": (1, "the `context` callable's facts"),
    "process/library_parts.py:NativeReads.to_data": (1, "the attach script's native getters"),
}

#: Cut by the profiles and schema branches (parinfo/profiles/, parinfo/records/): the lead trims
#: these after merging them.
PROFILES_AND_SCHEMA_BRANCHES: dict[str, tuple[int, str]] = {
    "profiles/applying.py:apply": (1, "typed profiles: the profiles branch"),
    "profiles/key_rules.py:Affinity.shape": (1, "typed profiles: the profiles branch"),
    "profiles/key_rules.py:AllocatorRule.shape": (1, "typed profiles: the profiles branch"),
    "profiles/key_rules.py:Instances.check": (2, "typed profiles: the profiles branch"),
    "profiles/key_rules.py:Instances.shape": (1, "typed profiles: the profiles branch"),
    "profiles/layout.py:Layout._by_count": (1, "typed profiles: the profiles branch"),
    "profiles/layout.py:Layout.blocks": (1, "typed profiles: the profiles branch"),
    "profiles/layout.py:Layout.instance_spec": (2, "typed profiles: the profiles branch"),
    "profiles/loading.py:_extend": (1, "typed profiles: the profiles branch"),
    "profiles/model.py:Profile": (1, "typed profiles: the profiles branch"),
    "profiles/model.py:Profile.__init__": (1, "typed profiles: the profiles branch"),
    "profiles/schema.py:build_schema": (1, "typed profiles: the profiles branch"),
    "profiles/validation.py:DocumentChecker.keys": (1, "typed profiles: the profiles branch"),
    "profiles/validation.py:validate_document": (1, "typed profiles: the profiles branch"),
    "profiles/value_rules.py:Checker.keys": (1, "typed profiles: the profiles branch"),
    "profiles/value_rules.py:Choice.shape": (1, "typed profiles: the profiles branch"),
    "profiles/value_rules.py:Count.definition": (1, "typed profiles: the profiles branch"),
    "profiles/value_rules.py:Count.shape": (1, "typed profiles: the profiles branch"),
    "profiles/value_rules.py:Counts.shape": (1, "typed profiles: the profiles branch"),
    "profiles/value_rules.py:Env.shape": (1, "typed profiles: the profiles branch"),
    "profiles/value_rules.py:Rule.schema": (1, "typed profiles: the profiles branch"),
    "profiles/value_rules.py:Rule.shape": (1, "typed profiles: the profiles branch"),
    "profiles/value_rules.py:Text.shape": (2, "typed profiles: the profiles branch"),
    "profiles/value_rules.py:Version.shape": (1, "typed profiles: the profiles branch"),
    "profiles/yaml_nodes.py:_Builder.value": (1, "typed profiles: the profiles branch"),
    "records/convert.py:dump": (1, "records declared once: the schema branch"),
    "records/reading.py:<module>": (1, "records declared once: the schema branch"),
    "records/reading.py:_hints": (1, "records declared once: the schema branch"),
    "records/reading.py:_record": (1, "records declared once: the schema branch"),
    "records/record.py:_plain_fields": (1, "records declared once: the schema branch"),
    "records/source.py:Source.to_json": (2, "records declared once: the schema branch"),
}

TEMPORARY = (HANDLE_BRANCH, LIBRARY_BRANCH, PROFILES_AND_SCHEMA_BRANCHES)
ALLOWED = {k: v for table in (JSON_EDGES, *TEMPORARY) for k, v in table.items()}


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
