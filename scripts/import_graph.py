"""The import graph between medverify's units, and its layering.

A *unit* is a top-level module or subpackage of ``src/medverify`` (``records``, ``kb``,
``audit``, ...). Every import statement counts, wherever it is: module level, inside a
function, under ``if TYPE_CHECKING:``. Strings are not imports, so plugin registrations
written as ``"medverify.x:Name"`` and ``importlib.import_module(...)`` calls are not edges.

Run it to see where the code stands::

    .venv/bin/python scripts/import_graph.py [--source DIR]

(``--source``: the folder holding the ``medverify`` package, ``src`` by default; e.g. an
older tree from ``git archive``.)

It prints the units, the edges between them (with the importing module and line), the
number of simple cycles, the strongly connected components and every import of a unit
from a higher layer. ``tests/test_layers.py`` imports this module and fails on a
higher-layer import or a cycle.
"""

from __future__ import annotations

import argparse
import ast
import functools
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"
PACKAGE = "medverify"

# The layers, lowest first. A unit may import units of its own layer or of lower layers,
# never of a higher one, and no two units may import each other, directly or round a loop.
LAYERS: dict[str, int] = {
    # 0 base: vocabulary and plain helpers, importing nothing above this layer.
    "errors": 0,
    "files": 0,  # atomic writes, JSONL records
    "text": 0,  # sentence splitting
    "citations": 0,  # citation markers in text: pure text functions, no medverify import
    "registry": 0,  # name -> "module:attr" plugin lookup (strings, no imports)
    "config": 0,  # settings read from TOML and the environment
    "records": 0,  # the records passed between stages
    # a claim's outcome vocabulary and the rules over it (passage_label, categorize, ...)
    "verdict_rules": 0,
    # a claim's key content (numbers, names, words) and relevance: shared by the judge,
    # retrieval and settling, so it sits below all of them
    "terms": 0,
    "inputs": 0,  # reading answers from bytes: needs only errors and records
    # SQL connections by location (a SQLite file or PostgreSQL): the run store's, also
    # used by config and the llm cache
    "connections": 0,
    "stats": 0,  # the Wilson interval of a proportion (pure math)
    "bf16": 0,  # packed bfloat16 Linear layers for AMX CPUs (torch only)
    # one BERT encoder layer over a given Linear kind: the verifier's and the query
    # encoder's lean forwards (torch only)
    "bert_layer": 0,
    "executor": 0,  # local or Ray: maps a picklable function over chunks (imports errors only)
    # 1 infrastructure: models, prompts, fetched sources, the knowledge base, the verifier.
    "llm": 1,
    "prompts": 1,  # prompt files rendered as llm Messages (imports llm.base)
    "sources": 1,  # fetching and extracting cited pages (uses kb's chunking)
    "kb": 1,
    "verifier": 1,
    "trials": 1,  # ClinicalTrials.gov API v2 study JSON: streaming reader, synthetic records
    # 2 stages: each turns records into records with the infrastructure.
    "decompose": 2,
    "retrieve": 2,
    "judge": 2,
    "arbitration": 2,  # the judge and the risk classifier decide together
    "risk": 2,
    "report": 2,  # metrics, JSON, HTML and terminal renderings shared by every flow
    # clinician review: items from escalated claims, labels and their rules, teaching the KB
    # (reversibly), the loop report; it persists through a ReviewLedger protocol, not store
    "review": 2,
    # 3 the run store: saves and reads records (any pydantic record as JSON); recomputes a
    # report's metrics with report.metrics, so it sits above the stages.
    "store": 3,
    # 4 flows: open what a run needs, run stages, record the run.
    "harness": 4,
    "checker": 4,  # the check flow: decompose -> retrieve -> judge -> report
    "kit": 4,  # the parts every flow takes ready-made (FlowKit), built the same way
    "answerer": 4,  # the RAG answerer (Vladika et al. step 1)
    "audit": 4,
    "factcheck": 4,
    "bench": 4,
    "evals": 4,  # measurements on labelled data: pairs, retrieval, judges, arbitration
    "injection": 4,
    "demo": 4,
    "study": 4,  # CHECK's 15-question clinical-trial study (asks, judges, reports)
    "ops": 4,  # drift of the recorded verdicts: daily rates against a baseline (store, evals)
    # 5 entry points.
    "cli": 5,
    "client": 5,  # the Python client of `medverify serve` (HTTP; the service's records)
    "service": 5,  # the HTTP service: routes over the flows, like the CLI
    "testing": 5,
    PACKAGE: 5,  # medverify/__init__.py
    "__main__": 5,
}
LAYER_NAMES = ("base", "infrastructure", "stages", "store", "flows", "entry points")


@dataclass(frozen=True, order=True)
class Import:
    """One import statement of a medverify module naming another unit's module."""

    source: str  # the importing unit
    target: str  # the imported unit
    module: str  # the importing module, dotted
    line: int
    imported: str  # the imported module, dotted

    def where(self) -> str:
        return f"{self.module}:{self.line} imports {self.imported}"


