"""The ``mlpe-fast`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._version import __version__

__all__ = ("main",)


def build_parser() -> argparse.ArgumentParser:
    from . import NATIVE

    core = "native core" if NATIVE else "pure-Python core"
    parser = argparse.ArgumentParser(
        prog="mlpe-fast",
        description="Load generator for MLPerf Endpoints.",
    )
    parser.add_argument(
        "--version", action="version", version=f"mlpe-fast {__version__} ({core})"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
