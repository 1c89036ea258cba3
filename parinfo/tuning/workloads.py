"""What the tuner times: one typed spec class per kind of workload.

A spec is small and JSON-able (``convert.dump`` / :func:`read_spec`) so the parent can hand it
to a fresh worker process; :meth:`Workload.build` turns it into the zero-argument callable one timed
call runs, inside the process that times it. Heavy libraries are imported only there (see kernels).
Each class checks its own arguments (:meth:`create`) so bad input is one line before anything runs.
"""
from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Any, ClassVar

from parinfo.errors import UsageError
from parinfo.process.libraries import Torch, family
from parinfo.records.convert import load
from parinfo.records.record import record
from parinfo.tuning import kernels
from parinfo.tuning.checks import check_int
from parinfo.tuning.usercode import build_module, build_stmt, compile_user

#: tune's --framework word for torch's workloads: torch's module, as its registry family names it.
TORCH = str(family(Torch).module)
FRAMEWORKS = ("numpy", TORCH)
MATMUL_DTYPE_BYTES = 4  # float32
MATMUL_ARRAYS = 3  # a, b and the result


@record(frozen=True)
class Workload:
    """Common part: the kind's name, the framework, and what the tuner asks of every kind."""

    kind: ClassVar[str] = ""
    uses_interop: ClassVar[bool] = False  # one call itself forks inter-op tasks
    whole_process: ClassVar[bool] = False  # timed as a launched process, never in-process
    user_code: ClassVar[bool] = False  # the user's own statement or function, run in the worker

    framework: str = "numpy"

    _json_extra = (("kind", str),)  # names the class to read it back (read_spec)

    def may_fork(self) -> bool:
        """Whether one call may run inter-op tasks, so the inter-op count can change its time: the
        ensemble does; the user's code may with torch (``torch.jit.fork``; the worker sets torch's
        inter-op count); the built-in matmul and elementwise never do."""
        return self.uses_interop or (self.user_code and self.framework == TORCH)

    @classmethod
    def create(cls, framework: str, size: Any) -> Workload:
        """A built-in workload from the command's arguments (``size`` is the matmul's), checked."""
        return cls(framework=framework)

    def describe(self) -> str:
        """One line naming the workload, for tables, JSON and profile comments."""
        raise NotImplementedError

    def build(self) -> Callable[[], Any]:
        """The zero-argument callable one timed call runs (setup done here, once)."""
        raise ValueError(f"cannot build workload kind {self.kind!r} in-process")

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The JSON form: ``kind`` first (it names the class to read it back), ``framework`` last."""
        return {"kind": self.kind, **{k: v for k, v in data.items() if k != "framework"},
                "framework": data["framework"]}


@record(frozen=True)
class Matmul(Workload):
    """A float32 size x size matrix product (the reference's 1024 sweep)."""

    kind: ClassVar[str] = "matmul"
    size: int = 1024

    @classmethod
    def create(cls, framework: str, size: Any) -> Workload:
        return cls(framework=framework, size=_fits_in_memory(check_int("--size", size)))

    def describe(self) -> str:
        n = self.size
        return f"matmul {n}x{n} float32 ({'torch.mm' if self.framework == TORCH else 'numpy @'})"

    def build(self) -> Callable[[], Any]:
        make = kernels.torch_matmul if self.framework == TORCH else kernels.numpy_matmul
        return make(self.size)

    def _json_out(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"kind": self.kind, **data}


@record(frozen=True)
class Elementwise(Workload):
    """exp, multiply and add over a long vector, split by the intra-op pool."""

    kind: ClassVar[str] = "elementwise"

    def describe(self) -> str:
        how = "torch ops" if self.framework == TORCH else "numpy ufuncs split by parinfo.parallel_for"
        return f"elementwise exp/mul/add over {kernels.ELEMENTWISE_LEN} doubles ({how})"

    def build(self) -> Callable[[], Any]:
        make = kernels.torch_elementwise if self.framework == TORCH else kernels.numpy_elementwise
        return make(kernels.ELEMENTWISE_LEN)


@record(frozen=True)
class Ensemble(Workload):
    """Independent small models forked as inter-op tasks: the workload that sweeps pairs."""

    kind: ClassVar[str] = "ensemble"
    uses_interop: ClassVar[bool] = True

    @classmethod
    def create(cls, framework: str, size: Any) -> Workload:
        try:
            from parinfo.runtime import fork, wait  # noqa: F401
        except ImportError:
            raise UsageError("the ensemble workload needs parinfo.runtime (fork/wait), which is missing "
                             "from this installation") from None
        return cls(framework=framework)

    def describe(self) -> str:
        return (f"ensemble of {kernels.ENSEMBLE_MODELS} independent {kernels.ENSEMBLE_LAYERS}-layer "
                f"{kernels.ENSEMBLE_WIDTH}-wide models, batch {kernels.ENSEMBLE_BATCH}, forked with "
                f"parinfo.fork/wait ({self.framework})")

    def build(self) -> Callable[[], Any]:
        return kernels.ensemble(self.framework)


@record(frozen=True)
class Stmt(Workload):
    """A timeit-style statement, run after its setup."""

    kind: ClassVar[str] = "stmt"
    user_code: ClassVar[bool] = True
    stmt: str = "pass"
    setup: str = "pass"

    def describe(self) -> str:
        return f"stmt {self.stmt!r}" + (f" (setup {self.setup!r})" if self.setup != "pass" else "")

    def build(self) -> Callable[[], Any]:
        return build_stmt(self.stmt, self.setup)


@record(frozen=True)
class Module(Workload):
    """``pkg.module:function``, called with no arguments."""

    kind: ClassVar[str] = "module"
    user_code: ClassVar[bool] = True
    module: str = ""

    def describe(self) -> str:
        return f"module {self.module}"

    def build(self) -> Callable[[], Any]:
        return build_module(self.module)


@record(frozen=True)
class Command(Workload):
    """A command timed as a whole process."""

    kind: ClassVar[str] = "command"
    whole_process: ClassVar[bool] = True
    command: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        return "command " + shlex.join(self.command)


#: The built-in workloads by name, the default first: each name is declared once, as its class's ``kind``.
BUILTIN: dict[str, type[Workload]] = {c.kind: c for c in (Matmul, Elementwise, Ensemble)}
DEFAULT = Matmul.kind
KINDS: dict[str, type[Workload]] = {**BUILTIN, **{c.kind: c for c in (Stmt, Module, Command)}}


def read_spec(data: Mapping[str, Any]) -> Workload:
    """The workload of a spec (``convert.dump`` of one): how a worker process receives it."""
    return load(KINDS[data["kind"]], data, strict=True)  # made by this parinfo, in the parent


# ---------------------------------------------------------------- from the user's arguments

def _stmt(stmt: str, setup: str | None, framework: str) -> Stmt:
    for src, opt in ((setup or "pass", "--setup"), (stmt, "--stmt")):
        try:
            compile_user(src, f"<{opt[2:]}>")
        except SyntaxError as exc:
            raise UsageError(f"{opt}: {exc.msg} at line {exc.lineno}, column {exc.offset}: "
                             f"{(exc.text or '').strip()!r}") from None
    return Stmt(framework=framework, stmt=stmt, setup=setup or "pass")


def _module(target: str, framework: str) -> Module:
    mod, sep, func = target.partition(":")
    if not sep or not mod or not func or not all(p.isidentifier() for p in mod.split(".")) \
            or not func.isidentifier():
        raise UsageError(f"--module {target!r}: use pkg.module:function")
    return Module(framework=framework, module=target)


def _command(argv: Sequence[str], framework: str) -> Command:
    cmd = tuple(argv)
    if not cmd[0]:
        raise UsageError("the command is empty: give a program after --")
    if shutil.which(cmd[0]) is None:
        if os.sep in cmd[0] and os.path.exists(cmd[0]):
            what = "it is a directory" if os.path.isdir(cmd[0]) else "it is not executable"
            raise UsageError(f"cannot run {cmd[0]!r}: permission denied ({what})")
        hint = f" (built-in workloads: {', '.join(BUILTIN)})" if len(cmd) == 1 else ""
        raise UsageError(f"command not found: {cmd[0]!r}{hint}")
    return Command(framework=framework, command=cmd)


def _fits_in_memory(size: int) -> int:
    """``size`` when the matmul's matrices fit in the memory available now; UsageError otherwise."""
    import psutil

    need = MATMUL_ARRAYS * MATMUL_DTYPE_BYTES * size * size
    available = psutil.virtual_memory().available
    if need > available:
        raise UsageError(f"--size {size}: the matmul needs {need / 2**30:.3g} GiB for its {MATMUL_ARRAYS} "
                         f"{size}x{size} float32 matrices, and {available / 2**30:.3g} GiB is available; "
                         f"use a smaller --size")
    return size


def _builtin(name: str, framework: str, size: Any) -> Workload:
    cls = BUILTIN.get(name)
    if cls is None:
        raise UsageError(f"unknown workload {name!r}: use one of {', '.join(BUILTIN)}, "
                         f"or --stmt, --module, -- COMMAND")
    need = TORCH if framework == TORCH else "numpy"
    if importlib.util.find_spec(need) is None:
        raise UsageError(f"the {name} workload with --framework {framework} needs {need}: pip install {need}")
    return cls.create(framework, size)


def described() -> str:
    """The built-in workloads' names for help texts: "matmul (default), elementwise, ensemble"."""
    return ", ".join(f"{n} (default)" if n == DEFAULT else n for n in BUILTIN)


def choose(workload: str | None, framework: str, size: Any, stmt: str | None, setup: str | None,
           module: str | None, command: Sequence[str] | None) -> Workload:
    """The one workload the arguments name, checked; UsageError for a conflict or a bad value."""
    given = [n for n, v in (("--stmt", stmt), ("--module", module), ("a command", command)) if v]
    if len(given) > 1:
        raise UsageError(f"give one workload, not {' and '.join(given)}")
    if framework not in FRAMEWORKS:
        raise UsageError(f"--framework {framework!r}: use one of {', '.join(FRAMEWORKS)}")
    if given and workload not in (None, DEFAULT):
        raise UsageError(f"give either a built-in workload ({workload}) or {given[0]}, not both")
    if setup and not stmt:
        raise UsageError("--setup needs --stmt")
    if stmt is not None:
        return _stmt(stmt, setup, framework)
    if module is not None:
        return _module(module, framework)
    if command:
        return _command(command, framework)
    return _builtin(workload or DEFAULT, framework, size)
