"""parinfo.apply() before a framework is imported: the framework gets the profile's counts at import.

Each case runs in a fresh process with the real torch (or numpy). Ground truth is torch's own
getters and ``torch.__config__.parallel_info()``; the sources are checked as kinds and details in
``parinfo.inspect()`` and as words in ``parinfo.parallel_info()``. The profile's counts (3 and 3)
differ from torch's defaults on this machine's 2 CPUs, so a count left to torch shows.
"""
from __future__ import annotations

import json
import sys
import textwrap

import pytest
from conftest import HAVE_NUMPY, clean_env, run_cli, run_py

PROFILE = '{"version": 1, "name": "later", "intra_op": 3, "inter_op": 3}'

READ = """
def rows():
    import parinfo
    out = {}
    for row in parinfo.inspect().to_dict()["settings"]:
        out[row["library"]] = {"count": row["count"], "kind": row["source"]["kind"],
                               "detail": row["source"]["detail"]}
    return out

def aten():
    import torch
    return [line.strip() for line in torch.__config__.parallel_info().splitlines() if "at::get_num" in line]
"""


def _run(body: str, **env: str) -> tuple[dict, str]:
    code = "import json, os, sys\n" + READ + textwrap.dedent(body)
    proc = run_py(code, env=clean_env(**env), timeout=120)
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.torch
def test_torch_imported_after_apply_gets_both_counts_at_import_with_the_profile_as_source():
    out, err = _run(f"""
        import parinfo
        r = parinfo.apply({PROFILE}).lines()
        watching = sum(type(f).__name__ == "ImportWatcher" for f in sys.meta_path)
        import torch
        left = sum(type(f).__name__ == "ImportWatcher" for f in sys.meta_path)
        print(json.dumps({{"r": r, "intra": torch.get_num_threads(), "inter": torch.get_num_interop_threads(),
                          "aten": aten(), "rows": rows(), "info": str(parinfo.parallel_info()),
                          "watching": watching, "left": left}}))
    """)
    assert (out["intra"], out["inter"]) == (3, 3)
    assert out["aten"] == ["at::get_num_threads() : 3", "at::get_num_interop_threads() : 3"]
    assert (out["watching"], out["left"]) == (1, 0)  # one watch, gone once torch was imported
    r = out["r"]
    assert r["not_in_force"] == [] and not any("torch" in s for s in r["skipped"])
    (line,) = r["at_import"]
    assert "torch.set_num_interop_threads(3) and torch.set_num_threads(3) when `import torch` finishes" in line
    rows = out["rows"]
    assert rows["torch intra-op"] == {"count": 3, "kind": "profile", "detail": "later (libraries.torch)"}
    assert rows["torch inter-op"] == {"count": 3, "kind": "profile", "detail": "later (inter_op)"}
    said = "torch inter-op : 3 (profile later (inter_op), set by parinfo.apply() when torch was imported)"
    assert said in out["info"]
    assert "parinfo:" not in err


@pytest.mark.torch
def test_torch_imported_before_apply_is_set_at_once_as_before():
    out, _ = _run(f"""
        import torch, parinfo
        r = parinfo.apply({PROFILE}).lines()
        watching = sum(type(f).__name__ == "ImportWatcher" for f in sys.meta_path)
        print(json.dumps({{"r": r, "intra": torch.get_num_threads(), "inter": torch.get_num_interop_threads(),
                          "rows": rows(), "watching": watching}}))
    """)
    assert (out["intra"], out["inter"]) == (3, 3)
    r = out["r"]
    assert "torch.set_num_threads(3)" in r["applied"] and "torch.set_num_interop_threads(3)" in r["applied"]
    assert r["at_import"] == [] and r["not_in_force"] == [] and out["watching"] == 0
    assert out["rows"]["torch inter-op"] == {"count": 3, "kind": "profile", "detail": "later (inter_op)"}
    assert out["rows"]["torch intra-op"] == {"count": 3, "kind": "profile", "detail": "later (libraries.torch)"}


