"""A profile's allocator and OpenMP runtime, preloaded into real launched programs (and each instance),
checked inside them: their /proc/self/maps, which file malloc and omp_* resolve to, their variables,
and `parinfo show` there. Cases skip, saying why, where a library is not installed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
from conftest import HAVE_TORCH, clean_env, run_cli, run_py

from parinfo.process import preload as pre

# What a launched program holds: its preload list, the allocator and OpenMP variables, the files of
# the allocators and runtimes mapped, and the file each entry point resolves to (the loader's answer:
# its lookup, or, where that names the program itself, which then holds only a jump slot (a program
# built without PIE, as Debian's python3), the binding the loader recorded for it under LD_DEBUG).
PROBE = textwrap.dedent(r"""
    import ctypes, json, os, sys
    class Info(ctypes.Structure):
        _fields_ = [("f", ctypes.c_char_p), ("b", ctypes.c_void_p), ("s", ctypes.c_char_p), ("a", ctypes.c_void_p)]
    scope = ctypes.CDLL(None)
    def bound(name):
        log = os.environ.get("LD_DEBUG_OUTPUT")
        if not log or not os.path.exists(f"{log}.{os.getpid()}"):
            return None
        # The program's own slot, bound to another file (other files bind the name to the program's
        # slot, and it to itself). The last one: a launcher that exec'd this program wrote its own first.
        found = None
        for line in open(f"{log}.{os.getpid()}", errors="replace"):
            if "binding file " in line and f"normal symbol `{name}'" in line:
                source, target = (part.split(" [", 1)[0] for part in line.split("binding file ", 1)[1].split(" to ", 1))
                if os.path.samefile(source, "/proc/self/exe") and not os.path.samefile(target, "/proc/self/exe"):
                    found = os.path.realpath(target)
        return found
    def resolves(name):
        try:
            fn = getattr(scope, name)
        except AttributeError:
            return None
        info = Info()
        scope.dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info))
        path = os.path.realpath(info.f.decode())
        return (bound(name) or path) if os.path.samefile(path, "/proc/self/exe") else path
    if "torch" in sys.argv[1:]:
        import torch
        (torch.ones(64, 64) @ torch.ones(64, 64)).sum()
    mapped = sorted({os.path.realpath(line.split()[-1]) for line in open("/proc/self/maps")
                     if len(line.split()) == 6 and any(k in line for k in ("malloc", "omp"))})
    names = ("LD_PRELOAD", "PARINFO_PRELOAD", "MALLOC_CONF", "KMP_AFFINITY", "KMP_BLOCKTIME", "OMP_PROC_BIND",
             "OMP_PLACES", "PARINFO_INSTANCE")
    print(json.dumps({"env": {n: os.environ.get(n) for n in names}, "mapped": mapped,
                      "malloc": resolves("malloc"), "omp": resolves("omp_get_max_threads"),
                      "gomp": resolves("GOMP_parallel"), "cpus": sorted(os.sched_getaffinity(0))}))
