"""The shape of medverify's source: module sizes, long functions, circles of file imports.

Run it to see where the code stands::

    .venv/bin/python scripts/shape.py [--source DIR] [--json]

``tests/test_shape.py`` imports this module and fails on a module over
:data:`MAX_MODULE_LINES`, a function over :data:`MAX_FUNCTION_LINES` (unless listed in
:data:`ALLOWED` with a reason) and on any circle of file imports. A *file import* is any
import statement naming another medverify module, wherever it stands (module level,
inside a function, under ``if TYPE_CHECKING:``), so a circle hidden behind a
function-level import is still a circle. Importing a package counts as importing its
``__init__``.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"
PACKAGE = "medverify"

MAX_MODULE_LINES = 600  # physical lines of a .py file
MAX_FUNCTION_LINES = 60  # from the ``def`` line to the last line of its body

# Modules or functions allowed past a limit, each with the reason it is allowed.
# Keys: "medverify/path.py" for a module, "medverify/path.py:qualified.name" for a function.
ALLOWED: dict[str, str] = {}


@dataclass(frozen=True)
class Sized:
    """A module or a function and its length in lines."""

    where: str  # "medverify/kb/store.py" or "medverify/kb/store.py:KnowledgeBase.search"
    lines: int


def _files(source: Path) -> list[Path]:
    return sorted((source / PACKAGE).rglob("*.py"))


def _rel(path: Path, source: Path) -> str:
    return path.relative_to(source).as_posix()


def modules(source: Path = SOURCE) -> list[Sized]:
    """Every module and its number of lines, longest first."""
    found = [Sized(_rel(p, source), len(p.read_text("utf-8").splitlines()))
             for p in _files(source)]
    return sorted(found, key=lambda s: (-s.lines, s.where))


def _functions(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{child.name}"
            yield name, child
            yield from _functions(child, name + ".")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def functions(source: Path = SOURCE) -> list[Sized]:
    """Every function and method (nested ones too) and its length, longest first."""
    found = []
    for path in _files(source):
        tree = ast.parse(path.read_text("utf-8"), filename=str(path))
        for name, node in _functions(tree, ""):
            length = (node.end_lineno or node.lineno) - node.lineno + 1  # type: ignore[attr-defined]
            found.append(Sized(f"{_rel(path, source)}:{name}", length))
    return sorted(found, key=lambda s: (-s.lines, s.where))


def _module_name(path: Path, source: Path) -> str:
    parts = list(path.relative_to(source).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _targets(node: ast.AST, module: str, is_package: bool, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".")
        keep = len(base) - node.level + (1 if is_package else 0)
        parent = ".".join(base[:keep] + ([node.module] if node.module else []))
    else:
        parent = node.module or ""
    subs = [f"{parent}.{a.name}" for a in node.names if f"{parent}.{a.name}" in known]
    rest = len(subs) < len(node.names)
    return subs + ([parent] if rest and parent in known else [])


def file_imports(source: Path = SOURCE) -> dict[str, set[str]]:
    """module -> the medverify modules it imports (anywhere in the file)."""
    paths = {_module_name(p, source): p for p in _files(source)}
    known = set(paths)
    out: dict[str, set[str]] = {}
    for module, path in paths.items():
        tree = ast.parse(path.read_text("utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        out[module] = {t for node in ast.walk(tree)
                       for t in _targets(node, module, is_package, known) if t != module}
    return out


def circles(g: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                members = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    members.append(x)
                    if x == v:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return sorted(found)


def over(items: list[Sized], limit: int) -> list[Sized]:
    return [s for s in items if s.lines > limit]


def summary(source: Path = SOURCE) -> dict[str, object]:
    mods, funcs = modules(source), functions(source)
    return {
        "source_lines": sum(m.lines for m in mods),
        "modules": len(mods),
        "modules_over_500": len(over(mods, 500)),
        "modules_over_600": [asdict(s) for s in over(mods, MAX_MODULE_LINES)],
        "functions_over_30": len(over(funcs, 30)),
        "functions_over_60": [asdict(s) for s in over(funcs, MAX_FUNCTION_LINES)],
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
          f"over 500 lines: {data['modules_over_500']}; "
          f"functions over 30 lines: {data['functions_over_30']}")
    for key in ("modules_over_600", "functions_over_60"):
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
