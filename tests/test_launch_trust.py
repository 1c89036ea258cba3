"""The launcher run by root against what another user (nobody) prepared, in real processes: log
folders (issue 36), a full log file system, profile values that reach an environment or a shell,
preloads from folders another user can write, and no process left behind."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import clean_env, run_cli

as_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
NOBODY = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]
SAY = "import os; print('ran', os.environ['PARINFO_INSTANCE'])"


@pytest.fixture
def profile(tmp_path):
    def write(text: str = "instances: 2\n") -> str:
        path = tmp_path / "p.yaml"
        path.write_text("version: 1\nname: trust\nintra_op: 1\ninter_op: 1\n" + text)
        return str(path)
    return write


def apply(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_cli("apply", *args, env=env or clean_env(), timeout=120)


@pytest.fixture
def nobodys() -> Iterator[Path]:
    """A folder of user nobody's, where nobody may make what it likes (under /tmp, which nobody can reach)."""
    folder = Path(tempfile.mkdtemp(prefix="parinfo-nobody-", dir="/tmp"))
    os.chown(folder, 65534, 65534)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_nobody(*cmd: str) -> None:
    subprocess.run([*NOBODY, *cmd], check=True, timeout=30)


@as_root
def test_a_log_in_another_users_folder_linked_to_a_root_file_is_refused(profile, nobodys, tmp_path):
    victim = tmp_path / "root-owned"
    victim.write_text("precious\n")
    logs = nobodys / "logs"
    as_nobody("mkdir", str(logs))
    as_nobody("ln", "-s", str(victim), str(logs / "instance-0.log"))
    proc = apply(profile(), "--log-dir", str(logs), "--", sys.executable, "-c", SAY)
    assert proc.returncode == 2 and "ran" not in proc.stdout, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"parinfo: error: --log-dir {logs}: cannot write a log there: {nobodys}")
    assert "owned by uid 65534" in proc.stderr
    assert "mkdir -m 700" in proc.stderr
    assert victim.read_text() == "precious\n"


@as_root
def test_a_log_folder_that_is_another_users_link_to_a_root_folder_is_refused(profile, tmp_path):
    target = tmp_path / "etc-like"
    target.mkdir()
    link = Path(tempfile.mktemp(prefix="parinfo-logs-", dir="/tmp"))  # /tmp: sticky, nobody may make links there
    as_nobody("ln", "-s", str(target), str(link))
    try:
        proc = apply(profile(), "--log-dir", str(link), "--", sys.executable, "-c", SAY)
    finally:
        link.unlink()
    assert proc.returncode == 2 and "ran" not in proc.stdout, proc.stderr
    assert f"{link} is a link owned by uid 65534" in proc.stderr and proc.stderr.count("\n") == 1
    assert list(target.iterdir()) == []


def test_a_log_folder_others_may_write_is_refused(profile, tmp_path):
    logs = tmp_path / "open"
    logs.mkdir()
    logs.chmod(0o777)
    proc = apply(profile(), "--log-dir", str(logs), "--", sys.executable, "-c", SAY)
    assert proc.returncode == 2 and "writable by every user" in proc.stderr
    assert list(logs.iterdir()) == []


