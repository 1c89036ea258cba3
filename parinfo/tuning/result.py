"""The outcome of a tune as the public API returns it: :class:`TuneResult`, the data of
:class:`~parinfo.tuning.outcome.TuneOutcome` with the methods that write it (JSON, profile, plots).
"""
from __future__ import annotations

import os
from typing import Any

from parinfo.records.convert import dump
from parinfo.tuning import plot as plots, writers
from parinfo.tuning.outcome import TuneOutcome


class TuneResult(TuneOutcome):
    """The measured curve, the winner, what was skipped and why, and what may have disturbed it; with
    its JSON form, its profile and its plots."""

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-serialisable form (what ``parinfo tune --json`` prints)."""
        return dict(dump(writers.TuneJson.of(self)))

    def to_profile_yaml(self, name: str | None = None) -> str:
        """A profile (``version: 1``) with the winning counts, and comments recording how they were found."""
        return writers.profile_yaml(self, name)

    def write_profile(self, path: str | os.PathLike[str], name: str | None = None) -> None:
        """Write :meth:`to_profile_yaml` to ``path``."""
        writers.write_profile(self, path, name)

    def text_plot(self, width: int = 50) -> str:
        """Median time per measured point as horizontal bars (the terminal plot)."""
        return plots.text_plot(self, width)

    def plot(self, path: str | os.PathLike[str]) -> None:
        """Save the curve as SVG or PNG with matplotlib (the ``plot`` extra)."""
        plots.save_plot(self, path)
