"""``medverify answer``: answer a question from the top chunks of a knowledge base."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from medverify.answerer import aanswer_question
from medverify.cli import main
from medverify.cli._common import config_option, console, json_out_option, load_config
from medverify.errors import ConfigError, InputError
from medverify.factcheck.records import RagAnswer
from medverify.files import atomic_write_text
from medverify.report.view import shorten
from medverify.text import printable

SNIPPET_CHARS = 100
NO_MODEL = ("medverify answer generates text: pass --model SPEC (e.g. openai:gpt-4o-mini, "
            "see docs/models.md) or set `model` in the config file")


@main.command()
@click.argument("question", metavar="QUESTION|-")
@click.option("--kb", type=click.Path(path_type=Path, file_okay=False),
              help="Knowledge base directory.")
@click.option("--model", "-m", help="Model spec of the generator (see docs/models.md).")
@click.option("--top-k", type=int, help="Chunks retrieved for the question (default 7).")
@json_out_option("Write the answer, its chunks and token usage here as JSON.")
@config_option
def answer(question: str, kb: Path | None, model: str | None, top_k: int | None,
           json_out: Path | None, config_path: Path | None) -> None:
    """Answer QUESTION (or the question on stdin, with -) from the top chunks of a
    knowledge base, and show the chunks used.

    Exit status: 0 with an answer, 1 when the model failed, 2 when it could not run."""
    config = load_config(config_path, kb=kb, model=model,
                         answer={"top_k": top_k} if top_k else None)
    if not config.model:
        raise ConfigError(NO_MODEL)
    text = _read_question(question)
    result = asyncio.run(aanswer_question(text, config=config))
    print_answer(result, Console(highlight=False))
    console.print(usage_line(result))
    if json_out:
        atomic_write_text(json_out, result.model_dump_json(indent=2) + "\n")
        console.print(f"JSON: {json_out}")
    if result.error:
        console.print(Text(f"error: {result.error}", style="red"))
        sys.exit(1)


def _read_question(question: str) -> str:
    if question != "-":
        return question
    try:
        return sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"the question on stdin is not UTF-8 text: {exc}") from None


def print_answer(result: RagAnswer, out: Console) -> None:
    """The answer, then the numbered chunks it was generated from (untrusted text is
    printed as Text, never as console markup)."""
    out.print(Text(result.text or "(no answer)", style="" if result.text else "dim"))
    out.print()
    out.print(Text(f"Chunks used ({len(result.chunks)}):", style="bold"))
    for number, chunk in enumerate(result.chunks, start=1):
        line = Text(f"[{number}] ", style="bold")
        line.append(printable(chunk.title or chunk.doc_id), style="cyan")
        line.append(f"  ({printable(chunk.doc_id)})", style="dim")
        out.print(line)
        out.print(Text("    " + shorten(chunk.text, SNIPPET_CHARS)))


def usage_line(result: RagAnswer) -> Text:
    usage = result.usage
    cached = " (cached)" if usage.cached_calls else ""
    return Text(f"{result.model} · {result.prompt_version} · tokens: {usage.prompt_tokens} "
                f"prompt, {usage.completion_tokens} completion{cached}", style="dim")