@pytest.mark.torch
def test_a_second_apply_before_the_import_replaces_the_first_ones_counts():
    # one watch: the second apply() takes the first one's place
    out, _ = _run(f"""
        import parinfo
        parinfo.apply({PROFILE})
        parinfo.apply({{"version": 1, "name": "second", "intra_op": 1, "inter_op": 3}})
        import torch
        print(json.dumps({{"intra": torch.get_num_threads(), "inter": torch.get_num_interop_threads(),
                          "rows": rows()}}))
    """)
    assert (out["intra"], out["inter"]) == (1, 3)  # the runtime's inter-op count is set once: same here
    assert out["rows"]["torch intra-op"]["detail"] == "second (libraries.torch)"
    assert out["rows"]["torch inter-op"]["detail"] == "second (inter_op)"


@pytest.mark.torch
def test_the_users_own_variable_for_torch_is_kept_and_said_at_apply_time():
    out, _ = _run(f"""
        import parinfo
        r = parinfo.apply({PROFILE}).lines()
        import torch
        print(json.dumps({{"r": r, "intra": torch.get_num_threads(), "inter": torch.get_num_interop_threads(),
                          "rows": rows()}}))
    """, MKL_NUM_THREADS="1")
    assert (out["intra"], out["inter"]) == (1, 3)
    assert "torch intra-op: at import torch follows MKL_NUM_THREADS='1' set by the user" in out["r"]["skipped"]
    (line,) = out["r"]["at_import"]
    assert "torch.set_num_interop_threads(3) when" in line and "set_num_threads" not in line
    assert out["rows"]["torch intra-op"]["kind"] == "variable"
    assert out["rows"]["torch inter-op"]["kind"] == "profile"


@pytest.mark.torch
def test_the_programs_own_inter_op_call_after_the_import_does_not_raise():
    out, err = _run(f"""
        import parinfo
        parinfo.apply({PROFILE})
        import torch
        torch.set_num_interop_threads(2)
        print(json.dumps({{"inter": torch.get_num_interop_threads()}}))
    """)
    assert out["inter"] == 3
    lines = [line for line in err.splitlines() if line.startswith("parinfo:")]
    assert lines == [lines[0]] and lines[0].startswith(
        "parinfo: torch inter-op threads stay 3 (profile later), not the 2 this program asked for: "
        "parinfo.apply() set them")


@pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")
def test_numpy_loaded_after_apply_reads_the_profiles_count():
    out, _ = _run("""
        import parinfo
        r = parinfo.apply({"version": 1, "name": "later", "intra_op": 1, "inter_op": 1}).lines()
        import numpy
        from threadpoolctl import threadpool_info
        blas = [p["num_threads"] for p in threadpool_info() if p["internal_api"] == "openblas"]
        print(json.dumps({"blas": blas, "rows": rows(), "at_import": r["at_import"]}))
    """)
    assert out["blas"] and set(out["blas"]) == {1}
    assert out["rows"]["openblas"] == {"count": 1, "kind": "profile", "detail": "later (OPENBLAS_NUM_THREADS)"}
    # torch is not imported here: its counts wait for its import, said at apply() time
    assert len(out["at_import"]) == 1


@pytest.mark.torch
def test_a_launched_program_names_the_profile_as_the_source_of_what_its_hook_set(tmp_path):
    prof = tmp_path / "later.yaml"
    prof.write_text("version: 1\nname: later\nintra_op: 3\ninter_op: 3\n")
    code = "import json, sys\n" + READ + (
        "import torch\nprint(json.dumps({'inter': torch.get_num_interop_threads(), 'rows': rows()}))\n")
    proc = run_cli("apply", str(prof), "--", sys.executable, "-c", code, env=clean_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["inter"] == 3
    assert out["rows"]["torch inter-op"] == {"count": 3, "kind": "profile", "detail": "later (inter_op)"}
    assert out["rows"]["torch intra-op"] == {"count": 3, "kind": "profile", "detail": "later (libraries.torch)"}
