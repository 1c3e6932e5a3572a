"""Which implementation of the wire core is in use.

``MLPE_FAST_NO_EXTENSIONS`` (any value but "" or "0") selects the pure-Python
twins, at build time (setup.py) and at import time (here).  Interpreters other
than CPython always use the twins.
"""

from __future__ import annotations

import os
import platform

__all__ = ("USE_EXTENSIONS",)

USE_EXTENSIONS: bool = (
    os.environ.get("MLPE_FAST_NO_EXTENSIONS", "") in ("", "0")
    and platform.python_implementation() == "CPython"
)
