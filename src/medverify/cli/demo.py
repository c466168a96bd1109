"""``medverify demo``: the offline demo (no model, no key, no network)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from medverify.cli import main
from medverify.cli._common import console
from medverify.demo import DEFAULT_OUT, DemoResult, arun_demo
from medverify.report.terminal import print_summary
from medverify.report.view import CATEGORY_STYLES


@main.command()
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_OUT,
    show_default=True,
    help="Folder for the knowledge base and the reports (reused when run again).",
)
@click.option(
    "--full",
    is_flag=True,
    help="Ingest the whole MedQuAD sample (several minutes on 2 cores) instead of "
    "the demo's subset.",
)
@click.option("--no-record", is_flag=True, help="Do not record the run in OUT/runs.db.")
def demo(out_dir: Path, full: bool, no_record: bool) -> None:
    """Check example answers with planted errors against the shipped MedQuAD sample."""
    console.print(f"Building or reusing the demo knowledge base in {out_dir / 'kb'} ...")
    result = asyncio.run(arun_demo(out_dir, record=not no_record, full=full))
    out = Console()
    reports = result.reports
    for number, report in enumerate(reports, 1):
        out.rule(f"Answer {number} of {len(reports)}")
        print_summary(report, out)
    out.rule("Overview")
    out.print(overview_table(result))
    for line in closing_lines(result):
        out.print(line)


def overview_table(result: DemoResult) -> Table:
    """Every claim: what was planted, what the judge said, and whether they agree."""
    table = Table(title="Planted versus judged", title_justify="left")
    for name in ("#", "claim", "planted", "judge", "agrees"):
        table.add_column(name, overflow="fold", ratio=4 if name == "claim" else None)
    for number, answer in enumerate(result.answers, 1):
        for claim in answer.claims:
            got = CATEGORY_STYLES[claim.got]
            planted = Text("—", style="dim")
            if claim.expected is not None:
                style = CATEGORY_STYLES[claim.expected]
                planted = Text(f"{style.symbol} {claim.expected.value}", style=style.rich)
                planted.append(f"\n{claim.kind}", style="dim")
            agrees = "✓" if claim.agrees else ("✗" if claim.expected else "—")
            judged = Text(f"{got.symbol} {claim.got.value}", style=got.rich)
            if claim.confident is False:
                judged.append(f"\nnot sure: {claim.not_sure or 'no reason given'}", style="dim")
            elif claim.confident:
                judged.append("\nconfident", style="bold")
            table.add_row(str(number), Text(claim.claim), planted, judged, agrees)
    return table


def closing_lines(result: DemoResult) -> list[Text]:
    claims = result.claims
    planted = [c for c in claims if c.expected is not None]
    agree = sum(1 for c in planted if c.agrees)
    sure = [c for c in planted if c.confident]
    wrong = sum(1 for c in planted if c.confidently_wrong)
    kb = "built" if result.kb_documents_added else "reused"
    lines = [
        Text.assemble(
            "The judge agrees with the planted label on ",
            (f"{agree} of {len(planted)}", "bold"),
            " claims; it is confident on ",
            (f"{len(sure)}", "bold"),
            f" ({sum(1 for c in sure if c.agrees)} agree), and ",
            (f"{wrong}", "bold"),
            " confident verdicts disagree with the plan. The others are shown as not sure, "
            "with the reason.",
        ),
        Text(
            f"Knowledge base {kb} in {result.kb_seconds:.1f} s ({result.kb_documents} "
            f"documents, {result.kb_documents_added} added now); "
            f"answers checked in {result.check_seconds:.1f} s with {result.judge}."
        ),
        Text.assemble("Overview page: ", (str(result.html_path), "bold")),
        Text(f"One page per answer: {result.out_dir / 'answers'}/"),
        Text(f"All reports as JSON: {result.json_path}"),
    ]
    if result.store_path is not None:
        lines.append(Text(f"Run recorded: medverify runs list --store {result.store_path}"))
    return lines
