"""mlpe-fast: a load generator for MLPerf Endpoints."""

from ._version import __version__

__all__ = ("__version__",)
