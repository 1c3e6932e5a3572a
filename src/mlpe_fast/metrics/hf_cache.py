"""Where a tokenizer named by a Hugging Face id is found: the local hub cache.

Both the tokenizer (:func:`mlpe_fast.metrics.tokens.load_tokenizer`) and the
chat template beside it (:func:`mlpe_fast.metrics.chat_template.tokenizer_dir`)
resolve a name the same way, so the helpers live here, below both:

* :func:`hf_cache_dir` -- the cache directory, as ``huggingface_hub``
  resolves it;
* :func:`looks_like_path` -- whether a name is meant as a path rather than a
  hub repo id;
* :func:`cached_snapshots` -- the snapshot directories of one cached repo,
  the one ``refs/main`` names first.

Nothing here touches the network: benchmark hosts often cannot reach the hub.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ("cached_snapshots", "hf_cache_dir", "looks_like_path", "repo_cache_dir")

# A Hugging Face repo id: NAME or ORG/NAME (letters, digits, "-", "_", ".").
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, as ``huggingface_hub`` resolves it.

    ``HF_HUB_CACHE`` (or the legacy ``HUGGINGFACE_HUB_CACHE``), else
    ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else
    ``~/.cache/huggingface/hub``.
    """
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        value = os.environ.get(name)
        if value:
            return Path(value).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def repo_cache_dir(repo_id: str) -> Path:
    """The cache directory of one hub repo (``models--ORG--NAME``)."""
    return hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))


def looks_like_path(name: str) -> bool:
    """Whether ``name`` is meant as a path (absolute, relative, a ``.json``
    file, nested deeper than ``ORG/NAME``) rather than a hub repo id."""
    return (
        name.startswith(("/", "./", "../", "~", "\\"))
        or name.endswith(".json")
        or (os.sep != "/" and os.sep in name)
        or name.count("/") > 1
        or not _REPO_ID.match(name)
    )


def cached_snapshots(repo_dir: Path) -> list[Path]:
    """Snapshot directories of one cached repo, the one ``refs/main`` names
    first, then the others newest first."""
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return []
    ordered: list[Path] = []
    ref = repo_dir / "refs" / "main"
    try:
        head = ref.read_text(encoding="utf-8").strip()
    except OSError:
        head = ""
    if head and (snapshots / head).is_dir():
        ordered.append(snapshots / head)
    others = [p for p in snapshots.iterdir() if p.is_dir() and p not in ordered]
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return ordered + others
