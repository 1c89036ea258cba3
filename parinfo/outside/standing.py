"""The one precedence rule for a pool's count in another process, used by ``show --pid`` and ``host``.

In force (read from its memory) > attached (read inside it) > predicted from its launch environment
> unknown. A prediction is what the libraries' rules make of the environment the process was started
with (a variable, else the library's default on its CPUs): the process may have changed it since, so
it is labelled as one and never counted as in force. A read the kernel refused stays unknown with its
reason: the launch environment is no stand-in for memory closed to us.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING

from parinfo.records.record import record
from parinfo.records.source import Kind, Source, unknown
from parinfo.records.unknown import Unknown

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts
    from parinfo.outside.inforce import CountInForce

#: The end of a predicted count's words.
MAY_HAVE_CHANGED = "the process may have changed it"
#: Why a count was not read when nothing in memory exposes it.
KEPT_INSIDE = "kept inside the process: not readable from outside"


class Standing(enum.Enum):
    """How a count shown for another process's pool is known."""

    IN_FORCE = "in force"      # read from the process's memory
    ATTACHED = "attached"      # read inside the process (sys.remote_exec), its count None when not there either
    PREDICTED = "launch env"   # what its launch environment asks for
    UNKNOWN = "unknown"

    @property
    def in_force(self) -> bool:
        """Whether the count was read as it is now (memory or attach), not predicted."""
        return self in (Standing.IN_FORCE, Standing.ATTACHED)


@record(frozen=True)
class Decided:
    """One pool's count and how it is known. ``variable``: for a prediction, the variable (and value)
    it rests on, None when it is the library's default; ``unread``: why the count in force was not
    read (a prediction or unknown)."""

    count: int | None
    source: Source
    standing: Standing
    variable: str | None = None
    unread: str = ""

    @property
    def in_force(self) -> bool:
        """Whether this is a count read as it is now (from memory or inside), not a prediction."""
        return self.count is not None and self.standing.in_force


def decide(library: str, memory: CountInForce | None, launch_env: Mapping[str, str] | Unknown | None,
           facts: MachineFacts, attached: tuple[int | None, Source] | None = None) -> Decided:
    """The count of one pool of ``library`` by the precedence rule: ``memory`` (its count in force read
    from the process's memory, or why not), ``attached`` (count and source read inside it), else what
    ``launch_env`` predicts (None or Unknown(why): it could not be read), else unknown with why."""
    from parinfo.outside.inforce import IN_FORCE, reason
    from parinfo.process import libraries as reg
    from parinfo.process.provenance import model_of, predict

    if memory is not None and memory.count is not None:
        return Decided(memory.count, IN_FORCE, Standing.IN_FORCE)
    if attached is not None:
        return Decided(*attached, Standing.ATTACHED)
    why = reason(memory.source) if memory is not None else KEPT_INSIDE
    if memory is not None and memory.denied:
        return Decided(None, memory.source, Standing.UNKNOWN, unread=why)
    if launch_env is None or isinstance(launch_env, Unknown):
        return Decided(None, unknown(f"{why}; its launch environment cannot be read either",
                                     None if launch_env is None else str(launch_env)),
                       Standing.UNKNOWN, unread=why)
    rec = reg.find(library)
    if rec is None:
        return Decided(None, unknown(f"parinfo has no record for {library}"), Standing.UNKNOWN, unread=why)
    guess = predict(model_of(rec), launch_env, facts)
    if guess.count is None:
        return Decided(None, guess.source, Standing.UNKNOWN, unread=why)
    variable = guess.phrase if guess.source.kind is Kind.VARIABLE else None
    return Decided(guess.count, Source(Kind.LAUNCH_ENVIRONMENT, guess.source.detail,
                                       f"from its launch environment ({guess.phrase}); {MAY_HAVE_CHANGED}"),
                   Standing.PREDICTED, variable, why)
