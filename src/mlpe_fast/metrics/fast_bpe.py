"""Exact token counts of ASCII text for byte-level BPE tokenizers, without ``encode``.

Why.  MLPerf Endpoints counts output tokens on the client with the model's
reference tokenizer, twice per response (OSL over the whole output, TPOT
tokens over the text after the first content-bearing event;
``mlperf-endpoints-spec.md`` §1.2).  ``tokenizers``' ``encode_batch_fast``
costs about 1.75 µs of CPU per token on the 2-core development host (0.55 M
tokens per CPU-second): counting 100,000 responses of 500 tokens twice takes
about 80 s on two cores.  Profiling puts that cost in the ``tokenizers``
pipeline (regex pre-tokenization through Oniguruma, building ``Encoding``
objects), not in the BPE merges.  This module computes the same number for
most outputs at a fraction of the cost (figures at the end).

How.  For a tokenizer whose pipeline is "split on added tokens, pre-tokenize
with regexes, map bytes, BPE each pre-token", the count of a text is the
number of added-token matches plus, for every pre-token, the number of BPE
tokens of that pre-token alone.  So :class:`FastBPECounter`

1. checks ``text.isascii()``;
2. looks for added tokens (one ``re.search`` over all their contents); if
   some occur, splits on them the way ``tokenizers`` does (below);
3. pre-tokenizes with the pre-tokenizer's regexes translated to ASCII-only
   Python :mod:`re` patterns (``findall``, in C);
4. sums a per-pre-token count from a cache (a ``dict`` whose ``__missing__``
   asks the tokenizer's own BPE model: ``len(model.tokenize(word))`` of the
   byte-level-mapped pre-token).

Why it is exact.

* *Normalizer*: only none or Unicode normalization forms (NFC, NFD, NFKC,
  NFKD) are accepted; they leave ASCII unchanged.
* *Added tokens*: ``tokenizers`` first splits the raw text on the contents
  of added tokens with ``normalized: false``, then the normalized gaps on
  the (normalized) contents of those with ``normalized: true``; each phase
  takes the leftmost, then longest, match (Aho-Corasick
  ``LeftmostLongest``); each match is one token and the gaps are
  pre-tokenized independently.  A Python alternation of the literal
  contents sorted longest first finds the same matches.  Tokens with
  ``lstrip``, ``rstrip`` or ``single_word`` change what is matched; a text
  containing one of their contents is not counted here.
* *Regexes*: both engines are backtracking, leftmost-first engines with the
  same priorities for alternation and quantifiers.  Restricted to ASCII
  text, ``\\p{L}`` is ``[A-Za-z]``, ``\\p{N}`` is ``[0-9]``, classes such as
  ``\\p{Lo}`` or ``\\p{M}`` have no member at all, and Oniguruma's ``\\s``,
  ``\\d``, ``\\w`` are exactly :mod:`re`'s ``re.ASCII`` classes (``\\s`` is
  ``[\\t\\n\\v\\f\\r ]``: not ``\\x1c``-``\\x1f``, which ``str.isspace``
  accepts).  The translator (:func:`translate_pattern`) computes every
  character class as an explicit set of ASCII code points (general
  categories from :mod:`unicodedata`) and refuses, rather than guesses,
  every construct it does not know to mean the same in both engines
  (``^``, ``$``, backreferences, POSIX brackets, nested classes, classes
  under ``(?i)``...).  A pattern that can match the empty string is
  refused too: the engines step past empty matches differently.  A
  ``Split`` with behaviour ``Isolated`` keeps the gaps between matches as
  pre-tokens; they are kept here too (``re.split`` with a capturing
  group).
* *Byte-level mapping*: ASCII bytes map to GPT-2's printable alphabet with
  a 128-entry :meth:`str.translate` table; the model then sees exactly the
  string the pipeline would give it.  Dropout is refused (it is random);
  ``ignore_merges``, ``byte_fallback``, ``fuse_unk`` and prefixes/suffixes
  act inside ``model.tokenize`` and are therefore reproduced.

One scan for both counts.  The TPOT text is a suffix ``text[b:]`` of the
output text.  Leftmost-first matching that resumes at a match boundary
depends only on the text to its right, provided the pattern does not look
left (no lookbehind, ``\\b``, ``\\B``, ``\\A``; ``\\z``/``\\Z`` are treated
the same way, conservatively).  So when ``b`` falls on a piece boundary at
every level (added-token split, each regex level, and not inside a
pre-token), the pieces of ``text[b:]`` are exactly the pieces of ``text``
after ``b``, and ``count(text[b:])`` is the total minus the counts of the
pieces before ``b``: :meth:`FastBPECounter.count_with_suffix` scans once.
Otherwise it scans the suffix separately; the answer is the same.

Eligible tokenizers (:func:`ineligibility_reason` says why not): model
``BPE`` without dropout; normalizer none or NFC/NFD/NFKC/NFKD (alone or in a
``Sequence``); pre-tokenizer ``ByteLevel(add_prefix_space=False,
use_regex=True)`` (GPT-2's regex), or a ``Sequence`` of one or more
``Split(Regex, behavior="Isolated", invert=False)`` followed by
``ByteLevel(add_prefix_space=False, use_regex=False)`` (Llama 3, Qwen 2/3,
GPT-OSS o200k, DeepSeek V3), whose regexes translate; ``encode_special_tokens``
off.  Counts are those of ``encode(text, add_special_tokens=False)`` with
truncation and padding off, as :class:`~mlpe_fast.metrics.tokens.TokenCounter`
counts.

Falls back (``None``; the caller encodes with ``tokenizers``): non-ASCII
text, and text containing an added token with ``lstrip``, ``rstrip`` or
``single_word``, or any text the BPE model fails on.

Pre-tokenizers with several ``Split`` levels apply them in turn, each to
the pieces of the one before; a level whose regex matches no ASCII text
(DeepSeek V3's CJK level) leaves every piece whole and is skipped.

Cost, measured with ``bench/bench_tokens.py`` on the 2-core development host
(32k-token GPT-2-style BPE, 100,000 distinct ASCII responses of about 500
tokens, OSL and TPOT counts from one scan, cold cache): 21 s of one core
per 100,000 responses, 0.21 µs of CPU per counted token (4.75 M counted
tokens per CPU-second; 0.42 µs per token of output scanned), against 2.0 µs
per token and 103 s on two cores for ``encode_batch_fast`` on the same
texts.  With 10 % of the responses non-ASCII (encoded by ``tokenizers``):
31 s one after the other, 25 s in :class:`~mlpe_fast.metrics.tokens.TokenCounter`,
which encodes those in a second thread while this path counts the rest.
Llama 3 and o200k patterns cost about the same per token; DeepSeek V3's
three levels about 1.5 times as much.

The per-pre-token cache is bounded (cleared past ``cache_limit`` entries)
and is not thread-safe: use one :class:`FastBPECounter` from one thread.

Native twin.  For the pre-tokenizers of :data:`NATIVE_FAMILIES` the split
and the cache also exist in C (``csrc/mlpe_bpe.c``, bound by
:mod:`mlpe_fast.metrics._bpe_c`; :func:`mlpe_fast.metrics._bpe.bpe_counter`
chooses), with this class as its pure-Python twin: the same counts and
refusals, about 7x cheaper on prose (docs/performance.md).
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = (
    "BYTE_LEVEL_ASCII",
    "DEFAULT_CACHE_LIMIT",
    "GPT2_PATTERN",
    "NATIVE_FAMILIES",
    "FastBPECounter",
    "PatternNotTranslatable",
    "TranslatedPattern",
    "ineligibility_reason",
    "translate_pattern",
)

#: Entries of the per-pre-token cache past which it is cleared.  One entry
#: takes about 85 bytes: a million bound the cache near 85 MB.  100,000
#: distinct responses of 500 tokens held about 130,000 pre-tokens.
DEFAULT_CACHE_LIMIT = 1_000_000

#: The regex of ``tokenizers``' ``ByteLevel`` pre-tokenizer with
#: ``use_regex=True`` (GPT-2's).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

#: The pre-tokenizers the C scanner of ``csrc/mlpe_bpe.c`` hand-codes, as
#: their tokenizer.json files spell the regexes (Split levels that match no
#: ASCII, DeepSeek V3's CJK one, left out as :func:`ineligibility_reason`'s
#: reading leaves them out).  A tokenizer whose levels translate to these
#: (:func:`translate_pattern`, so that spellings of the same classes agree)
#: is counted in C where the native core is built; any other eligible one by
#: :class:`FastBPECounter` alone.
NATIVE_FAMILIES: dict[str, tuple[str, ...]] = {
    "gpt2": (GPT2_PATTERN,),
    "llama3": (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "qwen2": (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "o200k": (
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
        r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "deepseek_v3": (
        r"\p{N}{1,3}",
        r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
        r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
}

_UNICODE_NORMALIZERS = frozenset({"NFC", "NFD", "NFKC", "NFKD"})


# Regex translation ---------------------------------------------------------------------


class PatternNotTranslatable(ValueError):
    """An Oniguruma pattern this module cannot translate with certainty."""


class TranslatedPattern(NamedTuple):
    """An Oniguruma pattern rewritten for :mod:`re` on ASCII text.

    ``pattern`` compiles with ``re.ASCII`` and has no capturing group;
    ``local`` is False when a match can depend on the text left of where
    it starts (lookbehind, word boundaries, string anchors);
    ``matches_ascii`` is False when no ASCII text has a match (such a
    ``Split`` leaves ASCII text whole).
    """

    pattern: str
    local: bool
    matches_ascii: bool = True


_ASCII = frozenset(range(128))
_NEVER = r"[^\x00-\x7f]"  # one character wide, matches no ASCII character


def _ascii_where(test: Callable[[str], bool]) -> frozenset[int]:
    return frozenset(i for i in range(128) if test(chr(i)))


_SPACE = frozenset(map(ord, "\t\n\v\f\r "))  # Unicode White_Space within ASCII
_DIGIT = _ascii_where(lambda c: "0" <= c <= "9")
_WORD = _ascii_where(lambda c: c.isalnum() or c == "_")
_SHORTHANDS: dict[str, frozenset[int]] = {
    "s": _SPACE,
    "S": _ASCII - _SPACE,
    "d": _DIGIT,
    "D": _ASCII - _DIGIT,
    "w": _WORD,
    "W": _ASCII - _WORD,
}
_CONTROL_ESCAPES = {"t": 9, "n": 10, "v": 11, "f": 12, "r": 13, "a": 7, "e": 27}
_ANCHORS = {"b": r"\b", "B": r"\B", "A": r"\A", "z": r"\Z", "Z": r"(?=\n?\Z)"}

# Unicode general categories by long name (Oniguruma also accepts these).
_CATEGORY_NAMES = {
    "letter": "L",
    "casedletter": "LC",
    "uppercaseletter": "Lu",
    "lowercaseletter": "Ll",
    "titlecaseletter": "Lt",
    "modifierletter": "Lm",
    "otherletter": "Lo",
    "mark": "M",
    "combiningmark": "M",
    "nonspacingmark": "Mn",
    "spacingmark": "Mc",
    "enclosingmark": "Me",
    "number": "N",
    "decimalnumber": "Nd",
    "letternumber": "Nl",
    "othernumber": "No",
    "punctuation": "P",
    "connectorpunctuation": "Pc",
    "dashpunctuation": "Pd",
    "openpunctuation": "Ps",
    "closepunctuation": "Pe",
    "initialpunctuation": "Pi",
    "finalpunctuation": "Pf",
    "otherpunctuation": "Po",
    "symbol": "S",
    "mathsymbol": "Sm",
    "currencysymbol": "Sc",
    "modifiersymbol": "Sk",
    "othersymbol": "So",
    "separator": "Z",
    "spaceseparator": "Zs",
    "lineseparator": "Zl",
    "paragraphseparator": "Zp",
    "other": "C",
    "control": "Cc",
    "format": "Cf",
    "surrogate": "Cs",
    "privateuse": "Co",
    "unassigned": "Cn",
}
# Scripts: only Latin has ASCII members (the letters); these have none.
_SCRIPTS_WITHOUT_ASCII = frozenset(
    {
        "han", "hani", "hiragana", "hira", "katakana", "kana", "hangul", "hang",
        "cyrillic", "cyrl", "greek", "grek", "arabic", "arab", "hebrew", "hebr",
        "thai", "devanagari", "deva",
    }
)  # fmt: skip


def _category_members(code: str) -> frozenset[int]:
    if code == "LC":
        return _ascii_where(lambda c: unicodedata.category(c) in ("Lu", "Ll", "Lt"))
    return _ascii_where(lambda c: unicodedata.category(c).startswith(code))


def _property_members(name: str) -> frozenset[int]:
    """ASCII members of ``\\p{name}`` (Oniguruma ignores case, spaces, ``_``, ``-``)."""
    key = re.sub(r"[ _-]", "", name).lower()
    if key in _CATEGORY_NAMES:
        return _category_members(_CATEGORY_NAMES[key])
    codes = {code.lower(): code for code in _CATEGORY_NAMES.values()}
    if key in codes:
        return _category_members(codes[key])
    if key in ("latin", "latn"):
        return _ascii_where(lambda c: c.isascii() and c.isalpha())
    if key in _SCRIPTS_WITHOUT_ASCII:
        return frozenset()
    raise PatternNotTranslatable(f"unknown character property \\p{{{name}}}")


def _class_text(members: frozenset[int]) -> str:
    """A :mod:`re` character class matching exactly ``members`` (ASCII)."""
    if not members:
        return _NEVER
    parts: list[str] = []
    ordered = sorted(members)
    start = prev = ordered[0]
    for code in [*ordered[1:], -2]:
        if code == prev + 1:
            prev = code
            continue
        parts.append(f"\\x{start:02x}" if start == prev else f"\\x{start:02x}-\\x{prev:02x}")
        start = prev = code
    return "[" + "".join(parts) + "]"


_HEX = frozenset("0123456789abcdefABCDEF")
# {n}, {n,}, {n,m}, {,m} (and {} or {,}, refused after matching).
_INTERVAL = re.compile(r"\{([0-9]*)(,?)([0-9]*)\}")


class _Node(NamedTuple):
    text: str  # the :mod:`re` source
    min_width: int
    zero_width: bool  # a lookaround or anchor: cannot be quantified
    never: bool = False  # matches no ASCII text


def _set_node(members: frozenset[int]) -> _Node:
    return _Node(_class_text(members), 1, False, not members)


class _Translator:
    """Recursive descent over the Oniguruma subset described in the module
    docstring; every other construct raises :class:`PatternNotTranslatable`."""

    def __init__(self, source: str) -> None:
        self.src = source
        self.pos = 0
        self.local = True

    # -- helpers ----------------------------------------------------------

    def peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.src[i] if i < len(self.src) else ""

    def fail(self, what: str) -> PatternNotTranslatable:
        return PatternNotTranslatable(f"{what} at offset {self.pos} of {self.src!r}")

    def take(self, n: int = 1) -> str:
        text = self.src[self.pos : self.pos + n]
        self.pos += n
        return text

    # -- grammar ----------------------------------------------------------

    def translate(self) -> TranslatedPattern:
        case_insensitive = False
        if self.src.startswith("(?i)"):  # whole-pattern flag; anywhere else it is refused
            self.pos = 4
            case_insensitive = True
        node = self.alternation(case_insensitive)
        if self.pos != len(self.src):
            raise self.fail("unbalanced ')'")
        if node.min_width == 0:
            raise PatternNotTranslatable(f"{self.src!r} can match the empty string")
        text = f"(?i:{node.text})" if case_insensitive else node.text
        return TranslatedPattern(text, self.local, not node.never)

    def alternation(self, ci: bool) -> _Node:
        branches = [self.sequence(ci)]
        while self.peek() == "|":
            self.take()
            branches.append(self.sequence(ci))
        return _Node(
            "|".join(b.text for b in branches),
            min(b.min_width for b in branches),
            False,
            all(b.never for b in branches),
        )

    def sequence(self, ci: bool) -> _Node:
        parts: list[str] = []
        width = 0
        never = False
        while self.peek() not in ("", "|", ")"):
            atom = self.atom(ci)
            atom = self.quantified(atom)
            parts.append(atom.text)
            width += atom.min_width
            never = never or atom.never
        return _Node("".join(parts), width, False, never)

    def quantified(self, atom: _Node) -> _Node:
        char = self.peek()
        if char in ("*", "+", "?"):
            self.take()
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
            quantifier = char
        elif char == "{":
            match = _INTERVAL.match(self.src, self.pos)
            if match is None or not (match.group(1) or match.group(3)):
                raise self.fail("'{' that is not an interval")
            self.pos = match.end()
            least, comma, most = match.groups()
            low = int(least or 0)
            high = (int(most) if most else None) if comma else low
            if high is not None and high < low:
                raise self.fail("interval with max < min")
            if self.peek() == "+" or (high == low and self.peek() == "?"):
                # Oniguruma reads {n,m}+ as a repeated interval and {n}? as an
                # optional one, where re reads possessive and lazy.
                raise self.fail(f"{self.peek()!r} after an interval")
            upper = "" if high is None else str(high)
            quantifier = f"{{{low}}}" if high == low else f"{{{low},{upper}}}"
        else:
            return atom
        if atom.zero_width:
            raise self.fail("quantified assertion")
        if atom.min_width == 0 and (high is None or high > 1):
            raise self.fail("repeated subpattern that can match the empty string")
        if self.peek() == "?":
            quantifier += self.take()  # lazy
        elif self.peek() == "+":
            quantifier += self.take()  # possessive: re supports it from Python 3.11
        if self.peek() in ("*", "+", "?", "{"):
            raise self.fail("stacked quantifiers")
        return _Node(
            f"(?:{atom.text}){quantifier}", atom.min_width * low, False, atom.never and low > 0
        )

    def atom(self, ci: bool) -> _Node:
        char = self.take()
        if char == "(":
            return self.group(ci)
        if char == "[":
            if ci:
                raise self.fail("character class under (?i)")
            return _set_node(self.char_class())
        if char == ".":
            if ci:
                raise self.fail("'.' under (?i)")
            return _set_node(_ASCII - {10})
        if char in ("^", "$"):
            raise self.fail(f"line anchor {char!r}")
        if char in ("*", "+", "?", "{"):
            raise self.fail(f"quantifier {char!r} with nothing to repeat")
        if char == "\\":
            return self.escape(ci)
        return self.literal(ord(char), ci)

    def literal(self, code: int, ci: bool) -> _Node:
        if code >= 128:
            if ci:  # may case-fold to ASCII (U+017F to 's', U+212A to 'k')
                raise self.fail("non-ASCII literal under (?i)")
            return _set_node(frozenset())
        return _Node(re.escape(chr(code)), 1, False)

    def group(self, ci: bool) -> _Node:
        zero_width = False
        if self.peek() != "?":
            opener = "(?:"
        elif self.src.startswith("?:", self.pos):
            opener = "(?:"
            self.take(2)
        elif self.src.startswith("?i:", self.pos):
            opener = "(?i:"
            self.take(3)
            ci = True
        elif self.peek(1) in ("=", "!"):
            opener = "(" + self.take(2)
            zero_width = True
        elif self.src.startswith(("?<=", "?<!"), self.pos):
            opener = "(" + self.take(3)
            zero_width = True
            self.local = False
        elif self.src.startswith("?>", self.pos):
            opener = "(" + self.take(2)  # atomic: re supports it from Python 3.11
        elif match := re.compile(r"\?(?:<[A-Za-z_]\w*>|P<[A-Za-z_]\w*>)").match(self.src, self.pos):
            opener = "(?:"  # named group: nothing refers to it without backreferences
            self.pos = match.end()
        else:
            raise self.fail("unsupported group")
        inner = self.alternation(ci)
        if self.take() != ")":
            raise self.fail("unclosed group")
        # A negative lookaround matches where its content does not: never "never".
        never = inner.never and not opener.endswith("!")
        return _Node(
            opener + inner.text + ")", 0 if zero_width else inner.min_width, zero_width, never
        )

    def char_escape(self, letter: str) -> int | None:
        """The code point of a character escape after ``\\`` + ``letter``, or None."""
        if letter in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[letter]
        if letter == "x":
            if self.peek() == "{":
                match = re.compile(r"\{([0-9a-fA-F]{1,8})\}").match(self.src, self.pos)
                if match is None:
                    raise self.fail("bad \\x{...}")
                self.pos = match.end()
                return int(match.group(1), 16)
            digits = ""
            while len(digits) < 2 and self.peek() in _HEX and self.peek():
                digits += self.take()
            if not digits:
                raise self.fail("bad \\x")
            return int(digits, 16)
        if letter == "u":
            digits = self.src[self.pos : self.pos + 4]
            if len(digits) != 4 or not set(digits) <= _HEX:
                raise self.fail("bad \\u")
            self.pos += 4
            return int(digits, 16)
        if letter.isascii() and not letter.isalnum() and letter:
            return ord(letter)  # escaped punctuation or space
        return None

    def property_set(self, letter: str) -> frozenset[int]:
        """Members of ``\\p{...}`` / ``\\P{...}`` / ``\\p{^...}``."""
        match = re.compile(r"\{(\^?)([A-Za-z][A-Za-z0-9 _-]*)\}").match(self.src, self.pos)
        if match is None:
            raise self.fail(f"bad \\{letter}")
        self.pos = match.end()
        members = _property_members(match.group(2))
        negated = (letter == "P") != bool(match.group(1))
        return _ASCII - members if negated else members

    def escape(self, ci: bool) -> _Node:
        letter = self.take()
        if letter in _SHORTHANDS or letter in ("p", "P"):
            if ci:
                raise self.fail(f"\\{letter} under (?i)")
            members = _SHORTHANDS[letter] if letter in _SHORTHANDS else self.property_set(letter)
            return _set_node(members)
        if letter in _ANCHORS:
            self.local = False
            return _Node(_ANCHORS[letter], 0, True)
        code = self.char_escape(letter)
        if code is None:
            raise self.fail(f"unsupported escape \\{letter}")
        return self.literal(code, ci)

    def class_char(self) -> int | frozenset[int]:
        """One member of a bracket class: a code point or a set."""
        char = self.take()
        if char == "":
            raise self.fail("unclosed character class")
        if char == "[":
            raise self.fail("nested class or POSIX bracket")
        if char == "&" and self.peek() == "&":
            raise self.fail("class intersection")
        if char != "\\":
            return ord(char)
        letter = self.take()
        if letter in _SHORTHANDS:
            return _SHORTHANDS[letter]
        if letter in ("p", "P"):
            return self.property_set(letter)
        code = self.char_escape(letter)
        if code is None:
            raise self.fail(f"unsupported escape \\{letter} in a class")
        return code

    def char_class(self) -> frozenset[int]:
        negated = self.peek() == "^"
        if negated:
            self.take()
        if self.peek() == "]":
            raise self.fail("']' first in a class")
        members: set[int] = set()
        while self.peek() != "]":
            item = self.class_char()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.take()
                if isinstance(item, frozenset):
                    raise self.fail("range from a class")
                end = self.class_char()
                if isinstance(end, frozenset) or end < item:
                    raise self.fail("bad range")
                if self.peek() == "-" and self.peek(1) != "]":
                    raise self.fail("'-' after a range")
                members.update(range(item, min(end, 127) + 1))
            elif isinstance(item, frozenset):
                members |= item
            else:
                members.add(item)
        self.take()  # "]"
        ascii_members = frozenset(m for m in members if m < 128)
        return _ASCII - ascii_members if negated else ascii_members


def translate_pattern(source: str) -> TranslatedPattern:
    """Translates an Oniguruma pattern (as ``tokenizers`` compiles it) into
    a :mod:`re` pattern that finds the same matches in ASCII text when
    compiled with ``re.ASCII``.

    Raises:
        PatternNotTranslatable: the pattern uses a construct outside the
            supported subset, or can match the empty string.
    """
    return _Translator(source).translate()


# Byte-level mapping --------------------------------------------------------------------


def _gpt2_byte_alphabet() -> dict[int, str]:
    """GPT-2's bytes-to-unicode table: printable bytes map to themselves,
    the others to code points from 256 upwards, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


