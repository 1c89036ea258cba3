"""Which variables ONNX Runtime reads depends on its version (1.29 on): for another process, that is
the version it imported (read inside it by attach), or unknown from outside, never the version of the
onnxruntime parinfo's own process imported."""
from __future__ import annotations

import sys
import types

import pytest

from parinfo.diagnostics.attached import onnxruntime_version
from parinfo.outside.attach.result import Answer
from parinfo.process import libraries as reg
from parinfo.process.library_inference import onnxruntime_version_in_view
from parinfo.records.convert import load
from parinfo.records.unknown import Unknown


@pytest.fixture
def own_old_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process imported onnxruntime 1.28 (reads none of its variables)."""
    module = types.ModuleType("onnxruntime")
    module.__version__ = "1.28.0"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "onnxruntime", module)


def test_the_version_in_view_decides_not_this_processs(own_old_onnxruntime: None) -> None:
    ort = reg.library("onnxruntime")
    assert not ort.reads_variables() and ort.count_vars == ()  # this process: its own 1.28
    with onnxruntime_version_in_view("1.32.0"):
        assert ort.reads_variables() and ort.count_vars == ("ORT_INTRA_OP_NUM_THREADS",)
    with onnxruntime_version_in_view(Unknown("read from outside")):
        assert ort.reads_variables()  # cannot be told: as the versions that read them
    with onnxruntime_version_in_view("1.28.3"):
        assert not ort.reads_variables()
    assert not ort.reads_variables()  # left as it was


def _answer(python_libs: list[dict[str, object]]) -> Answer:
    return load(Answer, {"pid": 1, "python": {}, "environ": {}, "modules": [], "python_threads": 1, "threads": [],
                         "pools": {}, "torch": None, "python_libs": python_libs, "parinfo": None, "errors": {}},
                strict=False)


def test_the_attached_answer_gives_the_targets_version() -> None:
    found = _answer([{"name": "onnxruntime", "facts": {"__version__": "1.32.0"}}])
    assert onnxruntime_version(found) == "1.32.0"
    assert isinstance(onnxruntime_version(_answer([{"name": "onnxruntime", "facts": {}}])), Unknown)
    assert str(onnxruntime_version(_answer([]))) == "unknown (onnxruntime is not imported there)"


def test_a_report_of_another_process_never_uses_this_processs_version(own_old_onnxruntime: None,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``inspect(pid=...)`` from outside: what the reader sees is Unknown, not this process's 1.28."""
    import parinfo.diagnostics.report as report

    seen: list[bool] = []

    def another(*_: object) -> None:
        seen.append(reg.library("onnxruntime").reads_variables())

    monkeypatch.setattr(report, "_another", another)
    report.inspect(pid=1)
    assert seen == [True]