""")

# A parallel region runs first (it is when an OpenMP runtime binds threads, the main one included).
SHOW = "import sys, torch\n(torch.ones(512, 512) @ torch.ones(512, 512)).sum()\nfrom parinfo.cli import main\n" \
       "sys.argv = ['parinfo', 'show', '--check', '--json']\nmain()\n"


def _found(path: str | None, what: str, install: str) -> str:
    if path is None:
        pytest.skip(f"{what} is not installed here ({install})")
    return os.path.realpath(path)


def jemalloc() -> str:
    rec = pre.allocator("jemalloc")
    return _found(pre.locate_allocator(rec).path, "jemalloc", rec.install)


def tcmalloc() -> str:
    rec = pre.allocator("tcmalloc")
    return _found(pre.locate_allocator(rec).path, "TCMalloc", rec.install)


def iomp() -> str:
    rt = pre.openmp_runtime("intel")
    return _found(pre.locate_runtime(rt).path, "Intel OpenMP", rt.install)


def profile(tmp_path, text: str) -> str:
    path = tmp_path / "serve.yaml"
    path.write_text("version: 1\nname: serve\n" + textwrap.dedent(text))
    return str(path)


def launched(prof: str, *args: str, env: dict | None = None, code: str = PROBE):
    with tempfile.TemporaryDirectory(prefix="parinfo-ld-") as tmp:
        # the loader's record of each binding, for a program whose own lookup names itself (see PROBE)
        env = {**(env or clean_env()), "LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": os.path.join(tmp, "ld")}
        proc = run_cli("apply", prof, "--", sys.executable, "-c", code, *args, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return proc


def probe_of(proc) -> dict:
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_jemalloc_is_preloaded_and_serves_malloc_with_its_settings(tmp_path):
    lib = jemalloc()
    out = probe_of(launched(profile(tmp_path, "allocator: jemalloc\n")))
    assert out["malloc"] == lib and lib in out["mapped"]
    first = out["env"]["LD_PRELOAD"].split(":")[0]
    assert os.path.realpath(first) == lib and out["env"]["PARINFO_PRELOAD"] == first
    assert out["env"]["MALLOC_CONF"] == pre.allocator("jemalloc").server_conf


def test_tcmalloc_is_preloaded_and_serves_malloc(tmp_path):
    lib = tcmalloc()
    out = probe_of(launched(profile(tmp_path, "allocator: tcmalloc\n")))
    assert out["malloc"] == lib and lib in out["mapped"]
    assert out["env"]["MALLOC_CONF"] is None  # TCMalloc has no settings string


def test_a_profile_conf_replaces_the_server_settings(tmp_path):
    jemalloc()
    prof = profile(tmp_path, 'allocator: {name: jemalloc, conf: "background_thread:true,dirty_decay_ms:5000"}\n')
    out = probe_of(launched(prof))
    assert out["env"]["MALLOC_CONF"] == "background_thread:true,dirty_decay_ms:5000"


def test_auto_takes_the_first_installed_and_says_which(tmp_path):
    lib = jemalloc()
    plan = json.loads(run_cli("apply", profile(tmp_path, "allocator: auto\n"), "--json").stdout)
    (choice,) = plan["preload"]
    assert choice["choice"] == "jemalloc" and os.path.realpath(choice["path"]) == lib
    assert choice["why"].startswith("auto: jemalloc, the first installed of jemalloc, tcmalloc")


def test_default_preloads_nothing(tmp_path):
    out = probe_of(launched(profile(tmp_path, "allocator: default\nopenmp: default\n")))
    assert out["env"]["LD_PRELOAD"] is None and out["env"]["PARINFO_PRELOAD"] is None
    assert out["env"]["MALLOC_CONF"] is None and out["env"]["KMP_BLOCKTIME"] is None


def test_intel_openmp_is_preloaded_with_its_wait_setting(tmp_path):
    lib = iomp()
    out = probe_of(launched(profile(tmp_path, "openmp: intel\n")))
    assert out["omp"] == lib and out["gomp"] == lib and lib in out["mapped"]
    assert out["env"]["KMP_BLOCKTIME"] == "1" and out["env"]["KMP_AFFINITY"] is None


def test_passive_waiting_and_the_profiles_own_binding_win(tmp_path):
    iomp()
    prof = profile(tmp_path, "openmp: intel\nenv:\n  OMP_WAIT_POLICY: passive\n  KMP_AFFINITY: compact\n")
    out = probe_of(launched(prof))
    assert out["env"]["KMP_BLOCKTIME"] == "0" and out["env"]["KMP_AFFINITY"] == "compact"


def test_the_users_preload_entries_stay_after_ours_and_a_line_says_so(tmp_path):
    lib, theirs = jemalloc(), tcmalloc()
    proc = launched(profile(tmp_path, "allocator: jemalloc\n"), env=clean_env(LD_PRELOAD=theirs))
    out = probe_of(proc)
    entries = [os.path.realpath(e) for e in out["env"]["LD_PRELOAD"].split(":")]
    assert entries == [lib, theirs] and out["malloc"] == lib
    (line,) = [ln for ln in proc.stderr.splitlines() if "LD_PRELOAD" in ln]
    assert line.startswith("parinfo: LD_PRELOAD: preloading ") and "stay after them" in line
    assert "is loaded but its malloc is not used" in line


def test_the_users_own_malloc_conf_is_kept_and_reported_as_kept(tmp_path):
    jemalloc()
    proc = launched(profile(tmp_path, "allocator: jemalloc\n"), env=clean_env(MALLOC_CONF="narenas:2"))
    assert probe_of(proc)["env"]["MALLOC_CONF"] == "narenas:2"
    assert "parinfo: keeping MALLOC_CONF='narenas:2' from your environment" in proc.stderr


def test_a_nested_launch_replaces_the_outer_launchs_preload(tmp_path):
    lib = jemalloc()
    outer = {pre.PRELOAD_VAR: "/outer/libx.so:/mine/liby.so", pre.MARK_VAR: "/outer/libx.so"}
    value, users = pre.compose_preload([lib], outer)
    assert value == f"{lib}:/mine/liby.so" and users == ["/mine/liby.so"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two instances need two usable CPUs")
def test_each_of_two_instances_has_the_allocator_the_runtime_and_their_settings(tmp_path):
    malloc_lib, omp_lib = jemalloc(), iomp()
    prof = profile(tmp_path, "intra_op: 1\ninter_op: 1\nallocator: jemalloc\nopenmp: intel\n"
                             "instances: {count: 2}\n")
    proc = launched(prof)
    rows = {}
    for line in proc.stdout.splitlines():
        index, _, rest = line.partition("] ")
        if rest.startswith("{"):
            rows[int(index.lstrip("["))] = json.loads(rest)
    assert sorted(rows) == [0, 1]
    for i, out in rows.items():
        assert out["env"]["PARINFO_INSTANCE"] == str(i) and len(out["cpus"]) == 1
        assert out["malloc"] == malloc_lib and out["omp"] == omp_lib
        assert {malloc_lib, omp_lib} <= set(out["mapped"])
        # pinned to its CPU already: Intel's threads spin 1 ms and are not bound one per CPU
        assert out["env"]["KMP_AFFINITY"] is None and out["env"]["KMP_BLOCKTIME"] == "1"
        assert out["env"]["MALLOC_CONF"] == pre.allocator("jemalloc").server_conf
    assert rows[0]["cpus"] != rows[1]["cpus"]


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_torch_under_intel_openmp_passes_show_check_and_says_what_serves(tmp_path):
    malloc_lib, omp_lib = jemalloc(), iomp()
    prof = profile(tmp_path, "intra_op: usable_cpus\ninter_op: 1\naffinity: compact\nallocator: jemalloc\n"
                             "openmp: intel\n")
    proc = run_cli("apply", prof, "--", sys.executable, "-c", SHOW, env=clean_env(), timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr  # show --check inside: no warning
    report = json.loads(proc.stdout)
    # the main thread keeps every CPU of the process: the runtime's threads are not bound one per CPU
    assert report["machine"]["usable_cpus"] == len(os.sched_getaffinity(0))
    backend = report["backend"]
    allocator, runtime = backend["allocator"], backend["openmp_runtime"]
    assert os.path.realpath(allocator["path"]) == malloc_lib and allocator["source"]["kind"] == "profile"
    assert [s["name"] for s in allocator["settings"]] == ["MALLOC_CONF"]
    assert allocator["settings"][0]["source"]["kind"] == "profile"
    assert os.path.realpath(runtime["path"]) == omp_lib and runtime["source"]["kind"] == "profile"
    assert runtime["source"]["detail"] == "serve (openmp)"
    # torch's own libgomp is loaded, but every entry point resolves to Intel's: said, not flagged
    gomp = [p for p in report["pools"] if p["library"] == "libgomp"]
    assert gomp and runtime["bypasses"] == [gomp[0]["filepath"]]
    ids = {f["id"] for f in report["findings"]}
    assert not ids & {"several-openmp", "kmp-duplicate-lib-ok", "openmp-intel-llvm"}
    assert not [f for f in report["findings"] if "libgomp" in f["message"]]  # the bypassed runtime counts nowhere


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_a_runtime_the_user_preloaded_is_theirs_and_still_flagged(tmp_path):
    omp_lib = iomp()
    code = "import sys, torch\nfrom parinfo.cli import main\nsys.argv = ['parinfo', 'show', '--json']\nmain()\n"
    proc = run_py(code, env=clean_env(LD_PRELOAD=omp_lib), timeout=240)
    report = json.loads(proc.stdout)
    runtime = report["backend"]["openmp_runtime"]
    assert runtime["source"]["kind"] == "variable" and runtime["source"]["detail"] == "LD_PRELOAD"
    assert "several-openmp" in {f["id"] for f in report["findings"]}  # not parinfo's set-up: it says so


def test_show_inside_names_the_users_preloaded_allocator_and_glibc_otherwise():
    lib = jemalloc()
    code = "import parinfo, json; print(json.dumps(parinfo.inspect().to_dict()['backend']['allocator']))"
    mine = json.loads(run_py(code, env=clean_env(LD_PRELOAD=lib)).stdout)
    assert mine["name"] == "jemalloc" and mine["source"]["kind"] == "variable"
    plain = json.loads(run_py(code).stdout)
    assert plain["name"] == "glibc" and plain["source"]["kind"] == "library default" and plain["settings"] == []


def test_in_process_apply_cannot_preload_and_says_how(tmp_path):
    jemalloc()
    prof = profile(tmp_path, "allocator: jemalloc\n")
    code = (f"import json, os, parinfo; r = parinfo.apply({prof!r}).lines(); "
            "print(json.dumps([r['skipped'], os.environ.get('MALLOC_CONF')]))")
    skipped, conf = json.loads(run_py(code).stdout)
    (line,) = [s for s in skipped if s.startswith("allocator")]
    assert "not preloaded (nor MALLOC_CONF)" in line and f"parinfo apply {prof} -- COMMAND" in line
    assert conf is None


# -- bad input: one line, exit 2, nothing started -------------------------------------------------

ABSENT = ("import sys\nfrom parinfo.process import preload\npreload.SEARCH[:] = []\n"
          "from parinfo.cli import main\nsys.argv = ['parinfo', 'apply', *sys.argv[1:]]\nmain()\n")


@pytest.mark.parametrize(("text", "line", "install"), [
    ("allocator: jemalloc\n", 3, "apt-get install libjemalloc2"),
    ("allocator: {name: tcmalloc}\n", 3, "apt-get install libtcmalloc-minimal4"),
    ("openmp: intel\n", 3, "pip install intel-openmp"),
    ("openmp: llvm\n", 3, "apt-get install libomp5"),
])
def test_a_library_not_installed_names_what_to_install(tmp_path, text, line, install):
    prof = profile(tmp_path, text)
    proc = run_cli_absent(prof, "--", "true")
    assert proc.returncode == 2 and proc.stdout == ""
    (msg,) = proc.stderr.splitlines()
    assert msg.startswith(f"parinfo: error: {prof}:{line}:") and "is not installed" in msg and install in msg


def run_cli_absent(*args: str) -> subprocess.CompletedProcess:
    """``parinfo ARGS`` where no allocator or OpenMP runtime can be found (the search is emptied)."""
    return subprocess.run([sys.executable, "-c", ABSENT, *args], env=clean_env(), capture_output=True, text=True,
                          timeout=60)


def test_auto_with_nothing_installed_preloads_nothing_and_notes_what_to_install(tmp_path):
    proc = run_cli_absent(profile(tmp_path, "allocator: auto\n"), "--json")
    plan = json.loads(proc.stdout)
    assert plan["preload"][0]["path"] is None
    assert any("none of jemalloc, tcmalloc is installed" in n and "libjemalloc2" in n for n in plan["notes"])


@pytest.mark.parametrize(("text", "where", "words"), [
    ("env:\n  LD_PRELOAD: /x/libjemalloc.so.2\n", ":4:3:", "LD_PRELOAD is set from 'allocator' or 'openmp'"),
    ("env:\n  MALLOC_CONF: narenas:2\n", ":4:3:", "MALLOC_CONF is set from 'allocator'"),
    ("allocator: {name: tcmalloc, conf: 'x:1'}\n", ":3:", "allocator tcmalloc takes no settings string"),
    ("allocator: {name: jemalloc, conf: 'not a conf'}\n", ":3:", "is not a MALLOC_CONF string"),
    ("allocator: jemaloc\n", ":3:12:", "did you mean 'jemalloc'?"),
    ("openmp: iomp\n", ":3:9:", "unknown openmp 'iomp'"),
])
def test_bad_preload_keys_give_one_line_and_exit_2(tmp_path, text, where, words):
    prof = profile(tmp_path, text)
    proc = run_cli("apply", prof)
    assert proc.returncode == 2 and proc.stdout == ""
    (msg,) = proc.stderr.splitlines()
    assert msg.startswith(f"parinfo: error: {prof}{where}") and words in msg


def test_debians_libiomp5_link_to_llvm_is_not_taken_for_intels(tmp_path, monkeypatch):
    (tmp_path / "libomp.so.5").write_bytes(b"")
    (tmp_path / "libiomp5.so").symlink_to("libomp.so.5")
    monkeypatch.setattr(pre, "SEARCH", [("a test folder", lambda: [str(tmp_path)])])
    found = pre.locate_runtime(pre.openmp_runtime("intel"))
    assert found.path is None
    assert found.rejected == ((str(tmp_path / "libomp.so.5"), "LLVM OpenMP (libomp)"),)
    llvm = pre.locate_runtime(pre.openmp_runtime("llvm"))
    assert llvm.path == str(tmp_path / "libomp.so.5") and llvm.where == "a test folder"


def test_export_puts_ours_first_and_keeps_the_users_entries(tmp_path):
    lib = jemalloc()
    lines = run_cli("apply", profile(tmp_path, "allocator: jemalloc\n"), "--export").stdout
    shell = lines + 'printf "%s\\n%s\\n" "$LD_PRELOAD" "$PARINFO_PRELOAD"\n'
    for theirs, want in (("/mine/libhook.so", ":/mine/libhook.so"), ("", "")):
        env = clean_env(LD_PRELOAD=theirs) if theirs else clean_env()
        out = subprocess.run(["bash", "-c", shell], env=env, capture_output=True, text=True, timeout=30)
        preload, mark = out.stdout.splitlines()
        assert os.path.realpath(mark) == lib and preload == mark + want
