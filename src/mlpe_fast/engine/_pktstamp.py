"""Selects the segment stamps: compiled (``_pktstamp_c``) unless disabled,
else the twin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._native import USE_EXTENSIONS

__all__ = ("PacketCapture", "SegmentMap", "parse_frame")

if TYPE_CHECKING:  # both have the twin's interface
    from ._pktstamp_py import PacketCapture, SegmentMap, parse_frame
else:
    from ._pktstamp_py import PacketCapture, SegmentMap, parse_frame

    if USE_EXTENSIONS:
        try:
            from ._pktstamp_c import PacketCapture, SegmentMap, parse_frame
        except ImportError:  # no compiled core on this platform: the twin serves
            pass
