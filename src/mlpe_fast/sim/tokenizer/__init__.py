"""The demo tokenizer shipped with the package.

A Hugging Face ``tokenizers`` WordLevel tokenizer in which one printable
ASCII character is one token (anything else is ``<unk>``, still one token),
so that the simulated endpoint's outputs have known token counts.  Origin:
mlcommons/endpoints ``tests/assets`` (Apache-2.0), unchanged (see README.md).

``DEMO_TOKENIZER`` is the directory holding ``tokenizer.json``; pass it to
:func:`mlpe_fast.metrics.tokens.load_tokenizer`.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ("DEMO_TOKENIZER",)

DEMO_TOKENIZER: str = str(Path(__file__).resolve().parent)
