"""A child's output read as it comes, keeping only its end: what a failing workload's report shows.

A workload may print without bound (hundreds of MB per call); the tuner needs its output only when
it fails, and then only the end, where the error is. So a thread drains the pipe as it fills (the
child never blocks on a full pipe) and keeps the last ``limit`` bytes, in O(output) time.
"""
from __future__ import annotations

import threading
from typing import IO

TAIL_BYTES = 64 * 1024


class OutputTail:
    """Drains ``stream`` in a thread, keeping its last ``limit`` bytes and counting the rest."""

    def __init__(self, stream: IO[bytes], limit: int = TAIL_BYTES) -> None:
        self.limit = limit
        self.total = 0
        self._buf = bytearray()
        self._stream = stream
        self._thread = threading.Thread(target=self._drain, name="parinfo-tune-output", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        read = getattr(self._stream, "read1", self._stream.read)
        try:
            while chunk := read(65536):
                self.total += len(chunk)
                self._buf += chunk
                if len(self._buf) > 2 * self.limit:  # trim in batches: amortised O(1) per byte
                    del self._buf[:-self.limit]
        except (OSError, ValueError):
            pass
        finally:
            self._stream.close()

    def text(self, timeout: float = 30.0) -> str:
        """The output kept, with a first line saying how much was left out. Waits up to ``timeout`` s
        for the stream to end (the child has exited; a process it left behind may hold the pipe)."""
        self._thread.join(timeout)
        kept = bytes(self._buf[-self.limit:])
        cut = self.total - len(kept)
        head = f"[... {cut} earlier bytes of output not kept ...]\n" if cut > 0 else ""
        return head + kept.decode("utf-8", "replace")
