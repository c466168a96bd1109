from __future__ import annotations

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
