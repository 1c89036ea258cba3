"""`parinfo show`."""
from __future__ import annotations

from parinfo.cli import app  # noqa: F401
