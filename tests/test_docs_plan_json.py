"""docs/profiles.md lists the keys of `parinfo apply PROFILE --json` in a table; every key it names
is in the real output (and every top-level key of the output is in the table), so the doc cannot
drift from the plan again."""
from __future__ import annotations

import json
import re

from conftest import REPO, run_cli

HEADING = "### The plan as JSON"


def documented_keys() -> list[str]:
    """The key paths of the table under the heading: each backticked word of a row's first cell."""
    lines = (REPO / "docs" / "profiles.md").read_text().splitlines()
    start = lines.index(HEADING)
    table: list[str] = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    rows = table[2:]  # past the header and its rule
    keys = [k for row in rows for k in re.findall(r"`([^`]+)`", row.split("|")[1])]
    assert len(keys) > 10, table
    return keys


def lookup(doc: object, path: str) -> bool:
    """Whether ``path`` (``a.b``, ``a[].b``) is in ``doc``; a list's key is looked for in its items."""
    head, _, rest = path.partition(".")
    listed = head.endswith("[]")
    name = head.removesuffix("[]")
    if not isinstance(doc, dict) or name not in doc:
        return False
    value = doc[name]
    if listed:
        return isinstance(value, list) and bool(value) and all(lookup(item, rest) if rest else True for item in value)
    return lookup(value, rest) if rest else True


def test_every_key_the_doc_names_is_in_the_plans_json(tmp_path):
    path = tmp_path / "p.yaml"  # one instance and one preload entry, so their keys show up
    path.write_text("version: 1\nname: p\nallocator: default\nopenmp: default\ninstances: 1\nmemory: local\n")
    proc = run_cli("apply", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    keys = documented_keys()
    assert [k for k in keys if not lookup(plan, k)] == []
    assert set(plan) - {k.split(".")[0].removesuffix("[]") for k in keys} == set()
