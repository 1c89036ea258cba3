"""Every PARINFO_* variable and every boolean is read one way, by its kind in the registry
(parinfo.process.variables.read_setting): the runtime's readers agree with the report's check of
the same value."""
from __future__ import annotations

import pytest

from parinfo.process.variables import read_setting, validate
from parinfo.runtime import follow, settings
from parinfo.runtime.adaptive import Adaptive

OFF = ["0", "false", "FALSE", "no", "Off", " off "]
ON = ["1", "true", "TRUE", "yes", "on"]
INVALID = ["abc", "", "2", "yes please"]


@pytest.mark.parametrize("raw", OFF + ON + INVALID)
def test_the_runtimes_boolean_readers_agree_with_the_reports_check(monkeypatch, raw):
    monkeypatch.setenv("PARINFO_FOLLOW_QUOTA", raw)
    monkeypatch.setenv("PARINFO_ADAPTIVE", raw)
    on, source = follow._enabled()
    adaptive = Adaptive().enabled
    problem = validate("PARINFO_FOLLOW_QUOTA", raw)
    if raw in OFF:
        assert (on, adaptive, problem) == (False, False, None)
        assert source.text == f"env PARINFO_FOLLOW_QUOTA={raw}"
    elif raw in ON:
        assert (on, adaptive, problem) == (True, True, None)
    else:  # invalid: passed over, the default (on) stays, and the source says what was ignored
        assert on and adaptive and problem is not None
        assert source.text == f"default (ignored invalid PARINFO_FOLLOW_QUOTA={raw!r})"


@pytest.mark.parametrize("raw, backend, source", [
    (None, "native", "default"),
    ("sequential", "sequential", "env PARINFO_BACKEND"),
    ("Native", "native", "env PARINFO_BACKEND"),
    ("threads", "native", "default (ignored invalid PARINFO_BACKEND='threads')"),
])
def test_the_backend_is_read_by_its_kind(monkeypatch, raw, backend, source):
    if raw is None:
        monkeypatch.delenv("PARINFO_BACKEND", raising=False)
    else:
        monkeypatch.setenv("PARINFO_BACKEND", raw)
    got, said = settings._read_backend()
    assert (got, said.text) == (backend, source)


def test_a_count_variable_reads_as_an_int_and_a_bad_one_as_invalid():
    assert read_setting("PARINFO_NUM_THREADS", {"PARINFO_NUM_THREADS": " 3 "}).value == 3
    bad = read_setting("PARINFO_NUM_THREADS", {"PARINFO_NUM_THREADS": "٣"})
    assert bad.value is None and bad.problem and bad.raw == "٣"
    assert read_setting("PARINFO_NUM_THREADS", {}).raw is None
