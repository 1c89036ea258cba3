"""parinfo's version, in the bottom layer so that every module can name it without importing the
``parinfo`` facade (whose lazy exports reach up to the CLI); the facade re-exports it."""
from __future__ import annotations

__version__ = "0.1.0"
