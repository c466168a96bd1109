"""The shape of medverify's source: module sizes, long functions, circles of file imports.

Run it to see where the code stands::

    .venv/bin/python scripts/shape.py [--source DIR] [--json]

``tests/test_shape.py`` imports this module and fails on a module over
:data:`MAX_MODULE_LINES`, a function over :data:`MAX_FUNCTION_LINES` (unless listed in
:data:`ALLOWED` with a reason) and on any circle of file imports. A *file import* is any
import statement naming another medverify module, wherever it stands (module level,
inside a function, under ``if TYPE_CHECKING:``), so a circle hidden behind a
function-level import is still a circle. Importing a package counts as importing its
``__init__``. The benchmarks and scripts (:data:`SCRIPT_FOLDERS`) are held to looser limits,
:data:`MAX_SCRIPT_MODULE_LINES` and :data:`MAX_SCRIPT_FUNCTION_LINES`, with their own
:data:`ALLOWED_SCRIPTS`; an entry of either table no longer past its limit fails too.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"
PACKAGE = "medverify"

MAX_MODULE_LINES = 500  # physical lines of a .py file
MAX_FUNCTION_LINES = 50  # from the ``def`` line to the last line of its body

# Modules or functions allowed past a limit, each with the reason it is allowed.
# Keys: "medverify/path.py" for a module, "medverify/path.py:qualified.name" for a function.
ALLOWED: dict[str, str] = {}

# benchmarks/ and scripts/ (run by hand, not imported by users) have looser limits.
SCRIPT_FOLDERS = ("benchmarks", "scripts")  # under ROOT, searched recursively
MAX_SCRIPT_MODULE_LINES = 800  # a benchmark or script over this fails tests/test_shape.py
MAX_SCRIPT_FUNCTION_LINES = 80  # a function of one over this fails it too

# Benchmarks or scripts allowed past their limits, each with the reason. Keys:
# "benchmarks/bench_x.py" for a module, "benchmarks/bench_x.py:qualified.name" for a function.
ALLOWED_SCRIPTS: dict[str, str] = {}


@dataclass(frozen=True)
class Sized:
    """A module or a function and its length in lines."""

    where: str  # "medverify/kb/store.py" or "medverify/kb/store.py:KnowledgeBase.search"
    lines: int


def _files(source: Path) -> list[Path]:
    return sorted((source / PACKAGE).rglob("*.py"))


def _rel(path: Path, source: Path) -> str:
    return path.relative_to(source).as_posix()


def script_files(root: Path = ROOT) -> list[Path]:
    """The Python files of benchmarks/ and scripts/ (:data:`SCRIPT_FOLDERS`) under ``root``."""
    return sorted(p for folder in SCRIPT_FOLDERS for p in (root / folder).rglob("*.py"))


def modules(source: Path = SOURCE, files: list[Path] | None = None) -> list[Sized]:
    """Every module and its number of lines, longest first (``files``: these files instead
    of the package's, named relative to ``source``)."""
    found = [Sized(_rel(p, source), len(p.read_text("utf-8").splitlines()))
             for p in (_files(source) if files is None else files)]
    return sorted(found, key=lambda s: (-s.lines, s.where))


# What a ``def`` can sit in: statements and the blocks of ``try`` and ``match``, never an
# expression (a lambda is no FunctionDef), so expressions are not walked.
_HOLDERS = (ast.stmt, ast.excepthandler, ast.match_case)


def _functions(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{child.name}"
            yield name, child
            yield from _functions(child, name + ".")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, _HOLDERS):
            yield from _functions(child, prefix)


def functions(source: Path = SOURCE, files: list[Path] | None = None) -> list[Sized]:
    """Every function and method (nested ones too) and its length, longest first
    (``files`` as for :func:`modules`)."""
    found = []
    for path in _files(source) if files is None else files:
        tree = _import_graph().parsed(path)
        for name, node in _functions(tree, ""):
            length = (node.end_lineno or node.lineno) - node.lineno + 1  # type: ignore[attr-defined]
            found.append(Sized(f"{_rel(path, source)}:{name}", length))
    return sorted(found, key=lambda s: (-s.lines, s.where))


def _import_graph() -> ModuleType:
    """``scripts/import_graph.py`` (the unit graph), which also parses the file imports."""
    name = "medverify_import_graph"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(
            "import_graph.py"))
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def file_imports(source: Path = SOURCE) -> dict[str, set[str]]:
    """module -> the medverify modules it imports (anywhere in the file)."""
    ig = _import_graph()
    paths = ig._modules(source)
    known = set(paths)
    out: dict[str, set[str]] = {}
    for module, path in paths.items():
        tree = _import_graph().parsed(path)
        is_package = path.name == "__init__.py"
        out[module] = {t for node in ast.walk(tree)
                       for t in ig._targets(node, module, is_package, known)
                       if t in known and t != module}
    return out


def circles(g: Mapping[str, set[str]]) -> list[list[str]]:
    """Groups of more than one module that import each other (strongly connected
    components, as for units in ``import_graph.components``), sorted."""
    return _import_graph().components(g)  # type: ignore[no-any-return]


def over(items: list[Sized], limit: int) -> list[Sized]:
    return [s for s in items if s.lines > limit]


def stale(allowed: Mapping[str, str], items: list[Sized], module_limit: int,
          function_limit: int) -> list[str]:
    """The entries of ``allowed`` no longer past their limit (or gone): a module's key has
    no ``:``, a function's has one."""
    sizes = {s.where: s.lines for s in items}
    return [key for key in allowed
            if sizes.get(key, 0) <= (function_limit if ":" in key else module_limit)]


def script_sizes(root: Path = ROOT) -> tuple[list[Sized], list[Sized]]:
    """The modules and functions of benchmarks/ and scripts/, named relative to ``root``."""
    files = script_files(root)
    return modules(root, files), functions(root, files)


def summary(source: Path = SOURCE) -> dict[str, object]:
    mods, funcs = modules(source), functions(source)
    return {
        "source_lines": sum(m.lines for m in mods),
        "modules": len(mods),
        "modules_over_450": len(over(mods, 450)),
        "modules_over_limit": [asdict(s) for s in over(mods, MAX_MODULE_LINES)],
        "functions_over_40": len(over(funcs, 40)),
        "functions_over_limit": [asdict(s) for s in over(funcs, MAX_FUNCTION_LINES)],
        "file_circles": circles(file_imports(source)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="module sizes, long functions, file circles")
    parser.add_argument("--source", type=Path, default=SOURCE,
                        help="the folder holding the medverify package (default: src)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    data = summary(args.source.resolve())
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    print(f"source lines {data['source_lines']} in {data['modules']} modules; "
          f"over 450 lines: {data['modules_over_450']}; "
          f"functions over 40 lines: {data['functions_over_40']}")
    for key in ("modules_over_limit", "functions_over_limit"):
        rows = data[key]
        assert isinstance(rows, list)
        print(f"\n{key} ({len(rows)}):")
        for row in rows:
            allowed = " (allowed)" if row["where"] in ALLOWED else ""
            print(f"  {row['lines']:5d}  {row['where']}{allowed}")
    found = data["file_circles"]
    assert isinstance(found, list)
    print(f"\nfile circles ({len(found)}):")
    for members in found:
        print("  {" + ", ".join(members) + "}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
