"""docs/libraries.md: one table, every library of the registry, each row naming the tests behind it."""
from __future__ import annotations

import re
from pathlib import Path

from parinfo.process import libraries as reg

DOC = Path(__file__).resolve().parent.parent / "docs" / "libraries.md"


def _rows() -> list[str]:
    return [line for line in DOC.read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and not line.startswith("| library") and not line.startswith("|---")]


def test_every_python_library_of_the_registry_has_a_row() -> None:
    text = " ".join(_rows()).lower()
    missing = [lib.label for lib in reg.python_libraries()
               if lib.label.lower().split()[0] not in text and str(lib.module).lower() not in text]
    assert not missing, f"docs/libraries.md has no row for {missing}"


def test_every_row_names_tests_that_exist() -> None:
    root = DOC.parent.parent
    for row in _rows():
        named = re.findall(r"`(tests/test_[a-z0-9_]+\.py)`", row)
        assert named, f"a row of docs/libraries.md names no test: {row[:80]}"
        assert all((root / path).is_file() for path in named), named
