"""What a run shows: the final table and the live progress line."""

from .progress import Progress
from .table import AUDIT_ROWS, render

__all__ = ("AUDIT_ROWS", "Progress", "render")
