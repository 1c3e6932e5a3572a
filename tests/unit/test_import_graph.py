"""The package's imports: no cycles, and every module importable on its own.

A cycle makes a module's behaviour depend on which of its members was
imported first (a name read before the other side has defined it), and it
blurs which layer is above which.  Two checks:

* the static graph: every ``import`` and ``from ... import`` in every
  ``.py`` file of ``mlpe_fast``, at module level or inside a function,
  **including** the ones under ``if TYPE_CHECKING:`` (a type-only cycle
  is still two modules that each need the other); ``from pkg import name``
  is an edge to ``pkg.name`` when that is a module, else to ``pkg`` (a
  name its ``__init__`` defines; ``from . import sub`` needs only ``sub``).  It
  must have no cycle, and no module inside a subpackage may import that
  subpackage's ``__init__`` (which only re-exports, for the callers outside);
* the dynamic check: each module is imported first, alone, in a fresh
  interpreter (a child forked from one that has imported no ``mlpe_fast``
  module, else one subprocess per module), so that an import that works only
  after some other module was imported fails here.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

import mlpe_fast

PACKAGE = "mlpe_fast"
ROOT = Path(mlpe_fast.__file__).resolve().parent

#: Import names of the optional extras' packages (pyproject.toml) -> the extra:
#: a module that needs one that is not installed is skipped, saying which.
OPTIONAL_PACKAGES = {
    "ray": "ray",
    "matplotlib": "plots",
    "submission_checker": "submission",
    "transformers": "test",
    "rouge_score": "accuracy",
    "nltk": "accuracy",
    "punkt": "accuracy",
    "sympy": "accuracy",
    "pylatexenc": "accuracy",
}

#: Modules that are not imported by the dynamic check, and why.
NOT_IMPORTED = {
    f"{PACKAGE}.__main__": "importing it runs the CLI (python -m mlpe_fast)",
}


# --- the static graph ------------------------------------------------------------------


def _module_name(path: Path) -> tuple[str, bool]:
    """The dotted name of a source file, and whether it is a package."""
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


@cache
def source_modules() -> dict[str, tuple[Path, bool]]:
    """Every module with Python source: name -> (path, is a package)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        name, is_package = _module_name(path)
        found[name] = (path, is_package)
    return found


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name a ``from`` import reads from."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(module: str) -> set[str]:
    """The package's modules that ``module`` imports (module docstring)."""
    path, is_package = source_modules()[module]
    known = source_modules()
    edges: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(module, is_package, node)
            submodules = {f"{target}.{a.name}" for a in node.names} & known.keys()
            edges.update(submodules)
            # a name read from ``target``'s namespace, not only its submodules
            if target in known and len(submodules) < len(node.names):
                edges.add(target)
    edges.discard(module)
    return edges


@cache
def import_graph() -> dict[str, frozenset[str]]:
    return {module: frozenset(imports_of(module)) for module in source_modules()}