#: ``str.translate`` table of the ASCII bytes (ASCII text is its own UTF-8).
BYTE_LEVEL_ASCII = {b: c for b, c in _gpt2_byte_alphabet().items() if b < 128}
_BYTE_LEVEL_ASCII = BYTE_LEVEL_ASCII


# Pipeline reading ----------------------------------------------------------------------


class _Pipeline(NamedTuple):
    patterns: tuple[TranslatedPattern, ...]  # pre-tokenizer regex levels, outermost first


def _normalizer_reason(spec: Any) -> str | None:
    if spec is None:
        return None
    kind = spec.get("type")
    if kind in _UNICODE_NORMALIZERS:
        return None
    if kind == "Sequence":
        for inner in spec.get("normalizers", ()):
            reason = _normalizer_reason(inner)
            if reason is not None:
                return reason
        return None
    return f"normalizer {kind} may change ASCII text"


def _byte_level_reason(spec: dict[str, Any], use_regex: bool) -> str | None:
    if spec.get("add_prefix_space", True):
        return "ByteLevel pre-tokenizer with add_prefix_space"
    if bool(spec.get("use_regex", True)) != use_regex:
        return f"ByteLevel pre-tokenizer with use_regex={not use_regex} in this position"
    return None


def _translate(source: str) -> TranslatedPattern | str:
    try:
        translated = translate_pattern(source)
        re.compile(translated.pattern, re.ASCII)
    except PatternNotTranslatable as exc:
        return f"pre-tokenizer regex not translatable: {exc}"
    except re.error as exc:
        return f"pre-tokenizer regex not supported by this Python's re: {exc}"
    return translated


