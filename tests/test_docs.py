from __future__ import annotations

import importlib
import re
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_cli_docs_are_up_to_date() -> None:
    module = runpy.run_path(str(ROOT / "scripts" / "gen_cli_docs.py"))
    expected = module["render"]()
    assert (ROOT / "docs" / "cli.md").read_text("utf-8") == expected, (
        "docs/cli.md is stale: run `python scripts/gen_cli_docs.py`"
    )


def test_every_config_field_is_documented() -> None:
    from medverify.config import Config

    doc = (ROOT / "docs" / "configuration.md").read_text("utf-8")
    for name, field in Config.model_fields.items():
        sub = field.annotation
        names = list(sub.model_fields) if hasattr(sub, "model_fields") else [name]
        for key in names:
            assert f"`{key}`" in doc or f" {key}`" in doc or f"{key}," in doc, key


def test_readme_quickstart_has_exactly_two_commands() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    block = readme.split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip()]
    assert [c.split("#")[0].strip() for c in commands] == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text("utf-8")
    assert "make test" in ci


def _backticked(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


PLACEHOLDER = re.compile(r"<|\*|NNNN|vN\b|\bN\b|\.\.\.|\s")
PATH_BASES = ("", "src", "src/medverify")


def architecture_paths(text: str) -> list[str]:
    """Backticked paths of a doc: a token with a ``/`` or ending in ``.py``, without a
    placeholder (``<stage>``, ``NNNN``, ``vN``, ``*``) or a space."""
    found = []
    for token in _backticked(text):
        if PLACEHOLDER.search(token) or token.startswith(("/", "http", "-")):
            continue
        if token.endswith(".py") or ("/" in token and token.rstrip("/").replace("/", "")
                                     .replace("_", "").replace(".", "").isalnum()):
            found.append(token)
    return found


def test_every_path_the_architecture_names_exists() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text("utf-8")
    paths = architecture_paths(doc)
    assert len(paths) > 30  # the doc names its modules; the pattern must see them
    missing = [p for p in paths if not any((ROOT / base / p).exists() for base in PATH_BASES)
               and not p.startswith(("judge/v", "answer/v", "bench_answer/v"))]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_path_check_sees_a_missing_path() -> None:
    doc = "`tests/test_public_api.py`, `store/runs.py`, `prompts/<stage>/vN.md`, `x y/`"
    assert architecture_paths(doc) == ["tests/test_public_api.py", "store/runs.py"]
    assert not (ROOT / "src" / "medverify" / "store" / "nope.py").exists()


def test_every_module_the_architecture_names_exists() -> None:
    """Dotted names in the doc (``checker.Checker``, ``harness.RunHarness``) resolve."""
    doc = (ROOT / "docs" / "architecture.md").read_text("utf-8")
    units = {p.stem for p in (ROOT / "src" / "medverify").iterdir()
             if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())}
    bad = []
    for token in _backticked(doc):
        name = token.split("(")[0]
        parts = name.split(".")
        if (len(parts) < 2 or parts[0] not in units or parts[-1] in ("py", "md", "json")
                or not all(x.isidentifier() for x in parts)):
            continue
        if _resolve(parts) is None:
            bad.append(token)
    assert not bad, f"docs/architecture.md names objects that do not exist: {bad}"


def _resolve(parts: list[str]) -> object | None:
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(["medverify", *parts[:cut]]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                return None
        return obj
    return None