@contextlib.contextmanager
def tiny_tmpfs(where: Path) -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k,mode=0700", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_log_file_system_is_a_warning_and_the_exit_is_the_instances(profile, tmp_path):
    code = "import sys; sys.stdout.write('x' * 40000 + '\\n'); sys.stdout.flush(); print('done')"
    with tiny_tmpfs(tmp_path / "small") as logs:
        proc = apply(profile(), "--log-dir", str(logs), "--", sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("parinfo: warning: cannot write")]
    assert warnings and all("No space left on device" in w for w in warnings), proc.stderr
    assert sorted(line for line in proc.stdout.splitlines() if "done" in line) == ["[0] done", "[1] done"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_an_output_that_cannot_be_written_is_a_warning_and_the_exit_is_the_instances(profile):
    cmd = [sys.executable, "-m", "parinfo", "apply", profile(), "--", sys.executable, "-c", "print('x' * 10)"]
    with open("/dev/full", "w") as full:
        proc = subprocess.run(cmd, env=clean_env(), stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "parinfo: warning: cannot write the output: No space left on device" in proc.stderr
    assert "Traceback" not in proc.stderr and "error" not in proc.stderr


@pytest.mark.parametrize(("conf", "shown"), [("background_thread:true\\0x", "U+0000 (NUL)"),
                                             ("background_thread:\\e[31mtrue", "U+001B (ESC)"),
                                             ("background_thread:tr ue", "is not a MALLOC_CONF string")])
@pytest.mark.parametrize("how", [["--export"], ["--", "true"], ["--instances", "2", "--", "true"]])
def test_an_allocator_setting_with_a_control_character_is_refused_at_its_line(tmp_path, conf, shown, how):
    prof = tmp_path / "p.yaml"
    prof.write_text(f'version: 1\nname: x\nallocator: {{name: jemalloc, conf: "{conf}"}}\n')
    proc = apply(str(prof), *how)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.startswith(f"parinfo: error: {prof}:3:") and shown in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def _plan(name: str, env: dict[str, str]):
    from parinfo.profiles.plan import Plan, Setting

    return Plan(name, "", "test", Setting("intra_op", 1, "given"), Setting("inter_op", 1, "given"), {}, env, {},
                None, "given", ())


def test_export_lines_hold_no_control_character_and_eval_to_what_they_show():
    from parinfo.cli.apply import export_lines
    from parinfo.safe_text import escape_controls

    text = export_lines(_plan("evil\n$(touch /tmp/x)\x1b[2J", {"OMP_NUM_THREADS": "1\x1b[2J", "MKL_NUM_THREADS": "2"}),
                        environ={})
    assert escape_controls(text, keep="\n") == text
    assert "export MKL_NUM_THREADS=2" in text and "OMP_NUM_THREADS left out" in text
    assert "export PARINFO_PROFILE" not in text
    done = subprocess.run(["sh", "-c", text + "\necho \"[$MKL_NUM_THREADS][${OMP_NUM_THREADS-unset}]\""],
                          capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=30)
    assert done.stdout == "[2][unset]\n", done.stderr


def test_a_variable_with_a_nul_reaches_no_exec():
    from parinfo.errors import UsageError
    from parinfo.launch.child import child_environ

    with pytest.raises(UsageError, match="OMP_NUM_THREADS cannot be passed to a program"):
        child_environ(_plan("p", {"OMP_NUM_THREADS": "1\0"}), {})


def _system_jemalloc() -> str:
    from parinfo.process import preload as pre

    found = pre.locate_allocator(pre.allocator("jemalloc"))
    if found.path is None or found.where != "the system's library paths":
        pytest.skip("jemalloc is not installed in the system's folders (apt-get install libjemalloc2)")
    return os.path.realpath(found.path)


def _plan_json(prof: str, folder: Path) -> dict:
    import json

    proc = apply(prof, "--json", env=clean_env(LD_LIBRARY_PATH=str(folder)))
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["preload"]
    return row


@as_root
@pytest.mark.parametrize("how", ["nobody's folder", "nobody's file", "a folder all may write"])
def test_as_root_a_preload_another_user_may_have_placed_is_skipped_and_said(profile, nobodys, tmp_path, how):
    real = _system_jemalloc()
    if how == "a folder all may write":
        folder = tmp_path / "open"
        folder.mkdir()
        folder.chmod(0o777)
    else:
        folder = nobodys
    planted = folder / "libjemalloc.so.2"
    shutil.copyfile(real, planted)
    if how != "a folder all may write":
        os.chown(planted, 65534, 65534)
    if how == "nobody's file":  # a root folder on the path, another user's file in it
        folder = tmp_path / "lib"
        folder.mkdir()
        shutil.move(planted, folder / "libjemalloc.so.2")
    row = _plan_json(profile("allocator: jemalloc\n"), folder)
    assert os.path.realpath(row["path"]) == real
    assert f"skipped {folder}: " in row["why"] and "parinfo runs as root" in row["why"], row["why"]
    text = apply(profile("allocator: jemalloc\n"), env=clean_env(LD_LIBRARY_PATH=str(folder)))
    assert text.returncode == 0 and "skipped" in text.stdout, text.stderr


@as_root
def test_as_root_a_preload_in_roots_own_folder_on_the_path_is_taken(profile, tmp_path):
    real = _system_jemalloc()
    folder = tmp_path / "lib"
    folder.mkdir()
    shutil.copyfile(real, folder / "libjemalloc.so.2")
    row = _plan_json(profile("allocator: jemalloc\n"), folder)
    assert row["path"] == str(folder / "libjemalloc.so.2") and "skipped" not in row["why"]


@as_root
def test_as_root_a_launch_never_preloads_another_users_library(profile, nobodys):
    real = _system_jemalloc()
    planted = nobodys / "libjemalloc.so.2"
    shutil.copyfile(real, planted)
    os.chown(planted, 65534, 65534)
    code = "import os; print(os.environ['LD_PRELOAD'])"
    proc = apply(profile("allocator: jemalloc\n"), "--", sys.executable, "-c", code,
                 env=clean_env(LD_LIBRARY_PATH=str(nobodys)))
    assert proc.returncode == 0, proc.stderr
    assert str(nobodys) not in proc.stdout and os.path.realpath(proc.stdout.split()[-1].split(":")[0]) == real