def _pre_tokenizer(spec: Any) -> _Pipeline | str:
    if spec is None:
        return "no pre-tokenizer"
    kind = spec.get("type")
    if kind == "ByteLevel":
        reason = _byte_level_reason(spec, use_regex=True)
        if reason is not None:
            return reason
        translated = _translate(GPT2_PATTERN)
        if isinstance(translated, str):  # pragma: no cover - GPT-2's regex translates
            return translated
        return _Pipeline((translated,))
    if kind != "Sequence":
        return f"pre-tokenizer {kind}"
    steps = list(spec.get("pretokenizers", ()))
    if len(steps) < 2 or steps[-1].get("type") != "ByteLevel":
        return "pre-tokenizer Sequence not of Split steps ending in ByteLevel"
    reason = _byte_level_reason(steps[-1], use_regex=False)
    if reason is not None:
        return reason
    patterns: list[TranslatedPattern] = []
    for step in steps[:-1]:
        if step.get("type") != "Split":
            return f"pre-tokenizer Sequence with a {step.get('type')} step"
        if step.get("behavior") != "Isolated" or step.get("invert"):
            return (
                f"Split pre-tokenizer with behavior {step.get('behavior')} "
                f"and invert={step.get('invert')}"
            )
        pattern = step.get("pattern") or {}
        if "Regex" not in pattern:
            return "Split pre-tokenizer with a string pattern"
        translated = _translate(pattern["Regex"])
        if isinstance(translated, str):
            return translated
        patterns.append(translated)
    # A Split that matches no ASCII text leaves every piece whole: skip it
    # (DeepSeek V3's CJK level), keeping one level.
    useful = tuple(p for p in patterns if p.matches_ascii)
    return _Pipeline(useful or tuple(patterns[:1]))


