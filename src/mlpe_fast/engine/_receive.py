"""Selects the engine's receive path: compiled (``_receive_c``) unless
disabled, else the twin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._native import USE_EXTENSIONS

__all__ = ("KEEP_BYTES", "ArrivalClock", "ReceiveThread", "enable_kernel_stamps")

if TYPE_CHECKING:  # both have the twin's interface (_receive_c.pyi)
    from ._receive_py import KEEP_BYTES, ArrivalClock, ReceiveThread, enable_kernel_stamps
else:
    from ._receive_py import KEEP_BYTES, ArrivalClock, ReceiveThread, enable_kernel_stamps

    if USE_EXTENSIONS:
        try:
            from ._receive_c import KEEP_BYTES, ArrivalClock, ReceiveThread
        except ImportError:  # no compiled core on this platform: the twin serves
            pass
