from __future__ import annotations

import io
import re

from rich.console import Console

from medverify.records import Answer, Category, CheckFinding, CheckKind, Claim, ClaimResult, Report
from medverify.report.metrics import compute_metrics
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


def test_control_characters_in_claims_and_names_are_printed_escaped() -> None:
    claim = Claim(id="c1", text="Take 2 g\x1b[31m daily\rforged line")
    result = result_of(Category.FACT).model_copy(update={"claim": claim})
    passages = [p.model_copy(update={"doc_id": "evil\ndoc", "title": "T\x1b[2J"})
                for p in result.passages]
    result = result.model_copy(update={"passages": passages})
    text = recorded(example_report([result]))
    assert "\x1b" not in text and "\r" not in text
    assert "\\x1b[31m" in text or "\\x1b" in text


def test_empty_report_summary() -> None:
    text = recorded(example_report([], Answer(text="Nothing to check.")))
    assert "No claims were extracted" in text
    assert "Statement-level support: n/a" in text
    assert "Response-level support: unknown" in text


# ---- confident or not sure -------------------------------------------------------------

HOSTILE = "<script>alert(1)</script> [bold]x[/]"
REASON = f"P(supported)=0.62, below the 0.81 needed for 70% precision {HOSTILE}"


def _finding(veto: bool = False) -> CheckFinding:
    return CheckFinding(kind=CheckKind.NUMBER, veto=veto, passage_id="ada-9#3",
                        claim_says="every 2 years", passage_says=f"every 10 years {HOSTILE}",
                        reason=f"the claim says every 2 years; the passage says {HOSTILE}")


def assessed_report(veto: bool = False) -> Report:
    """The example with claim c1 not sure (one finding) and c2 confident at 93%."""
    report = example_report()
    results = list(report.results)
    first = results[0]
    assert first.verdict is not None
    verdict = first.verdict.model_copy(update={
        "findings": [_finding(veto)], "confident": False, "confidence": 0.62,
        "not_sure": REASON})
    results[0] = ClaimResult.from_verdict(first.claim, first.passages, verdict)
    results[1] = results[1].model_copy(update={"confident": True, "confidence": 0.934})
    return report.model_copy(update={"results": results, "metrics": compute_metrics(results)})


def _row(text: str, claim_id: str) -> str:
    """The table lines of one claim: from its id to the next claim's row."""
    start = text.index(f"│ {claim_id} ")
    after = re.search(r"│ c\d+ |└", text[start + 4:])
    assert after is not None
    return text[start:start + 4 + after.start()]


def test_a_not_sure_verdict_shows_the_marker_the_reason_and_its_findings() -> None:
    text = recorded(assessed_report(), width=220)
    row = _row(text, "c1")
    assert "✓ FACT" in row and "? NOT SURE" in row
    assert f"not sure: {REASON}" in row  # printed as plain text, never as markup
    assert "⚑ number (not sure): the claim says every 2 years; the passage says" in row
    assert "(judge evidence not counted)" not in row  # a finding without veto counts it
    assert "confident, 93%" in _row(text, "c2") and "NOT SURE" not in _row(text, "c2")
    assert "NOT SURE" not in _row(text, "c3") and "confident" not in _row(text, "c3")
    assert "Counts: FACT 4 (1 confident, 1 not sure), HALLUCINATION 1," in text
    assert "Not counted" not in text


def test_a_vetoed_support_is_listed_as_not_counted() -> None:
    text = recorded(assessed_report(veto=True), width=220)
    assert "⚑ number (support not counted)" in _row(text, "c1")
    assert "(judge evidence not counted)" in _row(text, "c1")
    assert "Not counted (1):" in text and "(support not counted)" in text


def test_verdicts_never_assessed_print_as_before() -> None:
    text = recorded(example_report())
    assert "NOT SURE" not in text and "confident" not in text
    assert "Counts: FACT 4, HALLUCINATION 1," in text