class _AddedTokenSpec(NamedTuple):
    contents: tuple[str, ...]  # phase 1: raw text, normalized=false
    normalized_contents: tuple[str, ...]  # phase 2: normalized gaps, normalized=true
    flagged: tuple[str, ...]  # lstrip/rstrip/single_word contents: text not counted here


def _added_tokens(tokenizer: Tokenizer, specs: list[dict[str, Any]]) -> _AddedTokenSpec | str:
    raw: set[str] = set()
    normalized: set[str] = set()
    flagged: set[str] = set()
    normalizer = tokenizer.normalizer
    for spec in specs:
        content = spec.get("content", "")
        if not content:
            return "an added token with empty content"
        matched = content
        if spec.get("normalized", True) and normalizer is not None:
            matched = normalizer.normalize_str(content)
            if not matched:
                return f"added token {content!r} normalizes to nothing"
        if spec.get("lstrip") or spec.get("rstrip") or spec.get("single_word"):
            flagged.update(c for c in (content, matched) if c.isascii())
        elif not matched.isascii():
            continue  # never occurs in ASCII text
        elif spec.get("normalized", True):
            normalized.add(matched)
        else:
            raw.add(matched)
    return _AddedTokenSpec(tuple(sorted(raw)), tuple(sorted(normalized)), tuple(sorted(flagged)))


