"""Each pool's count in a host scan: read from the process's memory where its library keeps it
(:func:`in_force`, over the maps lines :func:`symbol_lines` keeps), then ranked by the one rule
(:func:`parinfo.outside.standing.decide`) into a host row (:func:`pool_count`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from parinfo.host.model import PoolCount
from parinfo.outside.standing import Decided, Standing
from parinfo.process import libraries as reg

if TYPE_CHECKING:
    from parinfo.machine.procfs import Proc
    from parinfo.outside.inforce import CountInForce
    from parinfo.process.pools import PoolRow


def symbol_lines(maps: bytes, rows: list[PoolRow]) -> str | None:
    """The lines of a maps file that map the pools among ``rows`` whose library keeps its count where
    it can be read from outside (the registry's ``count_symbol``), or None when none does. Reading the counts
    needs those lines only: kept per maps version, they spare each scan a parse of the whole file."""
    paths = {r.filepath for r in rows
             if (lib := reg.find(r.library)) is not None and lib.count_symbol is not None}
    if not paths:
        return None
    text = maps.decode("utf-8", "surrogateescape")
    return "\n".join(line for line in text.splitlines()
                     if line.split(None, 5)[-1].removesuffix(" (deleted)") in paths)


def in_force(proc: Proc, symbol_maps: str | None) -> dict[str, CountInForce]:
    """{library file: its count in force, or why not}, read from the process's memory
    (:mod:`parinfo.outside.inforce`) for the files of ``symbol_maps`` (:func:`symbol_lines`); {}
    when there are none (nothing is read then)."""
    if symbol_maps is None:
        return {}
    from parinfo.outside.inforce import counts_in_force
    from parinfo.process.tasks import NoAccess, ProcessGone

    try:
        found = counts_in_force(proc, symbol_maps)
    except (ProcessGone, NoAccess):
        return {}
    return {c.path: c for c in found}


def pool_count(row: PoolRow, got: Decided) -> PoolCount:
    """The host row of one pool, from the rule's decision."""
    return PoolCount(row.library, row.filepath or "", row.owner, got.count, got.source, got.in_force,
                     row.duplicate_of, attached=got.standing is Standing.ATTACHED)
