"""``python -m mlpe_fast.compat.endpoints ARGS...``: the launcher's entry point.

Runs the reference client's command line with mlpe-fast's engine as its HTTP
client (see :mod:`.endpoints_launcher`).
"""

from __future__ import annotations

import sys

from .endpoints_launcher import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
