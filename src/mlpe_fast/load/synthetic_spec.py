"""A synthetic workload as configured: its syntax, its distributions.

``--dataset synthetic:KEY=VALUE,...`` (YAML: a ``datasets[]`` entry with a
``synthetic:`` block of the same keys) asks for random prompts of given
lengths instead of a file, as ``vllm bench serve --dataset-name random``,
AIPerf's synthetic inputs and GuideLLM's ``--data prompt_tokens=N,...`` do;
the keys read as the reference's ``--dataset`` options do::

    synthetic:isl=normal(1024,128),osl=fixed(256),prefix=512,samples=1000

* ``isl=DIST``: each prompt's length in tokens, the shared prefix included
  (MLPerf's ISL is the whole prompt's; vLLM's ``--random-prefix-len`` comes
  on top of its input length instead);
* ``osl=DIST``: each request's output cap (``max_completion_tokens``, or
  ``max_tokens``), at most the run's ``--max-output-tokens``;
* ``prefix=N`` (default 0): the first N tokens of every prompt are the same
  (a prefix-cache study); the salt goes right after them;
* ``samples=N`` (default 1000, vLLM's ``--num-prompts`` default): the
  number of prompts;
* ``seed=N`` (default: the run's sample-index seed): the prompts' seed;
* ``name=NAME`` (default ``synthetic``).

A DIST is ``N`` or ``fixed(N)``; ``normal(MEAN,STDDEV)`` (rounded, then
clipped: an ISL to at least ``prefix + 1``, an OSL to 1 ..
``--max-output-tokens``); ``uniform(MIN,MAX)`` (integers, both ends
included); ``hist(LEN:WEIGHT,LEN:WEIGHT,...)``, lengths drawn with those
relative weights, or ``hist(@FILE)`` with one ``LEN:WEIGHT`` (or ``LEN
WEIGHT``, ``LEN,WEIGHT``) per line, ``#`` comments allowed.  A length that
cannot be met -- an ISL not above the prefix, an OSL above the cap -- is
refused, except a normal's tail, which is clipped.

The configured spec travels to every engine process and Ray actor with the
run's configuration, and each builds the same prompts from it
(:mod:`.synthetic`): the rules fill in what the build needs besides the
keys -- the tokenizer, the seed, whether the prompts go as ids or text, the
output cap (:class:`SyntheticSpec`).  Every mistake is one line
(:class:`~mlpe_fast.errors.UsageError`).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import msgspec

from ..errors import UsageError

__all__ = (
    "DEFAULT_SAMPLES",
    "SYNTHETIC_PREFIX",
    "LengthDist",
    "PromptForm",
    "SyntheticSpec",
    "parse_length",
    "parse_synthetic_arg",
    "synthetic_from_yaml",
)

#: What a ``--dataset`` value starts with to be synthetic.
SYNTHETIC_PREFIX = "synthetic:"
DEFAULT_SAMPLES = 1000
#: ``ids``: token ids (``/v1/completions``), ``text``: text (the chat route).
PromptForm = Literal["ids", "text"]
LengthKind = Literal["fixed", "normal", "uniform", "hist"]

_KEYS = ("isl", "osl", "prefix", "samples", "seed", "name")
_CALL = re.compile(r"\s*([a-z]+)\s*\((.*)\)\s*", re.DOTALL)
_INT = re.compile(r"\s*\d+\s*")
_SYNTAX = "N, fixed(N), normal(MEAN,STDDEV), uniform(MIN,MAX) or hist(LEN:WEIGHT,...|@FILE)"


class LengthDist(msgspec.Struct, frozen=True, kw_only=True):
    """A distribution of lengths in tokens (module docstring).

    ``a``/``b``: fixed's N (``a``), normal's mean and standard deviation,
    uniform's least and greatest; ``bins``: a histogram's (length, weight)
    pairs, in the order given.
    """

    kind: LengthKind
    a: float = 0.0
    b: float = 0.0
    bins: tuple[tuple[int, float], ...] = ()

    @property
    def text(self) -> str:
        """The distribution as it is written (``normal(1024,128)``)."""
        if self.kind == "fixed":
            return f"fixed({int(self.a)})"
        if self.kind == "hist":
            return "hist(" + ",".join(f"{n}:{_num(w)}" for n, w in self.bins) + ")"
        return f"{self.kind}({_num(self.a)},{_num(self.b)})"

    @property
    def least(self) -> int:
        """The smallest length it can draw before clipping (a normal: 1)."""
        if self.kind == "hist":
            return min(n for n, _ in self.bins)
        return 1 if self.kind == "normal" else int(self.a)

    @property
    def greatest(self) -> float:
        """The largest length it can draw before clipping (a normal: its
        mean, the most that is refused outright)."""
        if self.kind == "hist":
            return max(n for n, _ in self.bins)
        if self.kind == "uniform":
            return self.b
        return self.a

    def draw(self, rng: random.Random, low: int, high: int | None = None) -> int:
        """One length, clipped to ``low`` .. ``high``."""
        if self.kind == "fixed":
            n = int(self.a)
        elif self.kind == "normal":
            n = round(rng.normalvariate(self.a, self.b))
        elif self.kind == "uniform":
            n = rng.randint(int(self.a), int(self.b))
        else:
            n = rng.choices([n for n, _ in self.bins], [w for _, w in self.bins])[0]
        n = max(low, n)
        return n if high is None else min(high, n)


class SyntheticSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A synthetic dataset: the keys given (module docstring) and what the
    run's configuration fills in (``config/rules.py``, ``synthetic_datasets``).

    Attributes:
        isl, osl: the prompts' and the outputs' length distributions.
        prefix: tokens every prompt starts with.
        samples: prompts.
        seed: the prompts' seed (None until the rules fill it in).
        tokenizer: the run's tokenizer, which the prompts are built with.
        form: ``ids`` or ``text`` (``/v1/completions`` takes ids: exact by
            construction; the chat route text).
        osl_cap: the run's output cap, which no OSL exceeds.
    """

    isl: LengthDist
    osl: LengthDist
    prefix: int = 0
    samples: int = DEFAULT_SAMPLES
    seed: int | None = None
    tokenizer: str | None = None
    form: PromptForm | None = None
    osl_cap: int | None = None

    @property
    def text(self) -> str:
        """The spec as ``--dataset`` takes it (without what the rules fill in
        but the seed, so that the text names the prompts)."""
        parts = [f"isl={self.isl.text}", f"osl={self.osl.text}"]
        if self.prefix:
            parts.append(f"prefix={self.prefix}")
        parts.append(f"samples={self.samples}")
        if self.seed is not None:
            parts.append(f"seed={self.seed}")
        return SYNTHETIC_PREFIX + ",".join(parts)

    def check(self, where: str) -> None:
        """Refuses lengths that cannot be met (module docstring): an ISL
        not above the prefix, an OSL above ``osl_cap``."""
        if self.isl.least <= self.prefix and self.isl.kind != "normal":
            raise UsageError(
                f"{where}: isl={self.isl.text} has prompts of {self.isl.least} tokens, "
                f"not above prefix={self.prefix} (the ISL counts the prefix)"
            )
        if self.isl.kind == "normal" and self.isl.a <= self.prefix:
            raise UsageError(
                f"{where}: isl={self.isl.text}: the mean is not above prefix={self.prefix} "
                "(the ISL counts the prefix)"
            )
        cap = self.osl_cap
        if cap is not None and self.osl.greatest > cap:
            what = "mean" if self.osl.kind == "normal" else "longest"
            raise UsageError(
                f"{where}: osl={self.osl.text}: its {what} output, {_num(self.osl.greatest)} "
                f"tokens, is above the output cap {cap} (--max-output-tokens): raise it"
            )


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def split_options(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "(":
            depth += 1
        elif c == ")":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_synthetic_arg(text: str, origin: str) -> tuple[SyntheticSpec, str]:
    """``KEY=VALUE,...`` after ``synthetic:`` (module docstring): the spec
    and its ``name`` ("" when not given).

    Raises:
        UsageError: an option that is not key=value, an unknown key, a
            missing isl or osl, a bad value.
    """
    options: dict[str, str] = {}
    for item in split_options(text):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            raise UsageError(f"{origin}: option {item.strip()!r} is not key=value, e.g. isl=1024")
        if key not in _KEYS:
            raise UsageError(
                f"{origin}: unknown synthetic option {key!r} (valid: {', '.join(_KEYS)})"
            )
        if key in options:
            raise UsageError(f"{origin}: {key} is given twice")
        options[key] = value.strip()
    name = options.pop("name", "")
    return _spec(options, origin), name


def synthetic_from_yaml(block: object, where: str) -> SyntheticSpec:
    """A ``datasets[]`` entry's ``synthetic:`` block: the same keys, with
    numbers where numbers go (``isl: 1024``, ``isl: normal(1024,128)``).

    Raises:
        UsageError: not a mapping, an unknown key, a bad value.
    """
    if not isinstance(block, dict):
        raise UsageError(f"{where}: expected a mapping of isl, osl, prefix, samples, seed")
    options: dict[str, str] = {}
    for key, value in block.items():
        if key not in _KEYS or key == "name":
            known = ", ".join(k for k in _KEYS if k != "name")
            raise UsageError(f"unknown key {f'{where}.{key}'!r} (valid: {known})")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise UsageError(f"{where}.{key}: expected a number or {_SYNTAX}, got {value!r}")
        options[key] = str(value)
    return _spec(options, where)


def _spec(options: Mapping[str, str], origin: str) -> SyntheticSpec:
    for key in ("isl", "osl"):
        if key not in options:
            raise UsageError(f"{origin}: a synthetic dataset needs {key}=DIST ({_SYNTAX})")
    prefix = _count(options.get("prefix", "0"), origin, "prefix", minimum=0)
    samples = _count(options.get("samples", str(DEFAULT_SAMPLES)), origin, "samples")
    seed = _count(options["seed"], origin, "seed", minimum=0) if "seed" in options else None
    spec = SyntheticSpec(
        isl=parse_length(options["isl"], f"{origin}: isl"),
        osl=parse_length(options["osl"], f"{origin}: osl"),
        prefix=prefix,
        samples=samples,
        seed=seed,
    )
    spec.check(origin)
    return spec


def _count(value: str, origin: str, key: str, minimum: int = 1) -> int:
    if not _INT.fullmatch(value) or int(value) < minimum:
        what = "a positive integer" if minimum else "an integer >= 0"
        raise UsageError(f"{origin}: {key} must be {what}, got {value!r}")
    return int(value)


def parse_length(text: str, where: str) -> LengthDist:
    """One DIST (module docstring).

    Raises:
        UsageError: not one of the forms, a length below 1, a standard
            deviation below 0, MIN above MAX, a weight that is not positive,
            or a histogram file that cannot be read.
    """
    text = text.strip()
    if _INT.fullmatch(text):
        return _fixed(text, where)
    call = _CALL.fullmatch(text)
    if call is None:
        raise UsageError(f"{where}: {text!r} is not {_SYNTAX}")
    kind, inner = call.group(1), call.group(2).strip()
    if kind == "fixed":
        return _fixed(inner, where)
    if kind in ("normal", "uniform"):
        a, b = _pair(inner, where, kind)
        if kind == "normal":
            if a < 1 or b < 0:
                raise UsageError(f"{where}: normal(MEAN,STDDEV) needs MEAN >= 1, STDDEV >= 0")
            return LengthDist(kind="normal", a=a, b=b)
        if not (a.is_integer() and b.is_integer()) or a < 1 or a > b:
            raise UsageError(f"{where}: uniform(MIN,MAX) needs integers 1 <= MIN <= MAX")
        return LengthDist(kind="uniform", a=a, b=b)
    if kind in ("hist", "histogram"):
        if inner.startswith("@"):
            return _histogram(_histogram_file(inner[1:].strip(), where), where)
        return _histogram([(item, where) for item in inner.split(",")], where)
    raise UsageError(f"{where}: {kind}(...) is not {_SYNTAX}")


def _fixed(text: str, where: str) -> LengthDist:
    if not _INT.fullmatch(text) or int(text) < 1:
        raise UsageError(f"{where}: a length is a positive integer, got {text!r}")
    return LengthDist(kind="fixed", a=float(int(text)))


def _pair(inner: str, where: str, kind: str) -> tuple[float, float]:
    items = inner.split(",")
    try:
        if len(items) == 2:
            a, b = (float(v) for v in items)
            if math.isfinite(a) and math.isfinite(b):
                return a, b
    except ValueError:
        pass
    names = "MEAN,STDDEV" if kind == "normal" else "MIN,MAX"
    raise UsageError(f"{where}: {kind}({inner}) is not {kind}({names})")


def _histogram(items: list[tuple[str, str]], where: str) -> LengthDist:
    bins: list[tuple[int, float]] = []
    for item, at in items:
        length, sep, weight = item.strip().partition(":")
        value: float | None = None
        try:
            value = float(weight) if sep else None
        except ValueError:
            value = None
        if not _INT.fullmatch(length) or int(length) < 1 or value is None:
            raise UsageError(f"{at}: {item.strip()!r} is not LEN:WEIGHT, e.g. 1024:3")
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"{at}: the weight of {item.strip()!r} must be a positive number")
        bins.append((int(length), value))
    if not bins:
        raise UsageError(f"{where}: an empty histogram")
    return LengthDist(kind="hist", bins=tuple(bins))


def _histogram_file(name: str, where: str) -> list[tuple[str, str]]:
    path = Path(name).expanduser()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or error
        raise UsageError(f"{where}: histogram file {name}: {reason}") from None
    items = []
    for lineno, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if line:
            # LEN:WEIGHT, LEN WEIGHT or LEN,WEIGHT
            items.append((re.sub(r"\s*[,\s]\s*", ":", line, count=1), f"{path}:{lineno}"))
    if not items:
        raise UsageError(f"{where}: histogram file {name} has no LEN:WEIGHT line")
    return items
