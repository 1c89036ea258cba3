"""Owners of threads that never wait: found through their C library thread blocks, not their stack
pointers.

:mod:`parinfo.process.thread_owners` reads a thread's stack from the stack pointer its ``syscall``
file gives, which the kernel shows only while the thread waits in a system call: a pool worker that
spins between regions never does, so it stays unplaced. glibc makes each thread's stack one anonymous
mapping with a guard region below it and puts the thread's block (``struct pthread``, which begins
with its own address twice) at the top of that mapping; the block holds the thread's kernel id. So a
thread is found without its stack pointer: the top of each such mapping is scanned for a block, the
offset of the id inside a block is learnt from the process's own threads (the one offset at which
every block holds a different listed tid), and the words below a block, the thread's outermost
frames, name its owner as for a waiting thread.

Bounded: at most :data:`MAX_STACKS` mappings, :data:`TOP` bytes read from each, then one
:data:`~parinfo.process.stack_words.WINDOW` for each thread asked about. Everything read is the
process's own data: nothing but addresses its maps name is followed, and each failure is an Unknown.
"""
from __future__ import annotations

import itertools
import struct
from collections.abc import Collection

from parinfo.machine.procfs import Memory, Proc
from parinfo.process.mapped import MapsOnce
from parinfo.process.stack_words import BLOCK_SPAN, WINDOW, Maps, Region, block_at, owner_by_stack, parse_maps
from parinfo.records.unknown import Unknown

#: How many thread stacks are scanned at most (a process with more threads has its first ones read).
MAX_STACKS = 512
#: Bytes read from the top of each stack mapping: the block sits within its first few KiB.
TOP = 2 * BLOCK_SPAN
#: Where in a block a thread id is looked for (glibc's ``tid`` lies under 1 KiB in on every ABI).
TID_SPAN = 1024


def thread_stacks(mappings: list[Region]) -> list[Region]:
    """The mappings that look like thread stacks: anonymous, readable and writable, right above an
    inaccessible guard region (how glibc lays out a stack it allocates), at most :data:`MAX_STACKS`."""
    out = []
    for below, m in itertools.pairwise(mappings):
        if (not m.path and m.perms.startswith("rw") and below.end == m.start and below.perms.startswith("---")
                and not below.path):
            out.append(m)
            if len(out) == MAX_STACKS:
                break
    return out


def _blocks(memory: Memory, stacks: list[Region]) -> list[tuple[Region, int, bytes]]:
    """(stack, block address, the block's first :data:`TID_SPAN` bytes) for each stack whose top holds a block."""
    out = []
    for stack in stacks:
        low = max(stack.start, stack.end - TOP)
        words = memory.read(low, stack.end - low)
        if isinstance(words, Unknown):
            continue
        address = block_at(words, low)
        if address is not None:
            start = address - low
            head = words[start:start + TID_SPAN]
            if len(head) < TID_SPAN:
                more = memory.read(address, TID_SPAN)
                head = more if isinstance(more, bytes) else head
            out.append((stack, address, head))
    return out


def tid_offset(heads: list[bytes], tids: Collection[int]) -> int | None:
    """The one offset at which every block of ``heads`` holds a tid of ``tids``, a different one in
    each; None when there is none or more than one (too few blocks to tell)."""
    if not heads:
        return None
    found = []
    for offset in range(0, TID_SPAN - 3, 4):
        values = [struct.unpack_from("<i", h, offset)[0] if len(h) >= offset + 4 else -1 for h in heads]
        if all(v in tids for v in values) and len(set(values)) == len(values):
            found.append(offset)
    return found[0] if len(found) == 1 else None


def owners_of_running(proc: Proc, wanted: Collection[int], tids: Collection[int],
                      interpreter: str | None = None) -> dict[int, str | Unknown]:
    """Owner of each thread of ``wanted`` (tids of ``proc``; ``tids``: all its listed threads), read
    from the frames below its thread block: a library ("libgomp (scikit-learn)"), "python", or
    Unknown(why). ProcessGone when the process ends."""
    raw = MapsOnce(proc).raw()
    if isinstance(raw, Unknown):
        return {t: Unknown(f"its maps cannot be read: {raw.why}") for t in wanted}
    mappings = parse_maps(raw)
    maps = Maps(mappings)
    if interpreter is None:
        exe = proc.exe()
        interpreter = None if isinstance(exe, Unknown) else exe
    with proc.memory() as memory:
        memory.read(0, 0)
        if memory.refused is not None:
            return {t: Unknown(f"its stack cannot be read: {memory.refused.why}") for t in wanted}
        blocks = _blocks(memory, thread_stacks(mappings))
        offset = tid_offset([head for _, _, head in blocks], set(tids))
        if offset is None:
            return {t: Unknown("no thread block of the C library names it") for t in wanted}
        by_tid = {struct.unpack_from("<i", head, offset)[0]: (stack, address) for stack, address, head in blocks}
        out: dict[int, str | Unknown] = {}
        for tid in wanted:
            if tid not in by_tid:
                out[tid] = Unknown("no thread block of the C library names it")
                continue
            stack, address = by_tid[tid]
            high = min(stack.end, address + BLOCK_SPAN)
            low = max(stack.start, high - WINDOW)
            words = memory.read(low, high - low)
            out[tid] = (Unknown(f"its stack cannot be read: {words.why}") if isinstance(words, Unknown)
                        else owner_by_stack(words, maps, interpreter))
    return out

