"""Issue 36: every open or create of a file in the package goes through parinfo.safe_file, or is on
the short list below with why it may not: a scan of the package's syntax trees, so a new open
elsewhere fails here until it moves to safe_file or is listed (and reviewed) with its reason."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "parinfo"

#: Calls that open or create a file, by the name they are called through.
OPENERS = {"open", "io.open", "os.open", "posix.open", "os.fdopen", "os.mkdir", "os.makedirs", "os.mkfifo",
           "os.mknod", "tempfile.mkstemp", "tempfile.mkdtemp", "tempfile.NamedTemporaryFile",
           "tempfile.TemporaryFile", "tempfile.SpooledTemporaryFile", "tempfile.TemporaryDirectory"}
#: Methods that open or create a file whatever they are called on (pathlib's).
METHODS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "mkdir", "touch"}

OWN_PROC = "this process's own /proc file (the kernel's: cannot be a FIFO or another user's)"
KERNEL = "a kernel file under /proc or /sys (procfs and sysfs hold no FIFO, and no user can put one there)"
WRAPS = "wraps a descriptor that safe_file opened or made (a new Python file object, not a new open)"
ATTACH = "the attach channel: a folder parinfo makes in a base the target's user could write, filled by descriptor"
CGROUP = "the launch's own cgroup v2 files (cgroupfs: the kernel's, under parinfo's own cgroup)"
TEMP_DIR = "mkdtemp: a new 0700 folder of a random name, which no other user may enter"

#: (module:function, call) -> why the open need not go through safe_file.
ALLOWED: dict[tuple[str, str], str] = {
    ("parinfo.machine.sysfs:read_bytes", "os.open"): KERNEL,
    ("parinfo.machine.procfs:read_small", "os.open"): KERNEL + " (/proc/PID/task/TID/stat)",
    ("parinfo.machine.proc_memory:Memory.read_upto", "os.open"): KERNEL + " (/proc/PID/mem)",
    ("parinfo.process.pools:loaded_objects", "open"): OWN_PROC + " (maps)",
    ("parinfo.process.serving:_program_defines", "os.open"): OWN_PROC + " (exe: the program this process runs)",
    ("parinfo.fleet.probe:host_identity", "open"): KERNEL + " (/proc/sys/kernel/random/boot_id)",
    ("parinfo.profiles.hook.sitecustomize:_mapped", "open"): OWN_PROC + " (maps)",
    ("parinfo.profiles.hook.sitecustomize:_Report._write", "os.open"):
        "the start-up hook cannot import parinfo cheaply: O_EXCL|O_NOFOLLOW by hand, in tune's 0700 folder",
    ("parinfo.profiles.hook.sitecustomize:_Report._write", "os.fdopen"): "wraps the descriptor made just above",
    ("parinfo.profiles.hook._parinfo_import_watch:interop_pool_started", "open"): OWN_PROC + " (task/TID/comm)",
    ("parinfo.cli:_silence_stdout", "os.open"): "os.devnull, a device node only root can replace",
    ("parinfo.outside.attach:_source", "read_text"): "parinfo's own installed source file",
    ("parinfo.process.elfcount:_Reader._layout", "os.fdopen"): WRAPS,
    ("parinfo.process.elfcount:_Reader.defines", "os.fdopen"): WRAPS,
    ("parinfo.process.torch_last_set:_mapped", "open"): OWN_PROC + " (maps)",
    ("parinfo.process.torch_last_set:last_set_count", "os.open"): KERNEL + " (/proc/self/mem, this process's own)",
    ("parinfo.machine.cpuid:_store", "os.fdopen"): WRAPS,
    ("parinfo.tuning.worker:write_result", "os.fdopen"): WRAPS,
    ("parinfo.runtime.tracing:Profile.export_chrome_trace", "os.fdopen"): WRAPS,
    ("parinfo.tuning.writers:write_profile", "os.fdopen"): WRAPS,
    ("parinfo.tuning.measure:WorkerMeasurer.trial", "tempfile.TemporaryDirectory"): TEMP_DIR,
    ("parinfo.tuning.measure:CommandMeasurer._run_once", "tempfile.TemporaryDirectory"): TEMP_DIR,
    ("parinfo.outside.attach.channel:Channel._open", "os.mkdir"): ATTACH + " (O_EXCL-like: a new name, 0700)",
    ("parinfo.outside.attach.channel:Channel._open", "os.mkfifo"): ATTACH + " (in its own 0700 folder)",
    ("parinfo.outside.attach.channel:Channel._open", "os.open"): ATTACH + " (its own folder and FIFO, by descriptor)",
    ("parinfo.outside.attach.in_target:_started", "posix.open"):
        "runs inside the target, as its user: its own /proc/self/task/TID/comm, read-only, 64 bytes",
    ("parinfo.outside.attach.in_target:main", "posix.open"):
        "runs inside the target, as its user: the FIFO parinfo made, O_NONBLOCK|O_NOFOLLOW, type checked",
    ("parinfo.outside.attach.turn:turn", "os.open"): KERNEL + " (/proc/PID/mem, locked for the attach's turn)",
    ("parinfo.launch.guard:_write", "os.open"): CGROUP,
    ("parinfo.launch.guard:cgroup_pids", "open"): CGROUP,
    ("parinfo.launch.reaping:Reaper.__init__", "os.open"): CGROUP,
    ("parinfo.launch.reaping:Reaper.kill", "os.open"): CGROUP,
    ("parinfo.launch.reaping:_make_cgroup", "os.mkdir"): CGROUP + " (made under parinfo's own cgroup)",
    ("parinfo.launch.reaping:cgroup_base", "open"): OWN_PROC + " (cgroup, mountinfo)",
    ("parinfo.launch.reaping:_children", "open"): OWN_PROC + " (task/TID/children)",
}


def _name(func: ast.expr) -> str | None:
    """``open``, ``os.open``, or ``.read_text`` (a method on anything) for a call's function."""
    if isinstance(func, ast.Name):
        return func.id if func.id in OPENERS else None  # read_bytes(): sysfs's, a function
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else None
        if f"{owner}.{func.attr}" in OPENERS:
            return f"{owner}.{func.attr}"
        if func.attr in METHODS and owner not in ("sysfs", "safe_file", "os", "io", "tempfile"):
            return func.attr
    return None


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def opens() -> dict[tuple[str, str], list[int]]:
    """{(module:function, call): lines} of every open or create in the package outside safe_file."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module(path)
        if module == "parinfo.safe_file":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))

        def visit(node: ast.AST, scope: list[str], module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                inner = scope
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    inner = [*scope, child.name]
                if isinstance(child, ast.ImportFrom) and child.module in ("os", "io", "tempfile", "posix"):
                    for alias in child.names:
                        if f"{child.module}.{alias.name}" in OPENERS or alias.name == "open":
                            found.setdefault((f"{module}:{'.'.join(scope) or '<module>'}",
                                              f"from {child.module} import {alias.name}"), []).append(child.lineno)
                if isinstance(child, ast.Call):
                    name = _name(child.func)
                    if name is not None:
                        found.setdefault((f"{module}:{'.'.join(scope) or '<module>'}", name), []).append(child.lineno)
                visit(child, inner)

        visit(tree, [])
    return found


def test_every_open_goes_through_safe_file_or_is_listed_with_why():
    found = opens()
    unlisted = {k: v for k, v in found.items() if k not in ALLOWED}
    assert not unlisted, ("open or create a file through parinfo.safe_file, or add it to ALLOWED with why "
                          "no other user can have a say in that file:\n"
                          + "\n".join(f"  {where} calls {call} (line {', '.join(map(str, lines))})"
                                      for (where, call), lines in sorted(unlisted.items())))


def test_the_list_holds_only_opens_that_exist():
    stale = sorted(set(ALLOWED) - set(opens()))
    assert not stale, f"ALLOWED lists opens the package no longer has (remove them): {stale}"


def test_the_scan_finds_each_kind_of_open(tmp_path, monkeypatch):
    pkg = tmp_path / "parinfo"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "import os, io, tempfile\nfrom pathlib import Path\nfrom os import mkfifo\n"
        "def f(p):\n    open(p)\n    io.open(p)\n    os.open(p, 0)\n    os.makedirs(p)\n    tempfile.mkstemp()\n"
        "class C:\n    def g(self, p):\n        Path(p).read_text()\n        Path(p).write_bytes(b'')\n"
        "        p.touch()\n        os.fdopen(3)\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    got = sorted(call for (_, call) in opens())
    assert got == sorted(["open", "io.open", "os.open", "os.makedirs", "tempfile.mkstemp", "read_text",
                          "write_bytes", "touch", "os.fdopen", "from os import mkfifo"])
