"""A profile's ``memory``: each launched program's memory on the NUMA nodes of its CPUs.

The kernel's memory policy belongs to a thread, is copied to every thread and process it starts and
is kept across exec. So the launcher sets it on its own thread just before it starts a program (or
an instance) and puts its own back afterwards: ``local`` is MPOL_BIND to the nodes of the program's
CPUs (the kernel allocates from the nearest of them), ``interleave`` is MPOL_INTERLEAVE over them.
Where parinfo cannot make the system call (a CPU it has no call numbers for), ``numactl`` runs the
program instead, when installed. Whatever cannot be done is said in one line, and the program runs
with the kernel's default policy.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

from parinfo.machine import mempolicy as mp
from parinfo.machine.cpulist import format_cpu_list
from parinfo.profiles.applied import Done, Reason, Skipped, Where
from parinfo.records.record import record

_MODES = {"local": mp.MPOL_BIND, "interleave": mp.MPOL_INTERLEAVE}
_NUMACTL = {"local": "--membind", "interleave": "--interleave"}
#: What numa_maps shows for each word of ``memory``.
POLICY_WORDS = {"local": "bind", "interleave": "interleave"}


@record(frozen=True)
class Binding:
    """The memory policy one launched program gets: ``mode`` (local or interleave) on ``nodes``
    (empty when the machine's nodes are unknown); ``what`` names the program in messages."""

    mode: str
    nodes: tuple[int, ...]
    what: str

    @property
    def expected(self) -> str:
        """The policy as numa_maps words it (``bind:0``)."""
        return f"{POLICY_WORDS[self.mode]}:{format_cpu_list(self.nodes)}"

    def _not_set(self, why: str) -> str:
        return (f"parinfo: memory {self.mode} not set for {self.what}: {why}; its memory follows the kernel's "
                "default policy")

    @contextmanager
    def held(self, command: Sequence[str]) -> Iterator[tuple[list[str], str | None]]:
        """While inside: this thread holds the policy, so a program started now inherits it. Yields
        the command to start (``numactl ...`` where the system call is not known here) and a line
        saying what could not be done (None when all is set); the thread's own policy is put back
        on leaving."""
        command = list(command)
        if not self.nodes:
            yield command, self._not_set("this machine's NUMA nodes are unknown")
            return
        try:
            before = mp.get_policy()
            mp.set_policy(_MODES[self.mode], self.nodes)
        except mp.PolicyError as exc:
            yield self._fallback(command, exc)
            return
        try:
            yield command, None
        finally:
            try:
                mp.set_policy(*before)
            except mp.PolicyError:
                pass  # a policy it could read and could set moments ago

    def _fallback(self, command: list[str], exc: mp.PolicyError) -> tuple[list[str], str | None]:
        import shutil

        if exc.errno is not None:  # the kernel refused: numactl would be refused the same way
            return command, self._not_set(str(exc))
        numactl = shutil.which("numactl")
        if numactl is None:
            return command, self._not_set(f"{exc}, and numactl is not installed")
        nodes = format_cpu_list(self.nodes)
        return ([numactl, f"{_NUMACTL[self.mode]}={nodes}", "--", *command],
                f"parinfo: memory {self.mode} for {self.what} through numactl {_NUMACTL[self.mode]}={nodes} ({exc})")

    def in_this_thread(self, threads: int) -> Done | Skipped:
        """Set the policy on the calling thread for ``parinfo.apply()``: what was set (and how many
        of the ``threads`` running keep their own policy), or why not."""
        if not self.nodes:
            return Skipped("memory", Where.MEMORY, Reason.NUMA_UNKNOWN, self.mode)
        try:
            mp.set_policy(_MODES[self.mode], self.nodes)
        except mp.PolicyError as exc:
            return Skipped("memory", Where.MEMORY, Reason.REFUSED, self.mode, error=str(exc))
        return Done("memory", self.expected, Where.MEMORY, via="set_mempolicy", threads=threads - 1)


def binding(mode: str, nodes: Sequence[int], what: str) -> Binding | None:
    """The binding of one program under a plan's ``memory``; None for ``none``."""
    if mode not in _MODES:
        return None
    return Binding(mode, tuple(nodes), what)


def hold(bind: Binding | None, command: Sequence[str]) -> AbstractContextManager[tuple[list[str], str | None]]:
    """:meth:`Binding.held` for a program about to start; nothing to hold without a binding."""
    return bind.held(command) if bind is not None else nullcontext((list(command), None))
