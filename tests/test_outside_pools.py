"""``show --pid`` of a process holding Python-module pools (ONNX Runtime, Polars, Arrow): seen from
its mapped files, each pool is a row whose count is unknown from outside, with what its launch
environment predicts said as a prediction; a library the process did not import has no row."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import clean_env

_TARGET = "import onnxruntime, polars, pyarrow, sys; print('ready', flush=True); sys.stdin.read()"


@pytest.mark.pools("onnxruntime", "polars", "pyarrow")
def test_show_pid_predicts_each_imported_librarys_pools_and_marks_them_as_predictions():
    target = subprocess.Popen([sys.executable, "-c", _TARGET], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=clean_env(ORT_INTRA_OP_NUM_THREADS="1", POLARS_MAX_THREADS="3"))
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        out = subprocess.run([sys.executable, "-m", "parinfo", "show", "--pid", str(target.pid), "--json"],
                             env=clean_env(), capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        rows = {r["library"]: r for r in json.loads(out.stdout)["settings"]}
        text = subprocess.run([sys.executable, "-m", "parinfo", "show", "--pid", str(target.pid)],
                              env=clean_env(), capture_output=True, text=True, timeout=120).stdout
    finally:
        assert target.stdin is not None
        target.stdin.close()
        target.wait(timeout=30)
    assert {"onnxruntime", "onnxruntime inter-op", "polars", "pyarrow", "pyarrow io"} <= set(rows)
    assert "duckdb" not in rows and "opencv" not in rows and "tokenizers" not in rows  # not imported
    for row in rows.values():
        assert row["count"] is None and row["source"]["kind"] == "unknown", row
    assert rows["onnxruntime"]["source"]["text"].endswith("would be 1 by env ORT_INTRA_OP_NUM_THREADS=1")
    assert rows["polars"]["source"]["text"].endswith("would be 3 by env POLARS_MAX_THREADS=3")
    assert "unknown (inside the process: --attach reads it); would be 3 by env POLARS_MAX_THREADS=3" in text
