"""The value a reader returns in place of a fact it could not read."""
from __future__ import annotations

from parinfo.records.unknown import Unknown, because, describe


def test_unknown_carries_its_reason_and_says_it_only_when_shown() -> None:
    u = Unknown("permission denied")
    assert u.why == "permission denied"
    assert str(u) == "unknown (permission denied)"
    assert u == Unknown("permission denied") and u != Unknown("gone") and u != "unknown (permission denied)"
    assert len({u, Unknown("permission denied")}) == 1


def test_unknown_of_an_error_names_its_type_and_message() -> None:
    u = Unknown.of(PermissionError(13, "Permission denied"))
    assert u.why == describe(PermissionError(13, "Permission denied"))
    assert str(u) == because(PermissionError(13, "Permission denied"))
    assert Unknown.of(TimeoutError()).why == "TimeoutError"