def _read(tokenizer: Tokenizer) -> tuple[_Pipeline, _AddedTokenSpec] | str:
    """The pipeline of ``tokenizer`` if eligible, else the reason it is not."""
    if getattr(tokenizer, "encode_special_tokens", False):
        return "encode_special_tokens is set"
    try:
        spec = json.loads(tokenizer.to_str())
    except Exception as exc:  # not a tokenizers.Tokenizer, or not serializable
        return f"cannot read the tokenizer pipeline ({type(exc).__name__})"
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        return f"model {model.get('type')} is not BPE"
    if model.get("dropout") is not None:
        return "BPE with dropout"
    reason = _normalizer_reason(spec.get("normalizer"))
    if reason is not None:
        return reason
    pipeline = _pre_tokenizer(spec.get("pre_tokenizer"))
    if isinstance(pipeline, str):
        return pipeline
    added = _added_tokens(tokenizer, list(spec.get("added_tokens") or ()))
    if isinstance(added, str):
        return added
    return pipeline, added


@functools.cache
def _family_levels() -> dict[tuple[str, ...], str]:
    return {
        tuple(translate_pattern(source).pattern for source in sources): name
        for name, sources in NATIVE_FAMILIES.items()
    }


def native_family(pipeline: _Pipeline) -> str | None:
    """The :data:`NATIVE_FAMILIES` name whose regexes translate to this
    pipeline's levels, or None."""
    return _family_levels().get(tuple(p.pattern for p in pipeline.patterns))


