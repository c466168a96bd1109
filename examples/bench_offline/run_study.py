"""A complete SourceCheckup-style study, fully offline: no API key, no network.

Five scripted models with different citation habits (medverify.testing.citers) answer
medical questions from three question sources; their cited pages are served by a local
page server; medverify asks, fetches (through the same safe fetcher as a real run, with
the local server explicitly allowed), parses statements, judges every statement against
every source with the built-in verifier, and writes the study report.

    python examples/bench_offline/run_study.py --out bench-example
    open bench-example/report.html
    medverify bench report bench-example        # recompute everything, no model called

Interrupted (Ctrl-C, a crash)? Run the same command again: the study resumes. The page
server listens on the port recorded in ``OUT/page_server.json`` by the first run, so the
URLs stored in the replies still point at it and a resumed study gives the same numbers as
an uninterrupted one.

A real study is the same with real model specs and a question file:

    medverify bench run --models openai:gpt-4o-mini,ollama:llama3.1 \
        --questions questions.jsonl --out my-study
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from rich.console import Console

from medverify.bench.runner import BenchRunner
from medverify.cli.bench_tables import print_bench_summary
from medverify.config import Config
from medverify.kit import FlowKit
from medverify.records import Document
from medverify.testing import (
    PageServer,
    register_citing_models,
    study_documents,
    study_questions,
)
from medverify.testing.citers import medquad_questions, references_for
from medverify.testing.judge import WordJudge

HABITS = ("careful", "overreaching", "hallucinating", "freetext", "unreliable")
SERVER_FILE = "page_server.json"


def recorded_port(out: Path) -> int:
    """The page server's port recorded by an earlier run of ``out`` (0: pick a free one).
    Kept with ``--fresh`` too: the request cache in ``out`` replays replies citing it."""
    path = out / SERVER_FILE
    if not path.is_file():
        return 0
    try:
        return int(json.loads(path.read_text("utf-8"))["port"])
    except (ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"{path} is unreadable ({exc}); delete it or use --fresh") from None


def start_pages(documents: list[Document], out: Path) -> PageServer:
    """The page server on the run directory's recorded port (recorded on first use), so
    that a resumed study's stored URLs still reach it."""
    port = recorded_port(out)
    try:
        pages = PageServer.from_documents(documents, port=port).start()
    except OSError as exc:
        raise SystemExit(
            f"cannot serve the study's pages on port {port}, recorded in {out / SERVER_FILE} "
            f"by the first run ({exc}): the stored replies cite that port. Free it and run "
            "again (or delete the run directory to start over)") from None
    out.mkdir(parents=True, exist_ok=True)
    (out / SERVER_FILE).write_text(json.dumps({"port": pages.address[1]}) + "\n", "utf-8")
    return pages


async def study(out: Path, n_medquad: int, judge: str, fresh: bool) -> int:
    questions = study_questions() + medquad_questions(n_medquad)
    documents = study_documents() + [q.reference for q in questions[12:] if q.reference]
    pages = start_pages(documents, out)
    try:
        specs = register_citing_models(HABITS, references_for(questions), pages.url_for)
        config = Config.load(
            fetch={"allow": [pages.host_port], "cache_path": out / "fetch-cache.db"},
            store=out / "runs.db",
            cache_path=out / "cache.db",
        )
        runner = BenchRunner.from_config(
            config, models=[f"{label}={spec}" for label, spec in specs.items()], run_dir=out,
            fresh=fresh, kit=FlowKit(judge=WordJudge() if judge == "word" else None))
        try:
            summary = await runner.run(questions)
        finally:
            await runner.aclose()
    finally:
        pages.close()
    print_bench_summary(summary, Console())
    print(f"\nreport: {out / 'report.html'}\nrecompute: medverify bench report {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-example"))
    parser.add_argument("--medquad", type=int, default=24,
                        help="questions from the shipped MedQuAD sample (besides the 12 "
                        "built-in study questions)")
    parser.add_argument("--judge", choices=["builtin", "word"], default="builtin",
                        help="builtin: the shipped verifier (default); word: a word-overlap "
                        "test judge, for a quick look")
    parser.add_argument("--fresh", action="store_true", help="start over")
    args = parser.parse_args(argv)
    return asyncio.run(study(args.out, args.medquad, args.judge, args.fresh))


if __name__ == "__main__":
    sys.exit(main())
