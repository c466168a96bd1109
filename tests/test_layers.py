"""The layering of medverify's units (see ``scripts/import_graph.py`` for the table and how
the import graph is built): no unit imports a unit of a higher layer, no two units import
each other (directly or round a loop), and every unit has a layer."""

from __future__ import annotations

from pathlib import Path

from script_modules import load_script

ig = load_script("import_graph")


def _edges() -> list:
    return list(ig.imports())


def test_every_unit_has_a_layer() -> None:
    missing = ig.unplaced(ig.units())
    assert not missing, (
        f"units without a layer: {', '.join(missing)}; place them in LAYERS "
        "(scripts/import_graph.py)")


def test_no_unit_imports_a_higher_layer() -> None:
    bad = ig.violations(_edges())
    lines = [f"{e.where()} ({e.source}, layer {ig.LAYERS.get(e.source)}, imports "
             f"{e.target}, layer {ig.LAYERS.get(e.target)})" for e in bad]
    assert not bad, "imports of a higher layer:\n" + "\n".join(lines)


def test_no_import_cycle_between_units() -> None:
    edges = _edges()
    g = ig.graph(edges)
    found = ig.components(g)
    lines = []
    for members in found:
        inside = set(members)
        lines.append("{" + ", ".join(members) + "}:")
        lines += [f"  {e.where()}" for e in edges if e.source in inside and e.target in inside]
    assert not found, "units that import each other:\n" + "\n".join(lines)


def _folder(module: str) -> str:
    """``medverify.trials.reader`` -> ``trials``: the top-level folder (or module) of
    ``src/medverify`` a module lies in, whatever the layer table says."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_each_top_level_folder_is_one_layer() -> None:
    """Collapsed to top-level folders, the units import no loop: no module sits in a
    folder of another layer (the layer table has no sub-units to hide one)."""
    g: dict[str, set[str]] = {}
    for edge in _edges():
        a, b = _folder(edge.module), _folder(edge.imported)
        g.setdefault(a, set())
        g.setdefault(b, set())
        if a != b:
            g[a].add(b)
    loops = ig.components(g)
    assert not loops, "top-level folders that import each other: " + "; ".join(
        "{" + ", ".join(members) + "}" for members in loops)
    nested = sorted(name for name in ig.LAYERS if "." in name)
    assert not nested, f"sub-units in the layer table: {', '.join(nested)}"


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    package = tmp_path / "medverify"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("from . import deep\n")
    (package / "low" / "deep.py").write_text("")
    (package / "base.py").write_text("")
    (package / "mid.py").write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from medverify.top import Thing\n"
        "def f():\n"
        "    import medverify.low.deep\n"
        "from medverify import base\n"
        'PLUGIN = "medverify.top:Thing"\n')
    (package / "top.py").write_text("from .mid import f\n")
    edges = {(e.source, e.target, e.line) for e in ig.imports(tmp_path)}
    assert edges == {("mid", "top", 4), ("mid", "low", 6), ("mid", "base", 7),
                     ("top", "mid", 1)}
    g = ig.graph(ig.imports(tmp_path))
    assert ig.components(g) == [["mid", "top"]]
    assert list(ig.cycles(g)) == [["mid", "top"]]
    layers = {"base": 0, "low": 0, "mid": 1, "top": 2}
    assert [e.where() for e in ig.violations(ig.imports(tmp_path), layers)] == [
        "medverify.mid:4 imports medverify.top"]