def module_name(path: Path, source: Path = SOURCE) -> str:
    parts = list(path.relative_to(source).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str:
    """``medverify.audit.runner`` -> ``audit``; the package itself -> ``medverify``. A unit
    is a whole top-level folder (or module): each folder sits on one layer."""
    parts = module.split(".")
    return parts[0] if len(parts) == 1 else parts[1]


def _modules(source: Path) -> dict[str, Path]:
    return {module_name(p, source): p for p in sorted((source / PACKAGE).rglob("*.py"))}


def parsed(path: Path) -> ast.Module:
    """The syntax tree of ``path``, parsed once per version of the file (the layer and
    shape tests read every module several times)."""
    stat = path.stat()
    return _parse(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _parse(path: Path, _mtime_ns: int, _size: int) -> ast.Module:
    return ast.parse(path.read_text("utf-8"), filename=str(path))


def _targets(node: ast.AST, module: str, is_package: bool, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".")
        keep = len(base) - node.level + (1 if is_package else 0)
        parent = ".".join(base[:keep] + ([node.module] if node.module else []))
    else:
        parent = node.module or ""
    # ``from medverify import records`` imports the module medverify.records
    found = [f"{parent}.{a.name}" for a in node.names if f"{parent}.{a.name}" in known]
    return found if len(found) == len(node.names) else [*found, parent]


def imports(source: Path = SOURCE) -> list[Import]:
    """Every import between two different units, sorted."""
    modules = _modules(source)
    known = set(modules)
    found: set[Import] = set()
    for module, path in modules.items():
        tree = parsed(path)
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            for target in _targets(node, module, is_package, known):
                if target != PACKAGE and not target.startswith(PACKAGE + "."):
                    continue
                a, b = unit_of(module), unit_of(target)
                if a != b:
                    found.add(Import(a, b, module, getattr(node, "lineno", 0), target))
    return sorted(found)


def units(source: Path = SOURCE) -> list[str]:
    return sorted({unit_of(m) for m in _modules(source)})


def graph(edges: Iterable[Import]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for edge in edges:
        out.setdefault(edge.source, set()).add(edge.target)
        out.setdefault(edge.target, set())
    return out


def components(g: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one unit (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(found)


def cycles(g: Mapping[str, set[str]]) -> Iterator[list[str]]:
    """Every simple cycle, each once, starting at its smallest unit (within one SCC)."""
    for members in components(g):
        inside = set(members)
        for start in members:
            allowed = {m for m in inside if m >= start}
            path = [start]

            def walk(v: str, start: str = start, allowed: set[str] = allowed,
                     path: list[str] = path) -> Iterator[list[str]]:
                for w in sorted(g[v] & allowed):
                    if w == start:
                        yield list(path)
                    elif w not in path:
                        path.append(w)
                        yield from walk(w)
                        path.pop()

            yield from walk(start)


def violations(edges: Iterable[Import], layers: Mapping[str, int] = LAYERS) -> list[Import]:
    """Imports of a unit from a higher layer (a unit missing from ``layers`` counts as
    the highest layer, so a new unit is noticed)."""
    top = max(layers.values()) + 1
    return [e for e in edges if layers.get(e.target, top) > layers.get(e.source, top)]


def unplaced(names: Iterable[str], layers: Mapping[str, int] = LAYERS) -> list[str]:
    return sorted(n for n in names if n not in layers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="medverify's import graph and layering")
    parser.add_argument("--source", type=Path, default=SOURCE,
                        help="the folder holding the medverify package (default: src)")
    source = parser.parse_args(argv).source.resolve()
    edges = imports(source)
    g = graph(edges)
    names = units(source)
    print(f"units ({len(names)}):")
    for layer, title in enumerate(LAYER_NAMES):
        members = [n for n in names if LAYERS.get(n) == layer]
        print(f"  {layer} {title}: {', '.join(members)}")
    missing = unplaced(names)
    if missing:
        print(f"  not in the layer table: {', '.join(missing)}")
    pairs: dict[tuple[str, str], list[Import]] = {}
    for edge in edges:
        pairs.setdefault((edge.source, edge.target), []).append(edge)
    print(f"\nedges ({len(pairs)} between units, {len(edges)} import statements):")
    for (a, b), found in sorted(pairs.items()):
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        print(f"  {a} -> {b}: {found[0].module}:{found[0].line}{more}")
    print(f"\ncycles: {sum(1 for _ in cycles(g))}")
    sccs = components(g)
    print(f"SCCs ({len(sccs)}):")
    for members in sccs:
        print("  {" + ", ".join(members) + "}")
    bad = violations(edges)
    print(f"\nlayer violations ({len(bad)}):")
    for edge in bad:
        print(f"  {edge.source} ({LAYERS.get(edge.source)}) -> {edge.target} "
              f"({LAYERS.get(edge.target)}): {edge.where()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
