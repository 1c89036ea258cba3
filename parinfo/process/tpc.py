"""The one place parinfo imports threadpoolctl.

threadpoolctl's import runs ``os.environ.setdefault("KMP_DUPLICATE_LIB_OK", "True")``, which hides a
real conflict between two OpenMP runtimes. parinfo must not change the environment, so the variable
is removed again unless the user had set it.
"""
from __future__ import annotations

import os
import sys
from types import ModuleType


def threadpoolctl() -> ModuleType:
    """Import threadpoolctl without leaving KMP_DUPLICATE_LIB_OK behind."""
    loaded = sys.modules.get("threadpoolctl")
    if loaded is not None:
        return loaded
    had = "KMP_DUPLICATE_LIB_OK" in os.environ
    import threadpoolctl as module

    if not had:
        os.environ.pop("KMP_DUPLICATE_LIB_OK", None)
    return module
