"""Generate docs/cli.md from the click command tree, so the CLI docs cannot drift.

Usage: python scripts/gen_cli_docs.py [--check]
(--check exits 1 when docs/cli.md is out of date; the test suite runs it.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from medverify.cli import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"

HEADER = """# Command line reference

Generated from the code by `python scripts/gen_cli_docs.py`; a test fails when it is out of
date. Every command exits 0 on success, 1 when it ran but some item ended in `ERROR`
(`check`), and 2 when it could not run (bad input, missing knowledge base, bad config), with
a message that says what to do. Long-running commands show a progress bar on a terminal.
"""


def _walk(command: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            found += _walk(command.commands[name], [*path, name])
    return found


def render() -> str:
    parts = [HEADER]
    for path, command in _walk(main, ["medverify"]):
        ctx = click.Context(command, info_name=" ".join(path), terminal_width=100)
        parts.append(f"\n## `{' '.join(path)}`\n\n```text\n{command.get_help(ctx)}\n```\n")
    return "".join(parts)


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if DOC.exists() and DOC.read_text("utf-8") == text else 1)
    DOC.write_text(text, "utf-8")
    print(f"wrote {DOC}")
