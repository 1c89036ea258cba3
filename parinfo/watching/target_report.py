"""The watched process's report (``parinfo show --pid``'s), re-read at most every so often.

``watch --serve`` and ``watch --otlp`` send its native pools and findings with each sample; pools
and counts change rarely and the report reads the process's memory maps and environment, so it is
read again only once ``every`` seconds old, and so is the pod it runs in (:attr:`TargetReport.pod`:
``watch --serve``'s cAdvisor counters).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parinfo.diagnostics.model import Report
    from parinfo.machine.pod import PodIdentity


class TargetReport:
    """The report of ``pid`` (None: parinfo's own, for the container view), at most ``every`` seconds old."""

    def __init__(self, pid: int | None, every: float = 30.0) -> None:
        self.pid, self.every = pid, every
        self._report: Report | None = None
        self._at = float("-inf")
        self.pod: PodIdentity | None = None  # the pod it runs in, read with the report

    def get(self) -> Report:
        """The report, read again when it is ``every`` seconds old (ProcessGone when the process is)."""
        if self._report is None or time.monotonic() - self._at >= self.every:
            from parinfo.diagnostics.report import inspect
            from parinfo.machine.pod import pod_identity
            from parinfo.machine.procfs import Proc

            self._report = inspect(pid=self.pid) if self.pid is not None else inspect()
            self.pod = pod_identity("/", None if self.pid is None else Proc.of(self.pid))
            self._at = time.monotonic()
        return self._report
