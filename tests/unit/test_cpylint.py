"""Text checks over csrc/: the rules of the C core that a compiler does not
enforce.

* The core is plain C: no file includes Python.h (it is fuzzed and tested
  without an interpreter, and bindings stay thin).
* Every ``mlpe_<x>_init`` a header declares has a matching ``mlpe_<x>_free``,
  so that every owner of memory has a documented way to release it.
* The core never prints or ends the process: no printf family, puts,
  perror, exit or abort outside the test programs in csrc/fuzz/ and
  csrc/stress/ (errors are returned as codes).
* Every header has an include guard.
* Every C unit is compiled by some extension in setup.py.

Comments and string literals are blanked before matching, so prose that
mentions ``abort()`` does not trip the checks.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"

pytestmark = pytest.mark.skipif(
    not CSRC.is_dir(), reason="csrc/ is not present (an installed wheel)"
)

_TOKENS = re.compile(
    r"""(?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')"""
    r"""|(?P<comment>/\*.*?\*/|//[^\n]*)""",
    re.DOTALL,
)


def strip_comments(text: str, *, keep_strings: bool = False) -> str:
    """Blanks comments (and string literals unless keep_strings), keeping
    line breaks so that line numbers stay right."""

    def blank(match: re.Match[str]) -> str:
        token = match.group(0)
        if match.group("string") is not None:
            return token if keep_strings else token[0] + " " * (len(token) - 2) + token[-1]
        return re.sub(r"[^\n]", " ", token)

    return _TOKENS.sub(blank, text)


# Folders of csrc/ that hold test programs (fuzz drivers, stress tests), not the core.
TEST_PROGRAMS = ("fuzz", "stress")


def c_files(*patterns: str, fuzz: bool = True) -> list[Path]:
    """The C files under csrc/; ``fuzz=False`` leaves the test programs out."""
    files = sorted({p for pattern in patterns for p in CSRC.rglob(pattern)})
    if not fuzz:
        files = [p for p in files if p.relative_to(CSRC).parts[0] not in TEST_PROGRAMS]
    return [p for p in files if "build" not in p.relative_to(CSRC).parts]


def line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_sources_exist() -> None:
    assert c_files("*.h", fuzz=False), "no headers found in csrc/"


def test_no_python_h() -> None:
    offenders = []
    for path in c_files("*.c", "*.h"):
        text = strip_comments(path.read_text(encoding="utf-8"), keep_strings=True)
        for match in re.finditer(r'^\s*#\s*include\s*[<"]Python\.h[>"]', text, re.MULTILINE):
            offenders.append(f"{rel(path)}:{line_of(text, match.start())}")
    assert not offenders, f"the C core must not include Python.h: {offenders}"


def test_every_init_has_a_free() -> None:
    declared: dict[str, str] = {}
    text = ""
    for path in c_files("*.h", fuzz=False):
        source = strip_comments(path.read_text(encoding="utf-8"))
        text += source
        for match in re.finditer(r"\b(mlpe_\w+?)_init\s*\(", source):
            declared.setdefault(match.group(1), f"{rel(path)}:{line_of(source, match.start())}")
    assert declared, "no mlpe_*_init found in the headers"
    missing = [
        f"{stem}_init ({where}) has no {stem}_free"
        for stem, where in sorted(declared.items())
        if not re.search(rf"\b{stem}_free\s*\(", text)
    ]
    assert not missing, missing


_FORBIDDEN = re.compile(
    r"\b(printf|fprintf|vprintf|vfprintf|puts|fputs|putchar|perror"
    r"|exit|_exit|_Exit|quick_exit|abort)\s*\("
)


def test_core_never_prints_or_exits() -> None:
    offenders = []
    for path in c_files("*.c", "*.h", fuzz=False):
        text = strip_comments(path.read_text(encoding="utf-8"))
        for match in _FORBIDDEN.finditer(text):
            offenders.append(f"{rel(path)}:{line_of(text, match.start())}: {match.group(1)}(")
    assert not offenders, f"return an error code instead: {offenders}"


def test_headers_have_include_guards() -> None:
    offenders = []
    for path in c_files("*.h"):
        text = strip_comments(path.read_text(encoding="utf-8"))
        directives = [line.strip() for line in text.splitlines() if line.strip().startswith("#")]
        guard = re.fullmatch(r"#\s*ifndef\s+(\w+)", directives[0]) if directives else None
        ok = (
            guard is not None
            and len(directives) >= 3
            and re.fullmatch(rf"#\s*define\s+{guard.group(1)}", directives[1]) is not None
            and re.fullmatch(r"#\s*endif", directives[-1]) is not None
        )
        # Nothing but comments and blank lines around the guard.
        code = [line.strip() for line in text.splitlines() if line.strip()]
        ok = ok and bool(code) and code[0] == directives[0] and code[-1] == directives[-1]
        if not ok:
            offenders.append(rel(path))
    assert not offenders, f"headers without an #ifndef/#define/#endif guard: {offenders}"


def test_every_unit_is_built() -> None:
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    listed = set(re.findall(r"\"(csrc/[\w/]+\.c)\"", setup))
    units = {rel(path) for path in c_files("*.c", fuzz=False)}
    assert units <= listed, f"C units no extension compiles: {sorted(units - listed)}"