def strongly_connected(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def one_cycle(graph: dict[str, frozenset[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, to name it."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph[node] & members):
                if successor == start:
                    return [*paths[node], start]
                if successor not in paths:
                    paths[successor] = [*paths[node], successor]
                    following.append(successor)
        frontier = following
    raise AssertionError(f"{component} is not strongly connected")


def test_the_scan_sees_every_kind_of_import() -> None:
    # Function-level, TYPE_CHECKING, relative and "from pkg import module"
    # imports are all edges (a scan that missed one would pass everything).
    graph = import_graph()
    assert "mlpe_fast.engine.client" in graph["mlpe_fast.engine"]  # from .client import
    assert "mlpe_fast.engine.record" in graph["mlpe_fast.metrics.tokens"]  # TYPE_CHECKING
    assert "mlpe_fast.metrics.fast_bpe" in graph["mlpe_fast.metrics.tokens"]  # in a function
    assert "mlpe_fast.sim" in graph["mlpe_fast.demo"]  # from . import sim
    assert {"mlpe_fast", "mlpe_fast.wire"} <= graph["mlpe_fast.cli"] | graph["mlpe_fast"]


def test_the_cycle_finder_names_a_cycle() -> None:
    graph = {
        "a": frozenset({"b"}),
        "b": frozenset({"c"}),
        "c": frozenset({"a", "d"}),
        "d": frozenset(),
    }
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert one_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles = [" -> ".join(one_cycle(graph, c)) for c in strongly_connected(graph)]
    assert not cycles, "import cycles:\n  " + "\n  ".join(cycles)


def test_no_module_imports_its_own_subpackage() -> None:
    # A subpackage's __init__ re-exports for the callers outside; a member
    # importing it would run its siblings' imports first (a cycle in waiting).
    offenders = [
        f"{module} imports {package}"
        for module, imported in import_graph().items()
        for package in imported
        if package != PACKAGE and source_modules()[package][1] and module.startswith(package + ".")
    ]
    assert not offenders, "\n".join(offenders)


# --- each module on its own ------------------------------------------------------------

# Given one module, imports it and reports; given several, forks one child per
# module from this interpreter, which has imported no mlpe_fast module (only
# the core's heavier dependencies, so that each child's cost is our code's).  The
# outcome of each is "ok", "missing NAME" (a package outside mlpe_fast was not
# found) or the traceback.
_DRIVER = r"""
import importlib, json, os, sys, traceback

def outcome(name):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if missing and missing != "mlpe_fast":
            return "missing " + missing
        return traceback.format_exc()
    except BaseException:
        return traceback.format_exc()
    return "ok"

assert not [m for m in sys.modules if m.split(".")[0] == "mlpe_fast"]
names = sys.argv[1:]
if len(names) > 1:
    # Once for all children: the core's heavier dependencies (mlpe_fast's own
    # order is what is tested) and the bytecode of mlpe_fast's sources.
    for dependency in ("asyncio", "ssl", "numpy", "msgspec", "h2.connection", "yaml"):
        try:
            importlib.import_module(dependency)
        except ImportError:
            pass
    import compileall, importlib.util
    for location in importlib.util.find_spec("mlpe_fast").submodule_search_locations:
        compileall.compile_dir(location, quiet=1)
results = {}
if len(names) == 1:
    results[names[0]] = outcome(names[0])
for name in names if len(names) > 1 else ():
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.write(write_end, outcome(name).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        results[name] = pipe.read().decode() or "the child died without a word"
    os.waitpid(pid, 0)
print(json.dumps(results))
"""


def _importable_modules() -> list[str]:
    return sorted(m for m in source_modules() if m not in NOT_IMPORTED)


def _run_driver(modules: list[str], bytecode: Path) -> dict[str, str]:
    # Bytecode is written under ``bytecode`` (never beside the sources), even
    # where the environment says not to write it: compiling every module once
    # per child would cost most of the test's time.
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(bytecode)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    run = subprocess.run(
        [sys.executable, "-c", _DRIVER, *modules],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    outcomes: dict[str, str] = json.loads(run.stdout.splitlines()[-1])
    return outcomes


@pytest.fixture(scope="module")
def import_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each module's outcome of being imported first in a fresh interpreter:
    forked children of one interpreter where there is fork, else one
    interpreter per module (Windows)."""
    bytecode = tmp_path_factory.mktemp("bytecode")
    modules = _importable_modules()
    if hasattr(os, "fork"):
        return _run_driver(modules, bytecode)
    outcomes: dict[str, str] = {}
    for module in modules:
        outcomes.update(_run_driver([module], bytecode))
    return outcomes


@pytest.mark.parametrize("module", _importable_modules())
def test_imports_on_its_own(module: str, import_outcomes: dict[str, str]) -> None:
    outcome = import_outcomes[module]
    if outcome.startswith("missing "):
        missing = outcome.split()[1]
        if missing in OPTIONAL_PACKAGES:
            pytest.skip(
                f"{module} needs {missing}, not installed "
                f"(pip install 'mlpe-fast[{OPTIONAL_PACKAGES[missing]}]')"
            )
    assert outcome == "ok", f"importing {module} first, alone:\n{outcome}"


@pytest.mark.parametrize("module", sorted(NOT_IMPORTED))
def test_modules_not_imported_alone(module: str) -> None:
    assert module in source_modules(), f"{module} is gone: drop it from NOT_IMPORTED"
    pytest.skip(f"{module}: {NOT_IMPORTED[module]}")