def ineligibility_reason(tokenizer: Tokenizer) -> str | None:
    """Why :meth:`FastBPECounter.from_tokenizer` returns None for
    ``tokenizer`` (one short line), or None when it is eligible."""
    read = _read(tokenizer)
    return read if isinstance(read, str) else None


#: Another name of :func:`ineligibility_reason`.


# Counting ------------------------------------------------------------------------------


class _Fallback(Exception):
    """This text is not counted here."""


def _alternation(contents: tuple[str, ...], *, capture: bool) -> re.Pattern[str] | None:
    """Leftmost-longest search for literal strings: longest first, so that
    leftmost-first alternation picks the longest at the leftmost start."""
    if not contents:
        return None
    body = "|".join(re.escape(c) for c in sorted(contents, key=len, reverse=True))
    return re.compile(f"({body})" if capture else body)


class _Level(NamedTuple):
    """One regex level of the pre-tokenizer, compiled for each use."""

    findall: Callable[[str], list[str]]  # the matches only
    split: Callable[[str], list[str]]  # [gap, match, gap, ..., match, gap]; gaps may be ""
    finditer: Callable[[str], Iterator[re.Match[str]]]


def _level(pattern: str) -> _Level:
    compiled = re.compile(pattern, re.ASCII)
    return _Level(compiled.findall, re.compile(f"({pattern})", re.ASCII).split, compiled.finditer)


