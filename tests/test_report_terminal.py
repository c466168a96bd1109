from __future__ import annotations

import io

from rich.console import Console

from medverify.records import Answer, Category, Claim, Report
from medverify.report.terminal import print_summary
from report_fixtures import example_report, result_of


def recorded(report: Report, width: int = 140) -> str:
    console = Console(record=True, width=width, file=io.StringIO(), color_system="truecolor")
    print_summary(report, console)
    return console.export_text()


def test_summary_lists_every_claim_and_the_numbers() -> None:
    text = recorded(example_report())
    for claim_id in ("c1", "c4", "c5", "c8"):
        assert f"│ {claim_id} " in text, claim_id
    for expected in (
        "✗ HALLUCINATION",
        "! ERROR",
        "judge timed out after 60 s",
        "ada-soc-2024-9 · ADA Standards",
        "Statement-level support: 57.1% (4 of 7 scored claims are FACT)",
        "Response-level support: not supported",
        "Mean score: 0.71",
        "FACT 4, HALLUCINATION 1, JUDGMENT_ERROR 1, COVERAGE_GAP 1, ERROR 1",
        "Errors: 1 of 8 claims not scored",
        "judge: 9,873 prompt + 1,204 completion tokens in 8 calls (2 cached)",
        "all stages: 10,285 prompt",
    ):
        assert expected in text, expected


def test_summary_colours_categories() -> None:
    console = Console(record=True, width=140, file=io.StringIO(), color_system="truecolor")
    print_summary(example_report(), console)
    html = console.export_html(inline_styles=True)
    assert ("HALLUCINATION" in html and "color: #800000" in html) or "color: #ff0000" in html


def test_report_text_is_not_console_markup() -> None:
    claim = Claim(id="[bold]c1[/]", text="Take [red]2 g[/red] daily [/bogus]")
    result = result_of(Category.FACT).model_copy(update={"claim": claim})
    report = example_report([result], Answer(text="x", question="[blink]Q?[/]"))
    text = recorded(report)
    assert "[bold]c1[/]" in text and "Take [red]2 g[/red] daily [/bogus]" in text
    assert "[blink]Q?[/]" in text


def test_empty_report_summary() -> None:
    text = recorded(example_report([], Answer(text="Nothing to check.")))
    assert "No claims were extracted" in text
    assert "Statement-level support: n/a" in text
    assert "Response-level support: unknown" in text
