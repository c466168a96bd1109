"""Size and shape of the source, checked like the layers (``scripts/shape.py`` measures):
no module over 500 lines, no function over 50, no circle of file imports (function-level
imports count), unless listed in ``shape.ALLOWED`` with a reason; benchmarks/ and scripts/
under looser limits (``shape.ALLOWED_SCRIPTS``); no stale entry in either table; every
"pip install" advice goes through ``MissingDependencyError``."""

from __future__ import annotations

import ast
from pathlib import Path

from script_modules import ROOT, load_script

shape = load_script("shape")


def test_no_module_over_the_limit() -> None:
    big = [s for s in shape.over(shape.modules(), shape.MAX_MODULE_LINES)
           if s.where not in shape.ALLOWED]
    assert not big, (f"modules over {shape.MAX_MODULE_LINES} lines (split them by what they "
                     "hold, or list them in scripts/shape.py ALLOWED with a reason):\n"
                     + "\n".join(f"  {s.lines}  {s.where}" for s in big))


def test_no_function_over_the_limit() -> None:
    long = [s for s in shape.over(shape.functions(), shape.MAX_FUNCTION_LINES)
            if s.where not in shape.ALLOWED]
    assert not long, (f"functions over {shape.MAX_FUNCTION_LINES} lines:\n"
                      + "\n".join(f"  {s.lines}  {s.where}" for s in long))


def test_allowed_entries_are_still_needed() -> None:
    stale = shape.stale(shape.ALLOWED, [*shape.modules(), *shape.functions()],
                        shape.MAX_MODULE_LINES, shape.MAX_FUNCTION_LINES)
    assert not stale, f"ALLOWED entries no longer over their limit (remove them): {stale}"


def test_no_benchmark_or_script_over_the_looser_limits() -> None:
    mods, funcs = shape.script_sizes()
    assert any(m.where.startswith("benchmarks/") for m in mods)  # the folders were read
    big = [s for s in [*shape.over(mods, shape.MAX_SCRIPT_MODULE_LINES),
                       *shape.over(funcs, shape.MAX_SCRIPT_FUNCTION_LINES)]
           if s.where not in shape.ALLOWED_SCRIPTS]
    assert not big, (f"benchmarks/scripts over {shape.MAX_SCRIPT_MODULE_LINES} lines a module "
                     f"or {shape.MAX_SCRIPT_FUNCTION_LINES} a function (split them, or list "
                     "them in scripts/shape.py ALLOWED_SCRIPTS with a reason):\n"
                     + "\n".join(f"  {s.lines}  {s.where}" for s in big))


def test_allowed_script_entries_are_still_needed() -> None:
    mods, funcs = shape.script_sizes()
    stale = shape.stale(shape.ALLOWED_SCRIPTS, [*mods, *funcs], shape.MAX_SCRIPT_MODULE_LINES,
                        shape.MAX_SCRIPT_FUNCTION_LINES)
    assert not stale, f"ALLOWED_SCRIPTS entries no longer over their limit (remove them): {stale}"


def test_a_stale_entry_is_found(tmp_path: Path) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bench_x.py").write_text(
        "def long():\n" + "    x = 1\n" * 90 + "    return x\n\n\ndef short():\n    return 1\n")
    mods, funcs = shape.script_sizes(tmp_path)
    assert [(s.where, s.lines) for s in funcs] == [("benchmarks/bench_x.py:long", 92),
                                                   ("benchmarks/bench_x.py:short", 2)]
    assert [(s.where, s.lines) for s in mods] == [("benchmarks/bench_x.py", 96)]
    allowed = {"benchmarks/bench_x.py:long": "needed", "benchmarks/bench_x.py:short": "stale",
               "benchmarks/bench_x.py": "needed", "benchmarks/gone.py": "stale: no such file"}
    assert shape.stale(allowed, [*mods, *funcs], 95, 80) == [
        "benchmarks/bench_x.py:short", "benchmarks/gone.py"]
    assert shape.stale(allowed, [*mods, *funcs], 96, 92) == list(allowed)  # at the limit: stale


def test_no_circle_of_file_imports() -> None:
    found = shape.circles(shape.file_imports())
    assert not found, ("modules that import each other (also through function-level "
                       "imports):\n" + "\n".join("  {" + ", ".join(c) + "}" for c in found))


def test_the_measures_see_what_they_claim(tmp_path: Path) -> None:
    package = tmp_path / "medverify"
    (package / "kb").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "kb" / "__init__.py").write_text("")
    (package / "kb" / "store.py").write_text(
        "def f():\n    from medverify.kb import ingest\n    return ingest\n")
    (package / "kb" / "ingest.py").write_text(
        "from medverify.kb.store import f\n\nclass A:\n    def g(self):\n"
        + "        x = 1\n" * 70 + "        return x\n")
    assert shape.circles(shape.file_imports(tmp_path)) == [
        ["medverify.kb.ingest", "medverify.kb.store"]]
    funcs = {s.where: s.lines for s in shape.functions(tmp_path)}
    assert funcs["medverify/kb/ingest.py:A.g"] == 72
    assert funcs["medverify/kb/store.py:f"] == 3
    assert [s.where for s in shape.over(shape.modules(tmp_path), 60)] == [
        "medverify/kb/ingest.py"]


# A corrupt model file is bad data (an InputError) whose fix is reinstalling its package.
PIP_ADVICE_ALSO_IN = {"MissingDependencyError", "CorruptModelError"}


def _raises_with_pip_advice(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
            continue
        texts = [n.value for n in ast.walk(node.exc)
                 if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        func = node.exc.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if any("pip install" in t for t in texts) and name not in PIP_ADVICE_ALSO_IN:
            found.append((node.lineno, name))
    return found


def test_pip_install_advice_goes_through_missing_dependency_error() -> None:
    bad = []
    for path in sorted((ROOT / "src" / "medverify").rglob("*.py")):
        tree = shape._import_graph().parsed(path)
        bad += [f"{path.relative_to(ROOT)}:{line} raises {name}"
                for line, name in _raises_with_pip_advice(tree)]
    assert not bad, "raise MissingDependencyError(package, extra, ...) instead:\n" + "\n".join(bad)


def test_the_pip_advice_check_sees_a_plain_error() -> None:
    tree = ast.parse('def f():\n    raise ConfigError("run pip install x")\n')
    assert _raises_with_pip_advice(tree) == [(2, "ConfigError")]