class _WordCounts(dict[str, int]):
    """Pre-token -> its token count, filled on demand; cleared when full.
    Not thread-safe."""

    def __init__(self, count_word: Callable[[str], int], limit: int) -> None:
        super().__init__()
        self._count_word = count_word
        self._limit = limit

    def __missing__(self, word: str) -> int:
        if len(self) >= self._limit:
            self.clear()
        count = self._count_word(word)
        self[word] = count
        return count


class FastBPECounter:
    """Counts the tokens of ASCII text exactly as the tokenizer it was made
    from would (``encode(text, add_special_tokens=False)``), without
    ``encode``; see the module docstring.  Not thread-safe (the word cache):
    use one instance from one thread.

    Build with :meth:`from_tokenizer`.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        pipeline: _Pipeline,
        added: _AddedTokenSpec,
        *,
        cache_limit: int = DEFAULT_CACHE_LIMIT,
    ) -> None:
        if cache_limit < 1:
            raise ValueError("cache_limit must be at least 1")
        self._tokenize = tokenizer.model.tokenize
        #: The model's ``tokenize``, for the native counter's cache misses.
        self.tokenize: Callable[[str], list[Any]] = self._tokenize
        #: Which C scanner splits like this pipeline (:data:`NATIVE_FAMILIES`), or None.
        self.family = native_family(pipeline)
        #: Every added token's content: a text holding one is split on them here.
        self.literals = added.contents + added.normalized_contents + added.flagged
        self.implementation = "python"
        self._levels = [_level(p.pattern) for p in pipeline.patterns]
        self._findall = self._levels[-1].findall
        self._local = all(p.local for p in pipeline.patterns)
        self._words = _WordCounts(self._model_count, cache_limit)
        self._word_count = self._words.__getitem__
        everything = added.contents + added.normalized_contents + added.flagged
        self._added_search = _alternation(everything, capture=False)
        self._flagged_search = _alternation(added.flagged, capture=False)
        self._raw_split = _alternation(added.contents, capture=True)
        self._normalized_split = _alternation(added.normalized_contents, capture=True)

    @classmethod
    def from_tokenizer(
        cls, tokenizer: Tokenizer, *, cache_limit: int = DEFAULT_CACHE_LIMIT
    ) -> FastBPECounter | None:
        """A counter for ``tokenizer``, or None if its pipeline is not
        eligible (:func:`ineligibility_reason` says why)."""
        read = _read(tokenizer)
        if isinstance(read, str):
            return None
        pipeline, added = read
        return cls(tokenizer, pipeline, added, cache_limit=cache_limit)

    @property
    def cached_words(self) -> int:
        """Pre-tokens in the cache now."""
        return len(self._words)

    # -- public counting ----------------------------------------------------

    def count(self, text: str) -> int | None:
        """The token count of ``text``, or None when ``text`` is not eligible
        (non-ASCII, an added token with lstrip/rstrip/single_word in it, or
        the model failed on a pre-token)."""
        if not text.isascii():
            return None
        try:
            if self._added_search is not None and self._added_search.search(text):
                return self._count_with_added_tokens(text)
            return sum(map(self._word_count, self._pre_tokens(text)))
        except _Fallback:
            return None

    def count_with_suffix(self, text: str, boundary: int) -> tuple[int, int] | None:
        """``(count(text), count(text[boundary:]))``, or None when either is
        None.  One scan when ``boundary`` falls between pieces at every
        level and the regexes are local (module docstring), else two.

        Raises:
            ValueError: ``boundary`` is outside ``0..len(text)``.
        """
        if not 0 <= boundary <= len(text):
            raise ValueError(f"boundary {boundary} outside 0..{len(text)}")
        if not text.isascii():
            return None
        if self._added_search is not None and self._added_search.search(text):
            total = self.count(text)
            rest = self.count(text[boundary:])
            return None if total is None or rest is None else (total, rest)
        try:
            words = self._pre_tokens(text)
            count = self._word_count
            total = sum(map(count, words))
            if boundary == 0:
                return total, total
            if boundary == len(text):
                return total, 0
            if self._local and (len(self._levels) == 1 or self._splits_at(text, boundary)):
                position = before = 0
                for word in words:
                    if position >= boundary:
                        break
                    position += len(word)
                    before += count(word)
                if position == boundary:
                    return total, total - before
            return total, sum(map(count, self._pre_tokens(text[boundary:])))
        except _Fallback:
            return None

    def count_pairs(
        self, texts: Sequence[str], boundaries: Sequence[int]
    ) -> list[tuple[int, int] | None]:
        """:meth:`count_with_suffix` of each text and boundary, in order (the
        native twin counts the batch with the GIL released).

        Raises:
            ValueError: a boundary is outside its text, or the lengths differ.
        """
        if len(texts) != len(boundaries):
            raise ValueError("texts and boundaries differ in length")
        count = self.count_with_suffix
        return [count(text, boundary) for text, boundary in zip(texts, boundaries, strict=True)]

    def pre_token_ends(self, text: str) -> list[int]:
        """The end offset of each non-empty pre-token of ASCII ``text`` (the
        split that the native scanner must reproduce)."""
        if not text.isascii():
            raise ValueError("not ASCII")
        ends: list[int] = []
        position = 0
        for word in self._pre_tokens(text):
            if word:
                position += len(word)
                ends.append(position)
        return ends

    # -- internals -----------------------------------------------------------

    def _pre_tokens(self, text: str) -> list[str]:
        """The pre-tokens of ``text``: the regex levels applied in turn, gaps
        included (the list may hold empty strings)."""
        levels = self._levels
        if len(levels) > 1:
            # Outer levels (digits, scripts) mostly leave gaps: split at once.
            words = levels[0].split(text)
            for level in levels[1:-1]:
                words = [w for piece in words if piece for w in level.split(piece)]
            return [w for piece in words if piece for w in self._last_level(piece)]
        return self._last_level(text)

    def _last_level(self, text: str) -> list[str]:
        """The pieces of the innermost level, whose pattern usually covers
        the text (then ``findall``, the cheapest call, gives every piece)."""
        words = self._findall(text)
        if sum(map(len, words)) != len(text):  # gaps between matches: keep them
            words = self._levels[-1].split(text)
        return words

    def _splits_at(self, text: str, boundary: int) -> bool:
        """Whether scanning ``text[boundary:]`` gives the pieces of ``text``
        after ``boundary`` at every level: at some level ``boundary`` falls
        between two pieces, and at every level above it falls inside a gap
        (a gap's sub-pieces do not depend on the text around the gap).
        Scans each level only up to ``boundary``."""
        piece, offset = text, boundary
        for level in self._levels:
            gap_start, gap_end = 0, len(piece)
            for match in level.finditer(piece):
                start, end = match.span()
                if start >= offset:
                    gap_end = start
                    break
                if end >= offset:
                    return end == offset  # else inside a match
                gap_start = end
            if offset in (gap_start, gap_end):
                return True
            piece, offset = piece[gap_start:gap_end], offset - gap_start
        return False  # inside a pre-token

    def _model_count(self, word: str) -> int:
        """Tokens of one pre-token: the model on its byte-level form."""
        if not word:
            return 0
        try:
            return len(self._tokenize(word.translate(_BYTE_LEVEL_ASCII)))
        except Exception as exc:  # the model cannot encode it: let tokenizers say why
            raise _Fallback from exc

    def _count_with_added_tokens(self, text: str) -> int:
        """Two phases of added-token splitting (module docstring), then the
        gaps are pre-tokenized independently."""
        if self._flagged_search is not None and self._flagged_search.search(text):
            raise _Fallback
        count = 0
        pieces = self._raw_split.split(text) if self._raw_split is not None else [text]
        for i, piece in enumerate(pieces):
            if i % 2:
                count += 1
                continue
            inner = (
                self._normalized_split.split(piece)
                if self._normalized_split is not None and piece
                else [piece]
            )
            for j, gap in enumerate(inner):
                if j % 2:
                    count += 1
                elif gap:
                    count += sum(map(self._word_count, self._pre_tokens(gap)))
        return count
